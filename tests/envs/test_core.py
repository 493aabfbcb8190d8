import gymnasium as gym
import pytest
from gymnasium.error import ResetNeeded

import agentfly_envs  # noqa: F401
from agentfly_envs import ERROR_KINDS, TOOLS, EpisodeFinishedError, TaskFormatError, ToolEnv
from agentfly_envs.core import truncate_middle
from agentfly_envs.parsers import PARSERS
from agentfly_envs.rewards import REWARDS, RewardResult
from tests.envs.hostile import HOSTILE_ACTIONS
from tests.helpers.tools import NAP

ROW = {"question": "Ava has 3 bags of 4 apples. How many apples?", "answer": "3*4=<<3*4=12>>12\n#### 12"}


def call(expression: str) -> str:
    return f'<tool_call>\n{{"name": "calculator", "arguments": {{"expression": "{expression}"}}}}\n</tool_call>'


@pytest.fixture
def env():
    env = gym.make("agentfly/Arith-Calc", max_turns=4)
    yield env
    env.close()


def test_reset_with_task_row(env):
    observation, info = env.reset(options={"task": ROW})
    assert observation == ROW["question"]
    assert info["task"] == ROW and info["task_index"] is None
    assert [m["role"] for m in info["messages"]] == ["system", "user"]
    assert info["messages"][1]["content"] == ROW["question"]
    assert "calculator" in info["messages"][0]["content"] and "\\boxed{N}" in info["messages"][0]["content"]
    assert [t["function"]["name"] for t in info["tools"]] == ["calculator"]


def test_reset_with_index_is_file_order_and_seed_draws_reproducibly(env):
    tasks = env.unwrapped.tasks
    _, info = env.reset(options={"index": 17})
    assert info["task"] == tasks.row(17) and info["task_index"] == 17
    first = env.reset(seed=3)[1]["task_index"]
    assert env.reset(seed=3)[1]["task_index"] == first
    draws = {env.reset()[1]["task_index"] for _ in range(20)}
    assert len(draws) > 1


def test_reset_rejects_bad_options_and_rows(env):
    with pytest.raises(ValueError, match="reset options"):
        env.reset(options={"row": ROW})
    with pytest.raises(IndexError, match=r"\[0, 10000\)"):
        env.reset(options={"index": 10_000})
    with pytest.raises(TaskFormatError, match=r"missing field\(s\) \['answer'\]"):
        env.reset(options={"task": {"question": "q"}})


def test_tool_turn_then_correct_answer(env):
    env.reset(options={"task": ROW})
    observation, reward, terminated, truncated, info = env.step("Let me multiply.\n" + call("3*4"))
    assert (observation, reward, terminated, truncated) == ("12", 0.0, False, False)
    assert info["messages"] == [
        {"role": "tool", "name": "calculator", "tool_call_id": info["tool_calls"][0]["id"], "content": "12"}
    ]
    assert info["tool_calls"][0]["function"] == {"name": "calculator", "arguments": {"expression": "3*4"}}
    assert len(info["tool_latency_s"]) == 1  # its value: test_tool_latency_is_reported_per_call
    assert info["turn"] == 1 and info["answer"] is None and info["reward_components"] == {}

    observation, reward, terminated, truncated, info = env.step("So there are \\boxed{12} apples.")
    assert (observation, reward, terminated, truncated) == ("", 1.0, True, False)
    assert info["messages"] == [] and info["answer"] == "So there are \\boxed{12} apples."
    assert info["reward_components"] == {"answer_found": 1.0, "correct": 1.0}


def test_tool_latency_is_reported_per_call(monkeypatch):
    monkeypatch.setitem(TOOLS._entries, "nap", NAP)
    env = ToolEnv(tools=("nap",))
    env.reset(options={"task": ROW})
    nap = '<tool_call>\n{{"name": "nap", "arguments": {{"seconds": {}}}}}\n</tool_call>'
    calls = nap.format(0.05) + nap.format(0.1)
    info = env.step(calls)[4]
    first, second = info["tool_latency_s"]
    assert 0.05 <= first < 1 and 0.1 <= second < 1


def _raises(response, ground_truth):
    raise ValueError(f"cannot score a {len(response)}-character answer\nsecond line")


