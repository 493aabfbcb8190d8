"""TextArena puzzles as interactive worlds: golden replays on every split, invalid moves as observations, losing,
partial credit, the worlds' own random generators, and the error of a machine without the package."""

from __future__ import annotations

import random
import re

import gymnasium as gym
import pytest

import agentfly_envs
from agentfly_envs import TaskFormatError
from agentfly_envs.registration import TEXTARENA_GAMES
from agentfly_envs.worlds.puzzle_solvers import SOLVERS
from agentfly_envs.worlds.text_arena import SPLIT_SEEDS
from tests.envs.golden import assert_golden_progress_adds_up, assert_golden_world_episode_wins
from tests.helpers.paths import REPO_ROOT
from tests.helpers.processes import world_error_in_fresh_process
from tests.helpers.skips import needs_textarena

pytestmark = needs_textarena

SOLVED = [name for name in TEXTARENA_GAMES if name in SOLVERS]
"""The games with a solver, so with golden episodes: all but 2048."""
SEEDS_PER_SPLIT = 7
"""Golden episodes per split and game: 21 per game, 105 in all."""


def act(command: str) -> str:
    return f'<tool_call>{{"name": "act", "arguments": {{"command": "{command}"}}}}</tool_call>'


def puzzle_row(name: str, split: str, index: int) -> dict:
    return {"world": "textarena", "game": TEXTARENA_GAMES[name], "split": split, "seed": SPLIT_SEEDS[split][index]}


@pytest.fixture(scope="module")
def envs():
    made = {name: gym.make(f"agentfly/TextArena-{name}") for name in TEXTARENA_GAMES}
    yield made
    for env in made.values():
        env.close()


@pytest.mark.parametrize("name", SOLVED)
def test_golden_episodes_win_on_every_split(envs, name):
    env = envs[name]
    for split in SPLIT_SEEDS:
        for index in range(0, 100 * SEEDS_PER_SPLIT, 100):
            observation, info = env.reset(options={"task": puzzle_row(name, split, index)})
            assert observation.startswith("Task: ") and info["messages"][1]["content"] == observation
            assert_golden_world_episode_wins(env, (split, index))


def test_seeds_pick_the_game_and_leave_the_global_random_alone(envs):
    env = envs["FrozenLake"]
    random.seed(0)
    expected = [random.random() for _ in range(3)]
    random.seed(0)
    first = env.reset(options={"task": puzzle_row("FrozenLake", "test", 0)})[0]
    env.step(act("[down]"))
    assert [random.random() for _ in range(3)] == expected
    random.random()  # the process draws in between: the game does not change
    assert env.reset(options={"task": puzzle_row("FrozenLake", "test", 0)})[0] == first
    boards = {env.reset(options={"task": puzzle_row("FrozenLake", "test", i)})[0] for i in range(10)}
    assert len(boards) > 5  # other seeds, other holes


def test_rows_index_the_split_seeds():
    env = gym.make("agentfly/TextArena-Sokoban", split="dev", num_tasks=5)
    tasks = env.unwrapped.tasks
    assert len(tasks) == 5 and [tasks.row(i)["seed"] for i in range(5)] == list(range(100_000, 100_005))
    _, info = env.reset(seed=3)
    assert info["task"]["split"] == "dev" and info["task"]["seed"] in SPLIT_SEEDS["dev"]
    assert info["task"]["game"] == "Sokoban-v0"
    env.close()


def test_invalid_moves_are_observations_and_a_second_in_a_row_loses(envs):
    env = envs["TowerOfHanoi"]
    env.reset(options={"index": 0})
    observation, reward, terminated, _, info = env.step(act("move the small disk"))
    assert observation.startswith("You attempted an invalid move.") and not terminated and reward == 0.0
    assert sum(info["error_counts"].values()) == 0
    observation, _, terminated, _, _ = env.step(act("[A C]"))  # a valid move clears the count
    assert "You moved disk 1 from A to C." in observation and not terminated
    env.step(act("[A C]"))  # a larger disk on a smaller one
    observation, reward, terminated, _, info = env.step(act("[B A]"))  # from the empty tower
    assert terminated and reward == 0.0 and observation.endswith("[The task has failed.]")
    assert "Invalid Move" in observation and info["reward_components"]["success"] == 0.0
    cases = [
        (act("   "), "tool_error", "the command is empty"),
        (act("x" * 400), "tool_error", "keep it under 300"),
        ('<tool_call>{"name": "act", "arguments": {"move": "[A C]"}}</tool_call>', "bad_arguments", "takes (command"),
    ]
    env.reset(options={"index": 0})
    for action, kind, fragment in cases:
        observation, _, terminated, _, info = env.step(action)
        assert observation.startswith("Error:") and fragment in observation and not terminated
        assert info["error_counts"][kind] >= 1


