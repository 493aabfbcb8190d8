"""Episodes streamed through a generation engine, each at its own pace, each sampled token tagged with the policy
version that produced it.

An :class:`EpisodeStream` holds episodes in flight: :meth:`EpisodeStream.start` resets an env and submits the
episode's first turn; every :meth:`EpisodeStream.pump` runs one engine step over whatever requests are pending (or,
with none pending, waits for an env step) and moves on each episode whose turn or env step finished. Episodes can
be started at any time, between any two pumps, and the policy version (:attr:`EpisodeStream.version`) can change
between pumps too: a turn sampled after the change carries the new version, the earlier turns of its episode keep
theirs (a partial rollout). The turn-by-turn asynchronous loop (:func:`~agentfly_train.rollout.run_rollouts_async`)
and off-policy training (:mod:`agentfly_train.trainer.schedules`) both drive one.

An engine that does not stream requests (Hugging Face ``generate``) is streamed by :class:`BatchedRequests`: each of
its steps samples every pending request to the end in one batched call.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Protocol

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
    open_episode,
    record_turn,
    replay,
    room_left,
    step_env,
    summary_request,
    take_summary,
    turn_budget,
)

_REQUEST_IDS = itertools.count()


class Episodes(Protocol):
    """Episodes in flight over one engine, as the off-policy schedule and :func:`run_to_end` drive them: the turn
    loop's (:class:`EpisodeStream`) or an agent program's
    (:class:`~agentfly_train.programs.runner.ProgramStream`)."""

    version: int
    """The policy version the engine samples with now; each sampled token is tagged with it."""
    finished: list[int]
    """Keys of the episodes that ended, in the order they ended (the caller takes them out)."""

    def start(self, key: int, env: gym.Env, task: Mapping[str, Any], params: SamplingParams) -> None:
        """Starts an episode of ``task`` on ``env``; ``key`` names it until it is taken."""
        ...

    def peek(self, key: int) -> Trajectory:
        """The trajectory of a finished episode, left in the stream."""
        ...

    def take(self, key: int) -> Trajectory:
        """The trajectory of a finished episode, which the stream then forgets."""
        ...

    @property
    def in_flight(self) -> int:
        """Episodes started and not finished."""
        ...

    def pump(self, wait_for_env: bool = True) -> bool:
        """One engine step over what is pending, or, with nothing pending, a wait for what the episodes wait on
        (``wait_for_env``); whether the engine stepped."""
        ...

    def env_futures(self) -> list[Future[Any]]:
        """What the episodes wait on besides the engine (to wait on outside :meth:`pump`)."""
        ...

    def oldest_version(self, key: int) -> int:
        """The oldest policy version among an episode's sampled tokens."""
        ...

    def close(self) -> None:
        """Releases what the stream holds of its own."""
        ...


@dataclass(frozen=True)
class _Pending:
    prompt_ids: Sequence[int]
    max_new_tokens: int
    params: SamplingParams
    images: Sequence[Any]


class BatchedRequests:
    """The streaming interface (``submit``/``step``/``has_unfinished``) over a backend that samples batches only:
    a step samples every pending request to its end in one :meth:`~GenerationBackend.generate` call per sampling
    setting, so a weight change between steps never falls inside a turn.

    Args:
        backend: Any backend.
    """

    def __init__(self, backend: GenerationBackend) -> None:
        self.backend = backend
        self.pending: dict[str, _Pending] = {}

    def submit(
        self,
        request_id: str,
        prompt_ids: Sequence[int],
        max_new_tokens: int,
        params: SamplingParams,
        images: Sequence[Any] = (),
    ) -> None:
        """Queues one request for the next :meth:`step`; ``images`` are those its prompt's image tokens stand for
        (a backend that :attr:`~GenerationBackend.supports_images`)."""
        self.pending[request_id] = _Pending(prompt_ids, max_new_tokens, params, images)

    def step(self) -> list[tuple[str, Generation]]:
        """Samples every pending request (one batch per distinct sampling setting); returns them all."""
        pending, self.pending = self.pending, {}
        finished = []
        for params in dict.fromkeys(request.params for request in pending.values()):
            ids = [request_id for request_id, request in pending.items() if request.params == params]
            batch = [pending[i] for i in ids]
            images = [list(request.images) for request in batch]
            generations = self.backend.generate(
                [request.prompt_ids for request in batch],
                [request.max_new_tokens for request in batch],
                params,
                **({"images": images} if any(images) else {}),
            )
            finished += list(zip(ids, generations, strict=True))
        return finished

    def has_unfinished(self) -> bool:
        """Whether a request is pending."""
        return bool(self.pending)


