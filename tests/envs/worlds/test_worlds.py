"""TextWorldExpress as interactive worlds: golden replays on every split, the act tool's error observations,
world rewards, a simulator that dies, and the errors of a machine without the package or Java."""

from __future__ import annotations

import re
import time

import gymnasium as gym
import pytest

import agentfly_envs
from agentfly_envs import TaskFormatError
from agentfly_envs.registration import TWX_GAMES
from agentfly_envs.worlds.textworld_express import SPLIT_SEEDS
from tests.envs.golden import assert_golden_progress_adds_up, assert_golden_world_episode_wins
from tests.helpers.paths import REPO_ROOT
from tests.helpers.processes import stop_process, world_error_in_fresh_process
from tests.helpers.skips import needs_textworld_express

pytestmark = needs_textworld_express

SEEDS_PER_SPLIT = {"Coin": 3, "Cooking": 3, "Commonsense": 3}
"""Golden episodes per split: three for the games the issue names, one for the others (45 episodes in all)."""


def act(command: str) -> str:
    return f'<tool_call>{{"name": "act", "arguments": {{"command": "{command}"}}}}</tool_call>'


def twx_row(game: str, split: str, index: int) -> dict:
    return {"world": "textworld_express", "game": game, "split": split, "seed": SPLIT_SEEDS[split][index], "params": ""}


@pytest.fixture(scope="module")
def envs():
    """One env per game, shared by the tests of this module (each holds one JVM)."""
    made = {name: gym.make(f"agentfly/TWX-{name}") for name in TWX_GAMES}
    yield made
    for env in made.values():
        env.close()


