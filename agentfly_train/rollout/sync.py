"""Turn-synchronous rollouts: every turn is one batched generation call for all active episodes, then the envs of
the turn step concurrently, and the next turn waits for the slowest of them (the HF backend's loop)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import gymnasium as gym

from agentfly_train.generation import GenerationBackend, SamplingParams
from agentfly_train.rollout.codec import ChatCodec
from agentfly_train.rollout.episode import (
    EngineTime,
    RolloutBudgets,
    Trajectory,
    finish,
    needs_env_step,
    open_episode,
    record_turn,
    replay,
    room_left,
    step_env,
    summary_request,
    take_summary,
    turn_budget,
)


def run_rollouts(
    envs: Sequence[gym.Env],
    tasks: Sequence[Mapping[str, Any]],
    backend: GenerationBackend,
    codec: ChatCodec,
    budgets: RolloutBudgets,
    params: SamplingParams,
    executor: ThreadPoolExecutor,
    timing: EngineTime | None = None,
    retries: int = 0,
    ended: Callable[[int, Trajectory], None] | None = None,
) -> list[Trajectory]:
    """Runs one episode per ``(env, task)`` pair to the end; one that ends on an infrastructure failure (in a step or
    in its reset) is played again from its start, up to ``retries`` times
    (:func:`~agentfly_train.rollout.episode.replay`).

    Args:
        envs: Environments, one per episode (reset here with ``options={"task": task}``).
        tasks: Dataset rows, one per episode.
        backend: The generator.
        codec: Chat-template token ids.
        budgets: Turn and token limits.
        params: Sampling parameters.
        executor: Threads that step the envs of a turn concurrently.
        timing: Accumulates the engine's busy time (generation calls) and idle time (the turns' env steps).
        retries: Replays of an episode that met an infrastructure failure.
        ended: Called with an episode's index and final trajectory as soon as it has ended (e.g. to judge its group
            while the others play on).

    Returns:
        One :class:`Trajectory` per episode, in order.
    """
    trajectories = [open_episode(env, task, codec, budgets, retries) for env, task in zip(envs, tasks, strict=True)]
    active = [index for index, trajectory in enumerate(trajectories) if trajectory.infra_failure is None]
    if ended is not None:
        for index in sorted(set(range(len(trajectories))) - set(active)):
            ended(index, trajectories[index])
    while active:
        start = time.perf_counter()
        _write_summaries([trajectories[i] for i in active], backend, codec, budgets, params)
        rooms = [room_left(trajectories[i], budgets) for i in active]
        images = [trajectories[i].images for i in active]
        generations = backend.generate(
            [list(trajectories[i].context_ids) for i in active],
            [turn_budget(trajectories[i], budgets) for i in active],
            params,
            **({"images": images} if any(images) else {}),  # a backend that supports_images (config checks)
        )
        generated = time.perf_counter()
        texts = [codec.decode(g.token_ids) for g in generations]
        stepping = [n for n, (g, room) in enumerate(zip(generations, rooms, strict=True)) if needs_env_step(g, room)]
        results = executor.map(step_env, [envs[active[n]] for n in stepping], [texts[n] for n in stepping])
        stepped = dict(zip(stepping, results, strict=True))
        if timing is not None:
            timing.busy_s += generated - start
            timing.idle_s += time.perf_counter() - generated
        going = []
        for n, index in enumerate(active):
            trajectory, env = trajectories[index], envs[index]
            if record_turn(trajectory, generations[n], texts[n], stepped.get(n), codec, budgets):
                if trajectory.num_turns < budgets.max_turns:
                    going.append(index)
                    continue
                finish(trajectory, "max_turns", budgets.truncation_reward)
            attempt = replay(trajectory, env, tasks[index], codec, budgets, retries)
            if attempt is not None:
                trajectories[index] = attempt
                if attempt.infra_failure is None:
                    going.append(index)
                    continue
            if ended is not None:
                ended(index, trajectories[index])
        active = going
    return trajectories


def _write_summaries(
    trajectories: Sequence[Trajectory],
    backend: GenerationBackend,
    codec: ChatCodec,
    budgets: RolloutBudgets,
    params: SamplingParams,
) -> None:
    """The summaries the context policy asks for before the next turn of ``trajectories``, sampled in one batched call
    and taken into their contexts (:func:`~agentfly_train.rollout.episode.take_summary`)."""
    requests = [(t, ids) for t in trajectories if (ids := summary_request(t, codec, budgets)) is not None]
    if not requests:
        return
    prompts = [ids for _, ids in requests]
    written = backend.generate(prompts, [budgets.context.summary_tokens] * len(prompts), params)
    for (trajectory, _), generation in zip(requests, written, strict=True):
        take_summary(trajectory, generation, codec, budgets)
