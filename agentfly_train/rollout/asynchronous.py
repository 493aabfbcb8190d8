"""Asynchronous rollouts: every episode advances on its own. Its next turn is submitted to the engine the moment
its env step returns, and the engine batches whatever requests are pending at each of its steps (vLLM's continuous
batching), so a slow tool call holds back only its own episode, never the generation of the others.

Under greedy decoding the trajectories are the turn-synchronous loop's (each episode sees the same sequence of
prompts; only the order in which they reach the engine differs).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

import gymnasium as gym

from agentfly_train.generation.base import Generation, GenerationBackend, SamplingParams
from agentfly_train.rollout.codec import ChatCodec
from agentfly_train.rollout.episode import (
    EngineTime,
    RolloutBudgets,
    StepResult,
    Trajectory,
    finish,
    needs_env_step,
    record_turn,
    room_left,
    start_episode,
    step_env,
    turn_budget,
)

_REQUEST_IDS = itertools.count()


def run_rollouts_async(
    envs: Sequence[gym.Env],
    tasks: Sequence[Mapping[str, Any]],
    engine: GenerationBackend,
    codec: ChatCodec,
    budgets: RolloutBudgets,
    params: SamplingParams,
    executor: ThreadPoolExecutor,
    timing: EngineTime | None = None,
) -> list[Trajectory]:
    """Runs one episode per ``(env, task)`` pair to the end, each at its own pace.

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

    Returns:
        One :class:`Trajectory` per episode, in order (the synchronous loop's, under greedy decoding).
    """
    trajectories = [start_episode(env, task, codec) for env, task in zip(envs, tasks, strict=True)]
    requests: dict[str, int] = {}  # request id -> episode
    rooms: dict[int, int] = {}

    def submit(index: int) -> None:
        trajectory = trajectories[index]
        request_id = f"episode-{index}-{next(_REQUEST_IDS)}"
        requests[request_id] = index
        rooms[index] = room_left(trajectory, budgets)
        prompt = trajectory.prompt_ids + trajectory.completion_ids
        engine.submit(request_id, prompt, turn_budget(trajectory, budgets), params)

    def advance(index: int, generation: Generation, text: str, stepped: StepResult | None) -> None:
        trajectory, env = trajectories[index], envs[index]
        if not record_turn(trajectory, env, generation, text, stepped, codec, budgets):
            return
        if trajectory.num_turns >= budgets.max_turns:
            finish(trajectory, env, "max_turns")
        else:
            submit(index)

    for index in range(len(envs)):
        submit(index)
    stepping: dict[Future[StepResult], tuple[int, Generation, str]] = {}
    while engine.has_unfinished() or stepping:
        start = time.perf_counter()
        if engine.has_unfinished():
            finished = engine.step()
            if timing is not None:
                timing.busy_s += time.perf_counter() - start
        else:  # every unfinished episode waits on its env
            wait(list(stepping), return_when=FIRST_COMPLETED)
            finished = []
            if timing is not None:
                timing.idle_s += time.perf_counter() - start
        for request_id, generation in finished:
            index = requests.pop(request_id)
            text = codec.decode(generation.token_ids)
            if needs_env_step(generation, rooms[index]):
                stepping[executor.submit(step_env, envs[index], text)] = (index, generation, text)
            else:
                advance(index, generation, text, None)
        for future in [future for future in stepping if future.done()]:
            index, generation, text = stepping.pop(future)
            advance(index, generation, text, future.result())
    return trajectories
