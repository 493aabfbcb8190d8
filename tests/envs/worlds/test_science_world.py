"""ScienceWorld as an interactive world: golden replays on every split, the simulator's own task splits, failing
a task, error observations, a simulator that dies, and the errors of bad rows or a machine without the package."""

from __future__ import annotations

import re
import time

import gymnasium as gym
import pytest

from agentfly_envs import TaskFormatError
from agentfly_envs.worlds.science_world import SIMPLIFICATIONS, TASK_SPLITS, canonical, split_variations
from tests.envs.golden import assert_golden_progress_adds_up, assert_golden_world_episode_wins
from tests.helpers.paths import REPO_ROOT
from tests.helpers.processes import world_error_in_fresh_process
from tests.helpers.skips import needs_scienceworld

pytestmark = needs_scienceworld

REPLAYED_TASKS = [
    "boil",
    "chemistry-mix",
    "find-animal",
    "identify-life-stages-2",
    "inclined-plane-determine-angle",
    "lifespan-longest-lived",
    "test-conductivity",
    "use-thermometer",
]
"""Tasks whose golden episodes the tests replay: one per topic, among those whose gold paths take under a second to
generate (the Mendelian genetics tasks take about 40 s)."""
REPLAYED = {"train": range(len(REPLAYED_TASKS)), "dev": (1, 5), "test": (3, 6)}
"""Split -> indices of the :data:`REPLAYED_TASKS` replayed on it: every topic on train, two others on dev and test
(12 episodes; the splits differ in their variations)."""


def act(command: str) -> str:
    return f'<tool_call>{{"name": "act", "arguments": {{"command": "{command}"}}}}</tool_call>'


@pytest.fixture(scope="module")
def env():
    made = gym.make("agentfly/ScienceWorld", game="find-animal")
    yield made
    made.close()


@pytest.mark.parametrize("split", ["train", "dev", "test"])
def test_golden_episodes_win_on_every_split(split):
    env = gym.make("agentfly/ScienceWorld", game=REPLAYED_TASKS, split=split)
    for index in REPLAYED[split]:
        observation, info = env.reset(options={"index": index})
        assert info["task"]["game"] == REPLAYED_TASKS[index]
        assert info["task"]["seed"] == split_variations(REPLAYED_TASKS[index], split).start
        assert observation.startswith("Task: Your task is") and info["messages"][1]["content"] == observation
        assert_golden_world_episode_wins(env, (split, index))
    env.close()


def test_task_splits_and_simplifications_are_the_simulators(env):
    env.reset(options={"index": 0})
    session = env.unwrapped.tools["act"]._worlds["scienceworld"]._jvm.session
    assert sorted(session.getTaskNames()) == sorted(TASK_SPLITS)
    for task, (train_end, dev_end, total) in TASK_SPLITS.items():
        session.load(task, 0, "", False)
        assert list(session.getVariationsTrain()) == list(range(0, train_end)), task
        assert list(session.getVariationsDev()) == list(range(train_end, dev_end)), task
        assert list(session.getVariationsTest()) == list(range(dev_end, total)), task
        assert session.getTaskMaxVariations(task) == total
    assert sorted(session.getPossibleSimplifications().split(", ")) == sorted(set(SIMPLIFICATIONS) - {"easy"})
    assert sum(total for *_, total in TASK_SPLITS.values()) == 7207


def test_rows_go_round_the_tasks_of_the_split():
    tasks = gym.make("agentfly/ScienceWorld", split="dev").unwrapped.tasks
    rows = [tasks.row(i) for i in range(60)]
    assert [row["game"] for row in rows[:30]] == list(TASK_SPLITS) == [row["game"] for row in rows[30:]]
    assert [row["seed"] for row in rows[:2]] == [14, 14] and rows[30]["seed"] == 15  # boil's dev: 14-20
    assert len(tasks) == sum(dev - train for train, dev, _ in TASK_SPLITS.values())
    short = gym.make("agentfly/ScienceWorld", game="identify-life-stages-2", split="test", num_tasks=3)
    assert [short.unwrapped.tasks.row(i)["seed"] for i in range(3)] == [6, 7, 8]
    _, info = short.reset(seed=4)
    assert info["task"]["split"] == "test" and info["task"]["seed"] in (6, 7, 8)
    short.close()


def test_same_game_reads_the_same_after_other_games(env):
    """The simulator lists a room's objects in an order that changes between loads; the env sorts them."""
    first, _ = env.reset(options={"index": 3})
    env.reset(options={"index": 4})
    assert env.reset(options={"index": 3})[0] == first
    assert canonical("Here:\n\tb\n\ta\n\t\tin a\nDoors:\n\tz\n\ty") == "Here:\n\ta\n\t\tin a\n\tb\nDoors:\n\ty\n\tz"


def test_unknown_commands_are_observations_and_focusing_on_the_wrong_thing_fails(env):
    env.reset(options={"index": 0})
    observation, reward, terminated, _, info = env.step(act("fly to the moon"))
    assert observation == "No known action matches that input." and not terminated and reward == 0.0
    observation, *_, info = env.step(act("   "))
    assert observation.startswith("Error: the command is empty") and info["error_counts"]["tool_error"] == 1
    observation, *_ = env.step(act("ünïcödé \ud800 😀"))  # a lone surrogate cannot reach the JVM as is
    assert observation == "No known action matches that input."
    observation, reward, terminated, truncated, info = env.step(act("focus on air"))
    assert observation == "You focus on the air.\n\n[The task has failed.]"
    assert terminated and not truncated and reward == 0.0
    assert info["reward_components"] == {"success": 0.0, "score": 0.0, "moves": 3.0, "world_error": 0.0}


