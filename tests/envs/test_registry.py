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
        "arithmetic", "code_tests", "files", "gsm8k", "hotpotqa", "maze", "miniwob", "scienceworld", "textarena",
        "textworld_express",
    }  # fmt: skip
    assert set(RETRIEVERS) == {"bm25", "context", "http"}
    assert set(WORLDS) == {"maze", "scienceworld", "textarena", "textworld_express"}


def test_an_entry_point_is_named_without_importing_and_imported_when_looked_up(tmp_path, monkeypatch):
    (tmp_path / "late_member.py").write_text("IMPORTS = []\nIMPORTS.append(1)\n\ndef member():\n    return 'late'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = Registry("thing", where="here.py")
    registry.add_entry_point("late", "late_member:member")
    registry.add("early", str)
    import sys

    assert "late" in registry and list(registry) == ["early", "late"] and len(registry) == 2
    assert "late_member" not in sys.modules  # naming, listing and testing membership import nothing
    assert registry.get("late")() == "late"
    assert sys.modules["late_member"].IMPORTS == [1]
    assert registry.get("late") is registry.get("late")  # imported once
    with pytest.raises(DuplicateRegistrationError, match="'late' is already registered"):
        registry.add("late", str)


def test_a_missing_name_among_entry_points_suggests_the_close_one():
    registry = Registry("thing", where="here.py")
    registry.add_entry_point("vllm_server", "nowhere_at_all:member")
    with pytest.raises(UnknownNameError, match="did you mean 'vllm_server'"):
        registry.get("vllm_servr")


def test_an_alias_names_an_entry_without_listing_it_twice():
    registry = Registry("thing", where="here.py")
    registry.add("tool_calls", "the parser")
    registry.add_alias("hf", "tool_calls")
    assert registry.get("hf") is registry.get("tool_calls") and "hf" in registry
    assert list(registry) == ["tool_calls"] and registry.canonical("hf") == "tool_calls"
    assert registry.canonical("tool_calls") == "tool_calls"
    with pytest.raises(DuplicateRegistrationError, match="'hf' is already registered"):
        registry.add("hf", "another")
    with pytest.raises(UnknownNameError, match="thing 'nothing' is not registered"):
        registry.add_alias("x", "nothing")
    with pytest.raises(UnknownNameError, match=r"did you mean 'hf'\? Known: tool_calls \(also hf\)\."):
        registry.get("hff")
    assert PARSERS.get("hf") is PARSERS.get("tool_calls")  # AgentFly's agent_type=hf
