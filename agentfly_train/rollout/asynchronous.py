"""Asynchronous rollouts: every episode advances on its own. Its next turn is submitted to the engine the moment
its env step returns, and the engine batches whatever requests are pending at each of its steps (vLLM's continuous
batching), so a slow tool call holds back only its own episode, never the generation of the others.

Under greedy decoding the trajectories are the turn-synchronous loop's (each episode sees the same sequence of
prompts; only the order in which they reach the engine differs).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import gymnasium as gym

from agentfly_train.generation.base import GenerationBackend, SamplingParams
from agentfly_train.rollout.codec import ChatCodec
from agentfly_train.rollout.episode import EngineTime, RolloutBudgets, Trajectory
from agentfly_train.rollout.stream import EpisodeStream, run_to_end


def run_rollouts_async(
    envs: Sequence[gym.Env],
    tasks: Sequence[Mapping[str, Any]],
    engine: GenerationBackend,
    codec: ChatCodec,
    budgets: RolloutBudgets,
    params: SamplingParams,
    executor: ThreadPoolExecutor,
    timing: EngineTime | None = None,
    retries: int = 0,
    ended: Callable[[int, Trajectory], None] | None = None,
) -> list[Trajectory]:
    """Runs one episode per ``(env, task)`` pair to the end, each at its own pace
    (an :class:`~agentfly_train.rollout.stream.EpisodeStream` pumped until they have ended).

    Args:
        envs: Environments, one per episode (reset here with ``options={"task": task}``).
        tasks: Dataset rows, one per episode.
        engine: A backend that streams requests (:attr:`~agentfly_train.generation.GenerationBackend.streams`).
        codec: Chat-template token ids.
        budgets: Turn and token limits.
        params: Sampling parameters.
        executor: Threads that step the envs; a turn's env step starts as soon as its generation finishes.
        timing: Accumulates the engine's busy time (it had requests) and idle time (every unfinished episode
            was waiting on its env).
        retries: Replays of an episode that met an infrastructure failure.
        ended: Called with an episode's index and final trajectory as soon as it has ended.

    Returns:
        One :class:`Trajectory` per episode, in order (the synchronous loop's, under greedy decoding).
    """
    stream = EpisodeStream(engine, codec, budgets, executor, timing, retries)
    return run_to_end(stream, envs, tasks, params, range(len(envs)), ended)