@pytest.mark.parametrize("name", list(TWX_GAMES))
def test_golden_episodes_win_on_every_split(envs, name):
    env = envs[name]
    for split in SPLIT_SEEDS:
        for index in range(0, 1000, 1000 // SEEDS_PER_SPLIT.get(name, 1)):
            observation, info = env.reset(options={"task": twx_row(TWX_GAMES[name], split, index)})
            assert observation.startswith("Task: ") and info["messages"][1]["content"] == observation
            assert_golden_world_episode_wins(env, (split, index))


def test_progress_rewards_pay_the_score_as_it_grows_and_sum_to_the_return(envs):
    env = envs["Cooking"].unwrapped
    env.progress_reward = True  # on the module's env: a new one would start another JVM and load the game again
    try:
        env.reset(options={"task": twx_row("cookingworld", "train", 0)})
        assert_golden_progress_adds_up(env, paying_steps=3)  # taking, preparing and eating each score
    finally:
        env.progress_reward = False


def test_split_seeds_are_the_simulators():
    from textworld_express import TextWorldExpressEnv

    simulator = TextWorldExpressEnv()
    try:
        for game in ("coin", "twc"):
            simulator.load(game, "")
            assert simulator.getValidSeedsTrain() == list(SPLIT_SEEDS["train"])
            assert simulator.getValidSeedsDev() == list(SPLIT_SEEDS["dev"])
            assert simulator.getValidSeedsTest() == list(SPLIT_SEEDS["test"])
    finally:
        simulator.close()


def test_rows_index_the_split_seeds():
    env = gym.make("agentfly/TWX-Coin", split="dev", num_tasks=5)
    tasks = env.unwrapped.tasks
    assert len(tasks) == 5 and [tasks.row(i)["seed"] for i in range(5)] == [10_000, 10_001, 10_002, 10_003, 10_004]
    _, info = env.reset(seed=3)
    assert info["task"]["split"] == "dev" and info["task"]["seed"] in SPLIT_SEEDS["dev"]
    env.close()


def test_unknown_commands_are_observations_and_bad_calls_are_errors(envs):
    env = envs["Coin"]
    env.reset(options={"index": 0})
    observation, reward, terminated, _, info = env.step(act("fly to the moon"))
    assert observation.startswith("Unknown action") and not terminated and reward == 0.0
    assert sum(info["error_counts"].values()) == 0
    cases = [
        (act("   "), "tool_error", "the command is empty"),
        (act("x" * 400), "tool_error", "keep it under 300"),
        ('<tool_call>{"name": "act", "arguments": {"cmd": "look"}}</tool_call>', "bad_arguments", "takes (command"),
        ('<tool_call>{"name": "move", "arguments": {"command": "look"}}</tool_call>', "unknown_tool", "act"),
    ]
    for action, kind, fragment in cases:
        before = info["error_counts"][kind]
        observation, reward, terminated, _, info = env.step(action)
        assert observation.startswith("Error:") and fragment in observation and not terminated
        assert info["error_counts"][kind] == before + 1
    observation, *_ = env.step(act("ünïcödé \ud800 😀"))  # a lone surrogate cannot reach the JVM as is
    assert observation.startswith("Unknown action")


def test_the_world_ends_the_episode_and_later_calls_in_the_turn_are_errors(envs):
    env = envs["Coin"]
    env.reset(options={"index": 1})
    actions = env.unwrapped.golden_actions()
    for action in actions[:-1]:
        env.step(action)
    _, reward, terminated, _, info = env.step(actions[-1] + act("look around"))
    assert terminated and reward == 1.0
    assert info["messages"][-1]["content"] == "Error: the task has already ended; no more actions are needed"


def test_a_turn_without_a_call_ends_the_episode_scored_on_the_world(envs):
    env = envs["Coin"]
    env.reset(options={"index": 2})
    env.step(act("look around"))
    _, reward, terminated, truncated, info = env.step("I found the coin, trust me: \\boxed{success}")
    assert terminated and not truncated and reward == 0.0
    assert info["reward_components"] == {"success": 0.0, "score": 0.0, "moves": 1.0, "world_error": 0.0}


def test_world_score_gives_partial_credit_and_truncation_reports_the_world():
    env = gym.make("agentfly/TWX-Cooking", reward="world_score", max_turns=6)
    env.reset(options={"index": 0})
    for command in env.unwrapped.tools["act"].gold_commands()[:6]:
        _, reward, terminated, truncated, info = env.step(act(command))
    assert truncated and not terminated and reward == 0.0  # the truncation reward
    assert 0.0 < info["reward_components"]["score"] < 1.0
    env.reset(options={"index": 0})
    golden = env.unwrapped.golden_actions()  # the gold path in 6 turns, several calls per turn
    assert len(golden) == 6
    for action in golden:
        _, reward, terminated, truncated, _ = env.step(action)
    assert terminated and reward == 1.0
    env.close()


def test_valid_actions_option():
    env = gym.make("agentfly/TWX-Coin", tool_options={"act": {"show_valid_actions": True}})
    observation, _ = env.reset(options={"index": 0})
    assert "Valid actions: " in observation and "look around" in observation.split("Valid actions: ")[1]
    env.close()


def test_valid_actions_tool_lists_the_worlds_commands_on_request():
    env = gym.make("agentfly/TWX-Coin", tools=("act", "valid_actions"))
    observation, info = env.reset(options={"index": 0})
    assert "Valid actions" not in observation
    assert [tool["function"]["name"] for tool in info["tools"]] == ["act", "valid_actions"]
    listing, *_ = env.step('<tool_call>{"name": "valid_actions", "arguments": {}}</tool_call>')
    assert "look around" in listing.split(", ") and listing.split(", ") == sorted(listing.split(", "))
    for action in env.unwrapped.golden_actions():
        *_, terminated, _, info = env.step(action)
    assert terminated
    with pytest.raises(ValueError, match="valid_actions lists the commands of the act tool's world"):
        gym.make("agentfly/Arith-Calc", tools=("calculator", "valid_actions"))
    env.close()


def test_two_envs_play_the_same_game_side_by_side():
    """Each env has its own JVM: in a shared one the second Sorting session breaks the first."""
    first, second = gym.make("agentfly/TWX-Sorting"), gym.make("agentfly/TWX-Sorting")
    first.reset(options={"index": 0})
    second.reset(options={"index": 0})
    plan = first.unwrapped.golden_actions()
    assert second.unwrapped.golden_actions() == plan
    for action in plan:
        results = [env.step(action)[1:3] for env in (first, second)]
    assert results == [(1.0, True), (1.0, True)]
    first.close()
    second.close()


def test_a_dead_simulator_ends_the_episode_as_an_infrastructure_failure_and_is_restarted():
    env = gym.make("agentfly/TWX-Coin")
    env.reset(options={"index": 0})
    env.step(act("look around"))
    world = env.unwrapped.tools["act"]._worlds["textworld_express"]
    world._jvm.process.kill()  # the JVM this env launched
    world._jvm.process.wait()
    start = time.monotonic()
    observation, reward, terminated, truncated, info = env.step(act("open door to north") + act("look around"))
    assert time.monotonic() - start < 5
    assert observation.startswith("Error: the world stopped working") and "the next one restarts it" in observation
    assert (reward, terminated, truncated) == (0.0, False, True) and info["reward_components"] == {}
    assert info["infra_failure"] == f"tool act: {observation.removeprefix('Error: ')}"
    assert not any(info["error_counts"].values()) and len(info["tool_calls"]) == 1  # the turn's next call did not run
    with pytest.raises(agentfly_envs.EpisodeFinishedError):
        env.step(act("look around"))
    env.reset(options={"index": 0})  # a new JVM
    for action in env.unwrapped.golden_actions():
        _, reward, terminated, *_ = env.step(action)
    assert terminated and reward == 1.0
    env.close()


def test_bad_rows_and_kwargs_raise_one_line_errors(envs):
    with pytest.raises(TaskFormatError, match="unknown TextWorldExpress game 'chess'; choose one of"):
        gym.make("agentfly/TWX-Coin", game="chess")
    with pytest.raises(TaskFormatError, match="unknown TextWorldExpress split 'valid'"):
        gym.make("agentfly/TWX-Coin", split="valid")
    env = envs["Coin"]
    with pytest.raises(TaskFormatError, match="seed 5 is not a test seed; test seeds are 20000-20999"):
        env.reset(options={"task": twx_row("coin", "train", 5) | {"split": "test"}})
    with pytest.raises(TaskFormatError, match=r"Unrecognized property name \(bogus\)"):
        env.reset(options={"task": twx_row("coin", "train", 0) | {"params": "bogus=1"}})
    env.reset(options={"index": 0})  # the env goes on after a bad row
    with pytest.raises(agentfly_envs.AgentflyError, match="reset"):
        env.unwrapped.golden_actions(twx_row("coin", "train", 7))


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("import sys; sys.modules['textworld_express'] = None", "pip install 'agentfly-rl[worlds]'"),
        ("import os; os.environ['PATH'] = ''", "apt-get install default-jre-headless"),
    ],
)
def test_missing_package_or_java_says_what_to_install(setup, message):
    printed = world_error_in_fresh_process(setup, "agentfly/TWX-Coin")
    assert message in printed and len(printed.splitlines()) == 1