def streaming(backend: GenerationBackend) -> Any:
    """``backend`` itself if it :attr:`~GenerationBackend.streams`, else :class:`BatchedRequests` over it."""
    return backend if backend.streams else BatchedRequests(backend)


@dataclass
class _Request:
    key: int
    room: int
    version: int
    summary: bool = False


@dataclass
class _Episode:
    trajectory: Trajectory
    env: gym.Env
    task: Mapping[str, Any]
    params: SamplingParams
    started_version: int


class EpisodeStream:
    """Episodes in flight over one streaming engine (see the module's docstring).

    Args:
        engine: Takes requests one at a time (a backend that streams, or :func:`streaming` of one).
        codec: Chat-template token ids.
        budgets: Turn and token limits.
        executor: Threads that step the envs; a turn's env step starts as soon as its generation finishes.
        timing: Accumulates the engine's busy time (it had requests) and idle time (every unfinished episode was
            waiting on its env).
        retries: Replays of an episode that ends on an infrastructure failure, from its start on the same env
            (:func:`~agentfly_train.rollout.episode.replay`); it is finished when it stands.
    """

    def __init__(
        self,
        engine: Any,
        codec: ChatCodec,
        budgets: RolloutBudgets,
        executor: ThreadPoolExecutor,
        timing: EngineTime | None = None,
        retries: int = 0,
    ) -> None:
        self.engine = engine
        self.retries = retries
        self.codec = codec
        self.budgets = budgets
        self.executor = executor
        self.timing = timing if timing is not None else EngineTime()
        self.version = 0
        """The policy version the engine samples with now; each sampled token is tagged with it."""
        self.finished: list[int] = []
        """Keys of the episodes that ended, in the order they ended (the caller takes them out)."""
        self._episodes: dict[int, _Episode] = {}
        self._requests: dict[str, _Request] = {}
        self._stepping: dict[Future[StepResult], tuple[int, Generation, str, int]] = {}

    def start(self, key: int, env: gym.Env, task: Mapping[str, Any], params: SamplingParams) -> None:
        """Resets ``env`` into ``task`` and submits the episode's first turn; ``key`` names it until it is taken."""
        trajectory = open_episode(env, task, self.codec, self.budgets, self.retries)
        self._episodes[key] = _Episode(trajectory, env, task, params, self.version)
        if trajectory.infra_failure is None:
            self._submit(key)
        else:  # every reset failed: it ends here, excluded
            self.finished.append(key)

    def peek(self, key: int) -> Trajectory:
        """The trajectory of a finished episode, left in the stream (e.g. for the judge to score)."""
        return self._episodes[key].trajectory

    def take(self, key: int) -> Trajectory:
        """The trajectory of a finished episode, which the stream then forgets."""
        self.finished.remove(key)
        return self._episodes.pop(key).trajectory

    @property
    def in_flight(self) -> int:
        """Episodes started and not finished."""
        return len(self._episodes) - len(self.finished)

    def idle(self) -> bool:
        """Whether nothing is in flight (no request pending, no env stepping)."""
        return not self.engine.has_unfinished() and not self._stepping

    def pump(self, wait_for_env: bool = True) -> bool:
        """One engine step over the pending requests or, with none pending, a wait until an env step finishes
        (``wait_for_env``; else no wait); then every finished turn and env step moves its episode on.

        Returns:
            Whether the engine stepped.
        """
        start = time.perf_counter()
        stepped = self.engine.has_unfinished()
        if stepped:
            finished = self.engine.step()
            self.timing.busy_s += time.perf_counter() - start
        else:
            if self._stepping and wait_for_env:
                wait(list(self._stepping), return_when=FIRST_COMPLETED)
                self.timing.idle_s += time.perf_counter() - start
            finished = []
        for request_id, generation in finished:
            request = self._requests.pop(request_id)
            if request.summary:
                take_summary(self._episodes[request.key].trajectory, generation, self.codec, self.budgets)
                self._submit(request.key)
                continue
            text = self.codec.decode(generation.token_ids)
            if needs_env_step(generation, request.room):
                future = self.executor.submit(step_env, self._episodes[request.key].env, text)
                self._stepping[future] = (request.key, generation, text, request.version)
            else:
                self._advance(request.key, generation, text, None, request.version)
        for future in [future for future in self._stepping if future.done()]:
            key, generation, text, version = self._stepping.pop(future)
            self._advance(key, generation, text, future.result(), version)
        return stepped

    def env_futures(self) -> list[Future[StepResult]]:
        """The env steps under way (to wait on outside :meth:`pump`)."""
        return list(self._stepping)

    def oldest_version(self, key: int) -> int:
        """The oldest policy version among an episode's sampled tokens (its first turn's)."""
        return self._episodes[key].started_version

    def close(self) -> None:
        """Nothing to release: the envs are the pool's, the engine the run's."""
        return

    def _submit(self, key: int) -> None:
        """Submits the episode's next turn, or first the summary its context policy asks for (never trained)."""
        episode = self._episodes[key]
        request_id = f"episode-{key}-{next(_REQUEST_IDS)}"
        summary = summary_request(episode.trajectory, self.codec, self.budgets)
        if summary is not None:
            self._requests[request_id] = _Request(key, 0, self.version, summary=True)
            self.engine.submit(request_id, summary, self.budgets.context.summary_tokens, episode.params)
            return
        self._requests[request_id] = _Request(key, room_left(episode.trajectory, self.budgets), self.version)
        prompt = list(episode.trajectory.context_ids)
        images = episode.trajectory.images  # only a backend that supports_images is given images (config checks)
        self.engine.submit(
            request_id,
            prompt,
            turn_budget(episode.trajectory, self.budgets),
            episode.params,
            **({"images": images} if images else {}),
        )

    def _advance(self, key: int, generation: Generation, text: str, stepped: StepResult | None, version: int) -> None:
        episode = self._episodes[key]
        trajectory = episode.trajectory
        if record_turn(trajectory, generation, text, stepped, self.codec, self.budgets, version):
            if trajectory.num_turns < self.budgets.max_turns:
                self._submit(key)
                return
            finish(trajectory, "max_turns", self.budgets.truncation_reward)
        attempt = replay(trajectory, episode.env, episode.task, self.codec, self.budgets, self.retries)
        if attempt is not None:
            episode.trajectory, episode.started_version = attempt, self.version
        if attempt is None or attempt.infra_failure is not None:
            self.finished.append(key)
            return
        self._submit(key)


def run_to_end(
    stream: Episodes,
    envs: Sequence[gym.Env],
    tasks: Sequence[Mapping[str, Any]],
    params: SamplingParams,
    keys: Iterable[int],
    ended: Callable[[int, Trajectory], None] | None = None,
) -> list[Trajectory]:
    """Starts one episode per ``(env, task)`` under ``keys`` and pumps ``stream`` until they have all ended;
    ``ended`` is called with each episode's position in ``tasks`` and its trajectory as soon as it has.

    Returns:
        Their trajectories, in the order of ``tasks``.
    """
    keys = list(keys)
    position = {key: n for n, key in enumerate(keys)}
    for key, env, task in zip(keys, envs, tasks, strict=True):
        stream.start(key, env, task, params)
    waiting = set(keys)
    while waiting:
        for key in waiting.intersection(stream.finished):
            waiting.discard(key)
            if ended is not None:
                ended(position[key], stream.peek(key))
        if waiting:
            stream.pump()
    return [stream.take(key) for key in keys]