@pytest.mark.parametrize(
    ("reward_fn", "reason"),
    [
        (_raises, "raised ValueError: cannot score a 17-character answer second line"),
        (lambda response, truth: RewardResult(float("nan")), "returned a non-finite score (nan)"),
        (lambda response, truth: RewardResult("high"), "returned a score of type str ('high'), not a number"),
        (lambda response, truth: 0.5, "returned float 0.5, not a RewardResult"),
    ],
    ids=["raises", "nan", "string", "bare_float"],
)
def test_a_failing_reward_scores_zero_and_says_why_in_info(monkeypatch, reward_fn, reason):
    monkeypatch.setitem(REWARDS._entries, "flaky", reward_fn)
    env = gym.make("agentfly/Arith-Calc", reward="flaky")
    env.reset(options={"task": ROW})
    _, reward, terminated, truncated, info = env.step("It is \\boxed{12}.")
    assert (reward, terminated, truncated) == (0.0, True, False) and type(reward) is float
    assert info["reward_error"] == f"reward function 'flaky' {reason}" and info["reward_components"] == {}


def test_a_working_reward_reports_no_reward_error(env):
    env.reset(options={"task": ROW})
    assert "reward_error" not in env.step("It is \\boxed{12}.")[4]


def test_wrong_answer_scores_zero(env):
    env.reset(options={"task": ROW})
    _, reward, terminated, _, info = env.step("It is \\boxed{13}.")
    assert terminated and reward == 0.0 and info["reward_components"]["correct"] == 0.0


def test_turn_budget_truncates_with_truncation_reward():
    env = gym.make("agentfly/Arith-Calc", max_turns=2, truncation_reward=-0.5)
    env.reset(options={"task": ROW})
    assert env.step(call("1+1"))[3] is False
    _, reward, terminated, truncated, _ = env.step(call("1+2"))
    assert (reward, terminated, truncated) == (-0.5, False, True)
    with pytest.raises(EpisodeFinishedError):
        env.step("\\boxed{12}")


def test_unknown_kwarg_suggests_the_close_one(gsm8k_sample):
    with pytest.raises(TypeError, match="Did you mean 'data_files' for 'dat_files'"):
        gym.make("agentfly/GSM8K-Calc", dat_files=str(gsm8k_sample))
    with pytest.raises(TypeError, match="Did you mean 'max_turns'"):
        gym.make("agentfly/Arith-Calc", max_turn=3)


def test_step_before_reset_and_bad_action_type():
    env = ToolEnv()
    with pytest.raises(ResetNeeded):
        env.step("hi")
    env.reset(seed=0)
    with pytest.raises(TypeError, match="action must be"):
        env.step(12)


def test_answer_tool_ends_the_episode_on_its_argument():
    env = gym.make("agentfly/Arith-Calc", tools=("calculator", "answer"))
    _, info = env.reset(options={"task": ROW})
    assert "call the answer tool" in info["messages"][0]["content"]
    action = call("3*4") + '\n<tool_call>{"name": "answer", "arguments": {"answer": 12}}</tool_call>'
    observation, reward, terminated, _, info = env.step(action)
    assert terminated and reward == 1.0 and info["answer"] == "12"
    assert observation == "12\n\n12"


@pytest.mark.parametrize(
    ("action", "kind", "fragment"),
    [
        (call("1\",") + "}", "parse_error", "not valid JSON"),
        ('<tool_call>{"name": "calculater", "arguments": {}}</tool_call>', "unknown_tool", "did you mean 'calcul"),
        ('<tool_call>{"name": "calculator", "arguments": {"x": "1"}}</tool_call>', "bad_arguments", "unknown argument"),
        (call("1/0"), "tool_error", "division by zero"),
        (call("1") * 20, "too_many_calls", "only 16 tool calls run per turn; the last 4 were skipped"),
        ("x" * 40_000, "action_too_long", "40000 characters long; the limit is 32768"),
    ],
)  # fmt: skip
def test_agent_mistakes_become_observations_and_counts(env, action, kind, fragment):
    env.reset(options={"task": ROW})
    observation, reward, terminated, truncated, info = env.step(action)
    assert not terminated and not truncated and reward == 0.0
    assert fragment in observation
    assert "Error: " in observation
    assert info["error_counts"][kind] >= 1
    assert set(info["error_counts"]) == set(ERROR_KINDS)
    assert all(m["role"] == "tool" for m in info["messages"])


@pytest.mark.parametrize(
    "action",
    [
        "7" * 10_000_000,
        {"role": "assistant", "content": "7" * 10_000_000},
        {"role": "assistant", "tool_calls": [{"function": {"name": "python", "arguments": {"code": "1" * 10**7}}}]},
    ],
    ids=["text", "message", "tool_call"],
)
def test_ten_megabyte_actions_are_rejected_cheaply(env, action):
    env.reset(options={"task": ROW})
    observation, reward, terminated, truncated, info = env.step(action)
    assert not truncated
    assert "10000" in observation and "the limit is 32768" in observation
    assert info["error_counts"]["action_too_long"] == 1 and not terminated and reward == 0.0