def test_docs_world_example_runs_as_written(monkeypatch):
    readme = (REPO_ROOT / "docs" / "envs.md").read_text()
    block = next(b for b in re.findall(r"```python\n(.*?)```", readme, re.DOTALL) if "agentfly/TWX-Coin" in b)
    namespace: dict = {}
    exec(compile(block, "<docs/envs.md: interactive worlds>", "exec"), namespace)
    assert (namespace["reward"], namespace["terminated"]) == (1.0, True)
    assert namespace["info"]["reward_components"]["success"] == 1.0


def test_a_hung_simulator_times_out_into_an_infrastructure_failure():
    env = gym.make("agentfly/TWX-Coin", tool_options={"act": {"timeout_s": 2}})
    env.reset(options={"index": 0})
    process = env.unwrapped.tools["act"]._worlds["textworld_express"]._jvm.process
    stop_process(process.pid)  # the JVM this env launched stops answering
    start = time.monotonic()
    observation, reward, terminated, truncated, info = env.step(act("look around"))
    assert 2 <= time.monotonic() - start < 12, (observation, info)  # py4j tries twice
    assert observation.startswith("Error: the world stopped working") and truncated and not terminated
    assert reward == 0.0 and info["infra_failure"] == f"tool act: {observation.removeprefix('Error: ')}"
    assert process.poll() is not None  # killed, so the next reset launches a fresh one
    env.reset(options={"index": 1})
    assert env.step(act("look around"))[0].startswith("You are in")
    env.close()


def test_world_rewards_and_the_act_tool_go_together():
    with pytest.raises(
        ValueError, match=r"the world rewards .* score the world a world tool \(act, the web tools\) plays"
    ):
        gym.make("agentfly/Arith-Calc", reward="world_success")
    with pytest.raises(ValueError, match=r"reward 'math_equal' with tools \('act',\)"):
        gym.make("agentfly/TWX-Coin", reward="math_equal")


def test_a_jvm_that_does_not_start_is_an_infrastructure_failure(monkeypatch):
    """A JVM that dies while it starts (a chaos test's kill read back as an empty port line by py4j) fails the reset
    as an infrastructure failure, which the trainer replays; it is still a world that is unavailable here."""
    import py4j.java_gateway

    from agentfly_envs.errors import InfrastructureError, WorldStartError, WorldUnavailableError

    def dies_while_starting(**kwargs):
        raise ValueError("invalid literal for int() with base 10: b''")

    monkeypatch.setattr(py4j.java_gateway, "launch_gateway", dies_while_starting)
    env = gym.make("agentfly/TWX-Coin")
    with pytest.raises(WorldStartError, match=r"the TextWorldExpress JVM did not start: invalid literal") as raised:
        env.reset(options={"index": 0})
    assert isinstance(raised.value, InfrastructureError) and isinstance(raised.value, WorldUnavailableError)
    monkeypatch.undo()
    assert env.reset(options={"index": 0})[0]  # the next reset launches one
    env.close()
