import pytest

from agentfly_envs import PARSERS, REWARDS, TASKS, TOOLS
from agentfly_envs.errors import DuplicateRegistrationError, UnknownNameError
from agentfly_envs.registry import Registry
from agentfly_envs.retrieval import RETRIEVERS
from agentfly_envs.worlds import WORLDS


def test_get_returns_registered_entry_and_iterates_sorted():
    registry = Registry("widget", where="here")
    registry.add("b", 2)
    registry.add("a", 1)
    assert registry.get("a") == 1
    assert list(registry) == ["a", "b"]
    assert "b" in registry and "c" not in registry
    assert len(registry) == 2


def test_duplicate_name_raises():
    registry = Registry("widget", where="here")
    registry.add("a", 1)
    with pytest.raises(DuplicateRegistrationError, match="'a' is already registered"):
        registry.add("a", 2)


def test_unknown_name_suggests_close_match_and_lists_known():
    with pytest.raises(UnknownNameError) as error:
        REWARDS.get("math_reward_string_eq")
    message = str(error.value)
    assert "did you mean 'math_reward_string_equal'" in message
    assert "qa_f1_reward" in message
    assert isinstance(error.value, KeyError)


def test_builtin_registries_hold_what_the_readme_lists():
    assert set(TOOLS) == {
        "act", "answer", "calculator", "click", "google_search", "press", "python", "python_executor", "scroll",
        "search", "type", "valid_actions",
    }  # fmt: skip
    assert set(PARSERS) == {"code", "gui", "hermes", "react", "tool_calls"}
    assert set(REWARDS) == {
        "code_reward", "math_equal", "math_reward_string_equal", "qa_em_reward", "qa_f1_reward", "world_score",
        "world_success",
    }  # fmt: skip
    assert set(TASKS) == {
        "arithmetic", "code_tests", "files", "gsm8k", "hotpotqa", "miniwob", "scienceworld", "textarena",
        "textworld_express",
    }  # fmt: skip
    assert set(RETRIEVERS) == {"bm25", "context", "http"}
    assert set(WORLDS) == {"scienceworld", "textarena", "textworld_express"}