def test_error_counts_accumulate_over_the_episode(env):
    env.reset(options={"task": ROW})
    env.step(call("1/0"))
    _, _, _, _, info = env.step(call("2/0") + call("3/0"))
    assert info["error_counts"]["tool_error"] == 3
    env.reset(options={"task": ROW})
    assert env.step(call("1"))[4]["error_counts"]["tool_error"] == 0


def test_huge_tool_output_is_cut_in_the_middle():
    env = gym.make("agentfly/Arith-Calc", tools=("python",), parser="code", max_tool_output_chars=200)
    env.reset(options={"task": ROW})
    observation, *_ = env.step("```python\nprint('a' * 5000 + 'END')\n```")
    assert len(observation) <= 200
    assert observation.startswith("aaaa") and observation.endswith("END\n") and "characters cut" in observation


@pytest.mark.parametrize("action", HOSTILE_ACTIONS, ids=range(len(HOSTILE_ACTIONS)))
@pytest.mark.parametrize("parser", sorted(PARSERS))
def test_hostile_actions_never_crash_step(parser, action):
    tools = ("python_executor", "answer") if parser == "code" else ("calculator", "answer")  # code runs python
    env = gym.make("agentfly/Arith-Calc", parser=parser, tools=tools, max_turns=3)
    observation, _ = env.reset(options={"task": ROW})
    observation, reward, terminated, _, info = env.step(action)
    assert env.observation_space.contains(observation)
    assert isinstance(reward, float)
    assert info["turn"] == 1
    if not terminated:
        assert observation and info["messages"]


def test_info_objects_are_fresh_each_call():
    env = gym.make("agentfly/Arith-Calc", render_mode="ansi")
    _, info_a = env.reset(options={"task": ROW})
    info_a["messages"].append("junk")
    info_a["tools"][0]["function"]["name"] = "junk"
    info_a["task"]["question"] = "junk"
    _, info_b = env.reset(options={"task": ROW})
    assert len(info_b["messages"]) == 2 and info_b["tools"][0]["function"]["name"] == "calculator"
    assert info_b["task"]["question"] == ROW["question"]
    step_info = env.step(call("1"))[4]
    step_info["messages"][0]["content"] = "junk"
    assert "junk" not in env.render()


def test_render_ansi_shows_the_transcript():
    env = gym.make("agentfly/Arith-Calc", render_mode="ansi")
    env.reset(options={"task": ROW})
    env.step(call("3*4"))
    text = env.render()
    assert text.splitlines()[0].startswith("[system]")
    assert "[user] Ava has 3 bags" in text and "[tool] 12" in text


GOLDEN_SETUPS = [
    *[
        (parser, tools)
        for parser in ("hermes", "react", "tool_calls")
        for tools in (("calculator",), ("calculator", "answer"))
    ],
    ("code", ("python",)),  # the code format writes golden steps as print(expression) blocks
]


@pytest.mark.parametrize(("parser", "tools"), GOLDEN_SETUPS)
def test_golden_replay_on_gsm8k_fixture_scores_one(gsm8k_sample, parser, tools):
    env = gym.make("agentfly/GSM8K-Calc", data_files=str(gsm8k_sample), parser=parser, tools=tools)
    rows = range(len(env.unwrapped.tasks)) if "python" not in tools else range(3)  # python calls cost ~30 ms
    for index in rows:
        env.reset(options={"index": index})
        golden = env.unwrapped.tasks.golden(env.unwrapped.tasks.row(index))
        outputs = []
        for action in env.unwrapped.golden_actions():
            observation, reward, terminated, truncated, info = env.step(action)
            outputs += [m["content"].strip() for m in info["messages"] if m["name"] in ("calculator", "python")]
            assert sum(info["error_counts"].values()) == 0, observation
        assert terminated and not truncated and reward == 1.0, index
        assert [float(o) for o in outputs] == pytest.approx([float(r.replace(",", "")) for r in golden.results])


def test_golden_packs_calls_into_the_turn_budget(gsm8k_sample):
    env = gym.make("agentfly/GSM8K-Calc", data_files=str(gsm8k_sample), max_turns=2)
    env.reset(options={"index": 4})  # four annotated steps
    actions = env.unwrapped.golden_actions()
    assert len(actions) == 2 and actions[0].count("<tool_call>") == 4
    for action in actions:
        *_, terminated, truncated, _ = env.step(action)
    assert terminated and not truncated


def test_truncate_middle_keeps_length_limit():
    for length in (0, 10, 100, 1000):
        for limit in (5, 40, 64, 500):
            assert len(truncate_middle("z" * length, limit)) <= max(limit, 0)
    assert truncate_middle("short", 10) == "short"
