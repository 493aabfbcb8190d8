"""Golden episodes played through an env (shared by the env and tool tests)."""

from __future__ import annotations

import gymnasium as gym
import pytest


def replay_golden_episodes(env: gym.Env) -> list[dict]:
    """Plays every task's golden episode, checking that none makes a mistake and each scores 1.0.

    Returns:
        The last step's info of each episode.
    """
    infos = []
    for index in range(len(env.unwrapped.tasks)):
        env.reset(options={"index": index})
        for action in env.unwrapped.golden_actions():
            _, reward, terminated, truncated, info = env.step(action)
            assert sum(info["error_counts"].values()) == 0, (index, info["messages"])
        assert terminated and not truncated and reward == 1.0, (index, info)
        infos.append(info)
    return infos


def assert_golden_world_episode_wins(env: gym.Env, context: object) -> None:
    """Plays the running world game's golden actions: no mistake, a win, and the world's report says so.

    Args:
        env: A world env (``act`` tool) just reset into a game.
        context: Shown when the game is not won (e.g. the split and index).
    """
    for action in env.unwrapped.golden_actions():
        observation, reward, terminated, truncated, info = env.step(action)
        assert sum(info["error_counts"].values()) == 0, info["messages"]
    assert terminated and not truncated and reward == 1.0, (context, observation)
    assert observation.endswith("[The task is complete.]")
    assert info["reward_components"]["success"] == 1.0 and info["reward_components"]["world_error"] == 0.0


def assert_golden_progress_adds_up(env: gym.Env, paying_steps: int) -> None:
    """Plays the running world game's golden actions in an env that pays progress (``progress_reward=True``): each
    step before the last pays the world's score increase (``info["progress"]``, never negative on a gold path), at
    least ``paying_steps`` steps pay something before the end, and the rewards sum to the win's 1.0.

    Args:
        env: A world env (``act`` tool) that pays progress, just reset into a game.
        paying_steps: Fewest steps that must pay more than 0 (the world reports progress before the end).
    """
    rewards = []
    for action in env.unwrapped.golden_actions():
        _, reward, terminated, truncated, info = env.step(action)
        assert info["progress"] >= 0.0 and (terminated or reward == info["progress"]), info["messages"]
        rewards.append(reward)
    assert terminated and not truncated and info["reward_components"]["success"] == 1.0
    assert sum(rewards) == pytest.approx(1.0) and len([r for r in rewards if r > 0]) >= paying_steps, rewards