def test_falling_into_a_hole_ends_the_episode_with_partial_score(envs):
    env = envs["FrozenLake"]
    observation, _ = env.reset(options={"index": 3})  # train seed 3 has a hole right below the start
    assert re.search(r"\|  P  \|.*\n.*\n\|  H  \|", observation)
    observation, reward, terminated, _, info = env.step(act("[down]"))
    assert terminated and reward == 0.0 and "You fell into a hole!" in observation
    assert observation.endswith("[The task has failed.]")
    assert 0.0 < info["reward_components"]["score"] < 1.0 and info["reward_components"]["success"] == 0.0


def test_world_score_gives_partial_credit_and_truncation_reports_the_world():
    env = gym.make("agentfly/TextArena-TowerOfHanoi", game="TowerOfHanoi-v0-medium", reward="world_score", max_turns=8)
    env.reset(options={"index": 0})
    golden = env.unwrapped.golden_actions()
    assert len(golden) == 8 and sum(action.count("<tool_call>") for action in golden) == 15  # 2^4 - 1 moves
    for command in env.unwrapped.tools["act"].gold_commands()[:8]:
        _, reward, terminated, truncated, info = env.step(act(command))
    assert truncated and not terminated and reward == 0.0
    assert info["reward_components"]["score"] == 0.25  # move 8 puts the largest disk on C: 1 of 4 in place
    env.reset(options={"index": 0})
    for action in golden:
        _, reward, terminated, *_ = env.step(action)
    assert terminated and reward == 1.0
    env.close()


def test_progress_rewards_pay_the_completion_as_it_grows_and_sum_to_the_return():
    env = gym.make("agentfly/TextArena-TowerOfHanoi", game="TowerOfHanoi-v0-medium", progress_reward=True)
    env.reset(options={"index": 0})
    assert_golden_progress_adds_up(env, paying_steps=3)  # each disk that lands on C for good pays 1/4
    truncated_env = gym.make(
        "agentfly/TextArena-TowerOfHanoi", game="TowerOfHanoi-v0-medium", progress_reward=True, max_turns=8
    )
    truncated_env.reset(options={"index": 0})
    steps = [truncated_env.step(act(command)) for command in env.unwrapped.tools["act"].gold_commands()[:8]]
    assert steps[-1][3] and sum(step[4]["progress"] for step in steps) == 0.25  # as in the test above
    assert sum(step[1] for step in steps) == pytest.approx(0.0)  # the truncation reward: the progress is given back
    env.close()
    truncated_env.close()


def test_2048_has_no_golden_episodes_but_plays(envs):
    env = envs["2048"]
    observation, _ = env.reset(options={"index": 0})
    assert "reach a 64 tile" in observation
    with pytest.raises(agentfly_envs.AgentflyError, match="TextArena 2048-v0-mega-easy has no solver"):
        env.unwrapped.golden_actions()
    observation, reward, terminated, *_ = env.step(act("[left]"))
    assert observation.startswith("Score:") and not terminated and reward == 0.0


def test_valid_actions_tool_says_the_puzzles_do_not_list_moves():
    env = gym.make("agentfly/TextArena-TowerOfHanoi", tools=("act", "valid_actions"))
    env.reset(options={"index": 0})
    observation, _, terminated, _, info = env.step('<tool_call>{"name": "valid_actions", "arguments": {}}</tool_call>')
    assert observation == "Error: this world does not list its commands; the task description says how to write them"
    assert not terminated and info["error_counts"]["tool_error"] == 1
    env.close()


def test_bad_games_splits_and_seeds_raise_one_line_errors(envs):
    with pytest.raises(TaskFormatError, match=r"unknown TextArena game 'Chess-v0'; choose one of \['2048-v0'"):
        gym.make("agentfly/TextArena-Sokoban", game="Chess-v0")
    with pytest.raises(TaskFormatError, match="unknown TextArena split 'valid'"):
        gym.make("agentfly/TextArena-Sokoban", split="valid")
    env = envs["Mastermind"]
    with pytest.raises(TaskFormatError, match="seed 5 is not a test seed; test seeds are 200000-200999"):
        env.reset(options={"task": puzzle_row("Mastermind", "train", 5) | {"split": "test"}})
    with pytest.raises(TaskFormatError, match="unknown TextArena game 'Wordle-v0'"):
        env.reset(options={"task": puzzle_row("Mastermind", "train", 0) | {"game": "Wordle-v0"}})
    env.reset(options={"index": 0})  # the env goes on after a bad row


def test_missing_package_says_what_to_install():
    printed = world_error_in_fresh_process("import sys; sys.modules['textarena'] = None", "agentfly/TextArena-Sokoban")
    assert printed == "TextArena is not installed: pip install 'agentfly-rl[puzzles]' (the textarena package)"


def test_docs_puzzle_example_runs_as_written():
    readme = (REPO_ROOT / "docs" / "envs.md").read_text()
    block = next(b for b in re.findall(r"```python\n(.*?)```", readme, re.DOTALL) if "agentfly/TextArena-" in b)
    namespace: dict = {}
    exec(compile(block, "<docs/envs.md: TextArena puzzles>", "exec"), namespace)
    assert (namespace["reward"], namespace["terminated"]) == (1.0, True)
    assert namespace["info"]["reward_components"]["success"] == 1.0
