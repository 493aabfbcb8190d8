"""The long-horizon maze (agentfly/Maze-Nav): golden episodes of 10+ turns reach the exit, the progress rewards each
step pays sum to the return the world's scoring gives, and observations are the state's text, so they recur."""

from __future__ import annotations

import json
import re

import gymnasium as gym
import numpy as np
import pytest

import agentfly_envs
from agentfly_envs import TaskFormatError
from agentfly_envs.worlds.maze import DIRECTIONS, MIN_MOVES, Layout, generate_maze


def act(command: str) -> str:
    return f"<tool_call>{json.dumps({'name': 'act', 'arguments': {'command': command}})}</tool_call>"


@pytest.mark.parametrize(("split", "params"), [("train", ""), ("dev", ""), ("test", "size=6,loops=0.3")])
def test_golden_episodes_take_ten_turns_or_more_and_their_progress_rewards_sum_to_one(split, params):
    env = gym.make("agentfly/Maze-Nav", split=split, params=params)
    for index in range(12):
        env.reset(options={"index": index})
        actions = env.unwrapped.golden_actions()
        assert len(actions) >= MIN_MOVES
        rewards = []
        for action in actions:
            _, reward, terminated, truncated, info = env.step(action)
            assert sum(info["error_counts"].values()) == 0
            assert reward == pytest.approx(info["progress"]) and reward > 0  # each move is one closer
            rewards.append(reward)
        assert terminated and not truncated and info["reward_components"]["success"] == 1.0
        assert sum(rewards) == pytest.approx(1.0) and rewards == pytest.approx([1 / len(actions)] * len(actions))
    env.close()


def wandering_command(rng: np.random.Generator, layout: Layout, observation: str) -> str:
    """A step towards the exit 3 times in 4, else a random direction or a command the maze does not know."""
    x, y = (int(part) for part in re.search(r"Room (\d+),(\d+)\.", observation).groups())
    if rng.random() < 0.75:
        return min(layout.doors[x, y], key=lambda d: layout.distance[x + DIRECTIONS[d][0], y + DIRECTIONS[d][1]])
    words = [*DIRECTIONS, "go north", "jump", "East "]
    return words[int(rng.integers(len(words)))]


@pytest.mark.parametrize("reward", ["world_success", "world_score"])
def test_progress_rewards_move_when_the_return_is_paid_not_how_much(reward):
    paying = gym.make("agentfly/Maze-Nav", reward=reward, max_turns=14)
    plain = gym.make("agentfly/Maze-Nav", reward=reward, max_turns=14, progress_reward=False)
    rng = np.random.default_rng(0)
    returns = []
    for index in range(20):
        observation, _ = paying.reset(options={"index": index})
        plain.reset(options={"index": index})
        layout = generate_maze(paying.unwrapped.tasks.row(index)["seed"])
        paid, plain_return, done = [], 0.0, False
        while not done:
            command = wandering_command(rng, layout, observation)
            observation, reward_paid, terminated, truncated, info = paying.step(act(command))
            plain_observation, plain_reward, *ends, _ = plain.step(act(command))
            assert observation == plain_observation and [terminated, truncated] == ends
            paid.append(reward_paid)
            plain_return += plain_reward
            done = terminated or truncated
            if not done:
                assert reward_paid == info["progress"] >= 0.0 and plain_reward == 0.0
        assert sum(paid) == pytest.approx(plain_return)
        returns.append(plain_return)
    assert 0 < returns.count(1.0) < len(returns)  # some episodes reached the exit, and some ran out of turns
    paying.close()
    plain.close()


def test_a_truncated_episode_gives_back_its_progress_and_returns_the_truncation_reward():
    env = gym.make("agentfly/Maze-Nav", max_turns=3)
    env.reset(options={"index": 0})
    golden = env.unwrapped.tools["act"].gold_commands()
    rewards = [env.step(act(command))[1] for command in golden[:3]]
    assert rewards[:2] == pytest.approx([1 / len(golden)] * 2) and rewards[2] == pytest.approx(-2 / len(golden))
    assert sum(rewards) == pytest.approx(0.0)


def test_observations_are_the_rooms_text_so_states_recur_within_and_across_trajectories():
    env = gym.make("agentfly/Maze-Nav")
    first, _ = env.reset(options={"index": 0})
    layout = generate_maze(env.unwrapped.tasks.row(0)["seed"])
    door = layout.doors[layout.start][0]
    back = {"north": "south", "south": "north", "east": "west", "west": "east"}[door]
    there = env.step(act(door))[0]
    start_room = env.step(act(back))[0]
    assert start_room == first.split("\n\n")[-1]  # back in the start room: its text again
    again, _ = env.reset(options={"index": 0})  # a second trajectory of the task
    assert again == first and env.step(act(door))[0] == there
    bump = env.step(act("up"))[0]
    assert bump.startswith("Unknown command 'up': type north, south, east or west.") and bump.endswith(there)
    env.close()


def test_bad_params_and_a_progress_reward_without_a_world_raise_one_line_errors():
    for params, message in [
        ("size=3", "maze parameter size must be in [4, 10], got 3"),
        ("walls=2", "unknown maze parameter 'walls' in 'walls=2'; the maze takes ['size', 'loops']"),
        ("loops=many", "maze parameter loops must be a number, got 'many'"),
    ]:
        with pytest.raises(TaskFormatError, match=f"^{message.replace('[', '.').replace(']', '.')}$"):
            gym.make("agentfly/Maze-Nav", params=params)
    with pytest.raises(ValueError, match=r"^progress_reward=True pays a world's score increments; tools \('calc"):
        agentfly_envs.ToolEnv(task="arithmetic", progress_reward=True)