def test_world_score_gives_partial_credit():
    env = gym.make("agentfly/ScienceWorld", game="find-animal", reward="world_score", max_turns=3)
    env.reset(options={"index": 0})
    golden = env.unwrapped.tools["act"].gold_commands()
    for command in golden[:3]:
        _, _, terminated, truncated, info = env.step(act(command))
    assert truncated and not terminated and 0.0 < info["reward_components"]["score"] < 1.0
    env.close()


def test_progress_rewards_pay_the_score_as_it_grows_and_a_failure_gives_them_back(env):
    env = env.unwrapped
    env.progress_reward = True  # on the module's env: a new one would start another JVM
    try:
        env.reset(options={"index": 0})
        assert_golden_progress_adds_up(env, paying_steps=3)  # find-animal scores moving towards and focusing
        env.reset(options={"index": 0})
        paid = [env.step(act(command))[1] for command in env.tools["act"].gold_commands()[:2]]
        _, reward, terminated, _, info = env.step(act("focus on air"))
        assert sum(paid) > 0 and terminated and info["reward_components"]["success"] == 0.0
        assert reward == pytest.approx(-sum(paid))  # the failed episode's return is 0, what world_success says
    finally:
        env.progress_reward = False


def test_valid_actions_and_simplifications():
    options = {"act": {"show_valid_actions": True}}
    env = gym.make("agentfly/ScienceWorld", game="boil", params="openDoors", tool_options=options)
    observation, _ = env.reset(options={"index": 0})
    assert "Valid actions: " in observation and "look around" in observation.split("Valid actions: ")[1]
    assert "(that is open)" in observation and "(that is closed)" not in observation
    observation, *_ = env.step(act("look around"))
    assert "Valid actions: " in observation
    env.close()
    env = gym.make("agentfly/ScienceWorld", game="boil", tools=("act", "valid_actions"))
    observation, _ = env.reset(options={"index": 0})
    assert "Valid actions" not in observation
    listing, *_ = env.step('<tool_call>{"name": "valid_actions", "arguments": {}}</tool_call>')
    assert {"wait1", "open door to living room"} <= set(listing.split(", ")) and len(listing.split(", ")) > 50
    env.close()


def test_a_dead_simulator_ends_the_episode_as_an_infrastructure_failure_and_is_restarted():
    env = gym.make("agentfly/ScienceWorld", game="find-animal")
    env.reset(options={"index": 0})
    world = env.unwrapped.tools["act"]._worlds["scienceworld"]
    world._jvm.process.kill()
    world._jvm.process.wait()
    start = time.monotonic()
    observation, reward, terminated, truncated, info = env.step(act("look around"))
    assert time.monotonic() - start < 5
    assert observation.startswith("Error: the world stopped working (the ScienceWorld simulator stopped")
    assert (reward, terminated, truncated) == (0.0, False, True) and info["reward_components"] == {}
    assert info["infra_failure"] == f"tool act: {observation.removeprefix('Error: ')}"
    assert not any(info["error_counts"].values())
    env.reset(options={"index": 0})  # a new JVM
    for action in env.unwrapped.golden_actions():
        _, reward, terminated, *_ = env.step(action)
    assert terminated and reward == 1.0
    env.close()


def test_bad_rows_and_kwargs_raise_one_line_errors(env):
    with pytest.raises(TaskFormatError, match="unknown ScienceWorld task 'boil-egg'; choose one of"):
        gym.make("agentfly/ScienceWorld", game="boil-egg")
    with pytest.raises(TaskFormatError, match="unknown ScienceWorld split 'valid'"):
        gym.make("agentfly/ScienceWorld", split="valid")
    with pytest.raises(TaskFormatError, match="unknown ScienceWorld simplification 'fast'"):
        gym.make("agentfly/ScienceWorld", params="openDoors,fast")
    with pytest.raises(TaskFormatError, match="'power-component' needs electrical actions"):
        gym.make("agentfly/ScienceWorld", game="power-component", params="easy")
    with pytest.raises(TaskFormatError, match=r"num_tasks must be in \[1, 150\]"):
        gym.make("agentfly/ScienceWorld", game="find-animal", num_tasks=151)
    row = {"world": "scienceworld", "game": "boil", "split": "test", "seed": 3, "params": ""}
    with pytest.raises(TaskFormatError, match="seed 3 is not a test seed; test seeds are 21-29"):
        env.reset(options={"task": row})
    env.reset(options={"index": 0})  # the env goes on after a bad row


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("import sys; sys.modules['scienceworld'] = None", "pip install 'agentfly-rl[scienceworld]'"),
        ("import os; os.environ['PATH'] = ''", "apt-get install default-jre-headless"),
    ],
)
def test_missing_package_or_java_says_what_to_install(setup, message):
    printed = world_error_in_fresh_process(setup, "agentfly/ScienceWorld")
    assert message in printed and len(printed.splitlines()) == 1


def test_docs_scienceworld_example_runs_as_written():
    readme = (REPO_ROOT / "docs" / "envs.md").read_text()
    block = next(b for b in re.findall(r"```python\n(.*?)```", readme, re.DOTALL) if "agentfly/ScienceWorld" in b)
    namespace: dict = {}
    exec(compile(block, "<docs/envs.md: ScienceWorld>", "exec"), namespace)
    assert (namespace["reward"], namespace["terminated"]) == (1.0, True)
    assert namespace["info"]["reward_components"]["success"] == 1.0
