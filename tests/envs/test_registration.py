"""The code, math-with-Python and search envs: golden episodes in every agent format that makes sense,
the prompts each format gets, and agent mistakes as error observations."""

import gymnasium as gym
import pytest

import agentfly_envs  # noqa: F401
from tests.envs.golden import replay_golden_episodes
from tests.helpers.paths import HUMANEVAL_SAMPLE, OFFLINE_KWARGS

FORMATS = {
    "agentfly/Math-Python": ("hermes", "react", "code", "tool_calls"),
    "agentfly/Code-Tests": ("hermes", "react", "code", "tool_calls"),
    "agentfly/HotpotQA-Search": ("hermes", "react", "tool_calls"),
}
CASES = [(env_id, parser) for env_id, parsers in FORMATS.items() for parser in parsers]


@pytest.mark.parametrize(("env_id", "parser"), CASES)
def test_golden_episodes_score_one_in_every_format(env_id, parser):
    env = gym.make(env_id, parser=parser, **OFFLINE_KWARGS[env_id])
    infos = replay_golden_episodes(env)
    if env_id == "agentfly/Code-Tests":
        assert all(info["reward_components"]["passed"] == 1.0 for info in infos)
    if env_id == "agentfly/HotpotQA-Search":
        assert all(info["reward_components"]["em"] == 1.0 for info in infos)
    env.close()


@pytest.mark.parametrize("env_id", ["agentfly/Math-Python", "agentfly/Code-Tests"])
def test_golden_episodes_with_an_answer_tool(env_id):
    env = gym.make(env_id, tools=("python_executor", "answer"), **OFFLINE_KWARGS[env_id])
    replay_golden_episodes(env)
    env.close()


def test_code_tests_reads_humaneval_style_rows():
    env = gym.make("agentfly/Code-Tests", data_files=str(HUMANEVAL_SAMPLE))
    observation, _ = env.reset(options={"index": 0})
    assert observation.startswith("Complete this Python function") and "def second_largest" in observation
    replay_golden_episodes(env)
    env.close()


def test_code_tests_scores_partial_solutions_and_runs_code_while_working():
    env = gym.make("agentfly/Code-Tests", **OFFLINE_KWARGS["agentfly/Code-Tests"])
    observation, info = env.reset(options={"index": 2})  # rotate_right, 4 tests
    assert "`rotate_right`" in observation and "assert rotate_right([1, 2, 3, 4, 5], 2)" in observation
    call = (
        '<tool_call>{"name": "python_executor", "arguments": {"code": "[1, 2, 3][-1:] + [1, 2, 3][:-1]"}}</tool_call>'
    )
    assert env.step(call)[0] == "[3, 1, 2]\n"
    answer = "Done:\n```python\ndef rotate_right(items, k):\n    return items\n```"  # right for k=0 and []
    _, reward, terminated, _, info = env.step(answer)
    assert terminated and reward == 0.5
    assert info["reward_components"] == {
        "pass_rate": 0.5,
        "passed": 0.0,
        "tests_passed": 2.0,
        "tests": 4.0,
        "code_found": 1.0,
    }
    env.close()


def test_math_python_takes_plain_answer_files_and_math_equal(tmp_path):
    data = tmp_path / "qa.jsonl"
    data.write_text('{"question": "What is half of 3?", "answer": "\\\\frac{3}{2}"}\n')
    env = gym.make("agentfly/Math-Python", data_files=str(data), reward="math_equal")
    _, info = env.reset(options={"index": 0})
    assert "Compute every arithmetic step with Python code." in info["messages"][0]["content"]
    assert [tool["function"]["name"] for tool in info["tools"]] == ["python_executor"]
    call = '<tool_call>{"name": "python_executor", "arguments": {"code": "3 / 2"}}</tool_call>'
    assert env.step(call)[0] == "1.5\n"
    _, reward, terminated, *_ = env.step("So half of 3 is \\boxed{1.5}.")
    assert terminated and reward == 1.0
    env.close()


def test_each_format_tells_the_model_how_to_call_tools():
    prompts = {}
    for parser in FORMATS["agentfly/HotpotQA-Search"]:
        env = gym.make("agentfly/HotpotQA-Search", parser=parser, **OFFLINE_KWARGS["agentfly/HotpotQA-Search"])
        _, info = env.reset(options={"index": 0})
        prompts[parser] = info["messages"][0]["content"]
        assert [tool["function"]["name"] for tool in info["tools"]] == ["search", "answer"]
        env.close()
    assert "search tool" in prompts["hermes"] and "call the answer tool" in prompts["hermes"]
    assert "Action: <tool name>" in prompts["react"] and "- search: Search for passages" in prompts["react"]
    env = gym.make("agentfly/Code-Tests", parser="code", **OFFLINE_KWARGS["agentfly/Code-Tests"])
    _, info = env.reset(options={"index": 0})
    assert "```python\nprint(6 * 7)\n```" in info["messages"][0]["content"]
    assert "plain ``` fence" in info["messages"][0]["content"]
    env.close()


def test_search_env_has_no_code_format():
    with pytest.raises(ValueError, match="calls only the 'python' tool"):
        gym.make("agentfly/HotpotQA-Search", parser="code", **OFFLINE_KWARGS["agentfly/HotpotQA-Search"])


@pytest.mark.parametrize(
    ("env_id", "action", "kind", "fragment"),
    [
        ("agentfly/HotpotQA-Search", '<tool_call>{"name": "search", "arguments": {"query": "  "}}</tool_call>',
         "tool_error", "the query is empty"),
        ("agentfly/HotpotQA-Search", '<tool_call>{"name": "search", "arguments": {"query": "zzzq"}}</tool_call>',
         "tool_error", "no passage matches 'zzzq'"),
        ("agentfly/HotpotQA-Search", '<tool_call>{"name": "serch", "arguments": {"query": "Paris"}}</tool_call>',
         "unknown_tool", "did you mean 'search'"),
        ("agentfly/HotpotQA-Search", '<tool_call>{"name": "search", "arguments": {"q": "Paris"}}</tool_call>',
         "bad_arguments", "unknown argument(s) ['q']"),
        ("agentfly/Code-Tests", '<tool_call>{"name": "python_executor", "arguments": {"code": "1",}}</tool_call>',
         "parse_error", "not valid JSON"),
        ("agentfly/Code-Tests",
         '<tool_call>{"name": "python_executor", "arguments": {"code": "import os; os.write(1, bytes([255]))"}}'
         "</tool_call>", "tool_error", "not valid UTF-8"),
    ],
)  # fmt: skip
def test_agent_mistakes_are_observations_with_counts(env_id, action, kind, fragment):
    env = gym.make(env_id, **OFFLINE_KWARGS[env_id])
    env.reset(options={"index": 0})
    observation, reward, terminated, truncated, info = env.step(action)
    assert fragment in observation and observation.startswith("Error:")
    assert info["error_counts"][kind] == 1 and (reward, terminated, truncated) == (0.0, False, False)
    env.close()
