"""Agent programs' episodes: each program runs in a thread of its own against its episode's endpoint, and this
thread serves their requests from the run's generation backend, batching those that wait together.

Every request is read (:mod:`.wire`), given its prompt ids (:class:`~.session.ProgramEpisode`), sampled through the
backend's streaming interface (:func:`~agentfly_train.rollout.stream.streaming`: an engine that streams requests takes
them as they come; the Hugging Face backend samples every request waiting at once), and answered with the family's
tool calls read from the sampled ids (:meth:`~agentfly_train.rollout.ChatCodec.decode`). When a program returns, its
episode is scored: a float is the reward, a string is the answer the env scores against the task row (the env reset
into the row, then stepped with its answer action). A program that raises, returns anything else, or outlives
``agent.program_timeout`` scores 0 and says why in :attr:`~agentfly_train.rollout.Trajectory.reward_error` (one line,
counted in ``reward/errors``); a program left running is abandoned, its requests refused.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import json
import math
import numbers
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from agentfly_envs.contract import env_contract
from agentfly_envs.errors import InfrastructureError, one_line
from agentfly_train.generation.base import Generation, GenerationBackend, SamplingParams
from agentfly_train.programs.endpoint import CompletionsServer, Request
from agentfly_train.programs.session import BudgetSpent, ProgramEpisode, SampledTurn, finished, stop_at
from agentfly_train.programs.wire import (
    ChatRequest,
    Choice,
    WireError,
    completion_response,
    conversation_message,
    error_body,
    read_request,
)
from agentfly_train.rollout.codec import ChatCodec, assistant_message
from agentfly_train.rollout.episode import EngineTime, RolloutBudgets, Trajectory
from agentfly_train.rollout.stream import run_to_end, streaming

GATHER_S = 0.02
"""How long the idle engine waits at least for the next request while fewer requests wait than programs run, seconds:
programs answered together ask again within milliseconds of each other (the SDK parses the response, the program
appends it), so a longer pause means the others are busy elsewhere (a tool call); they join the next batch."""
GATHER_SHARE = 0.1
"""... and at most this share of the engine's last step (a batch costs the same with a straggler or without it, and on
a loaded machine programs ask again tens of milliseconds apart)."""
START_GATHER_S = 0.5
"""... and, before the rollout's first engine step, this long: every program has just started (its client is built,
its first request rendered), so all of them are about to ask."""
_RUNS = itertools.count()


@dataclass(frozen=True)
class ProgramSettings:
    """The agent program of a run (``agent.program``).

    Attributes:
        program: The function: ``program(endpoint=..., task=...)``, sync or async
            (:class:`~agentfly_train.programs.Endpoint`, the row as a dict).
        name: Its ``agent.program`` spec (in messages).
        timeout: Seconds an episode's program may run (``agent.program_timeout``).
        model: The policy's name, the endpoint's ``model``.
    """

    program: Callable[..., Any]
    name: str
    timeout: float
    model: str

    def play(
        self,
        envs: Sequence[gym.Env],
        tasks: Sequence[Mapping[str, Any]],
        backend: GenerationBackend,
        codec: ChatCodec,
        budgets: RolloutBudgets,
        params: SamplingParams,
        timing: EngineTime | None = None,
    ) -> list[Trajectory]:
        """One episode of the program per ``(env, task)``, all at once, to their ends (the rollout driver's
        :class:`~agentfly_train.rollout.agent.EpisodePlayer`).

        Args:
            envs: One env per episode (scores a string answer; the program plays the task itself).
            tasks: Dataset rows, one per episode (each program's ``task``).
            backend: The generator.
            codec: The policy's chat codec (each request renders its own tools: :meth:`ChatCodec.with_tools`).
            budgets: Turn (a turn per choice) and token limits, and the reward of an episode they cut short.
            params: The run's sampling (a request's ``temperature`` and ``top_p`` replace it for that request).
            timing: Accumulates the engine's busy time and its idle time (waiting for requests).

        Returns:
            One :class:`~agentfly_train.rollout.Trajectory` per episode, in order.
        """
        stream = self.stream(backend, codec, budgets, timing)
        try:
            return run_to_end(stream, envs, tasks, params, range(len(tasks)))
        finally:
            stream.close()

    def stream(
        self, backend: GenerationBackend, codec: ChatCodec, budgets: RolloutBudgets, timing: EngineTime | None = None
    ) -> ProgramStream:
        """A stream of this program's episodes over ``backend`` (see :class:`ProgramStream`), for the off-policy
        schedule; close it when done."""
        return ProgramStream(backend, codec, budgets, self, timing)


@dataclass
class _Running:
    """A program's episode in flight: ``key`` names it in its URL, ``stream_key`` in the stream."""

    key: str
    stream_key: int
    env: gym.Env
    task: Mapping[str, Any]
    params: SamplingParams
    episode: ProgramEpisode
    deadline: float
    started_version: int
    outcome: tuple[str, Any, Mapping[str, Any]] | None = None
    """``("reward", value, env info)``, ``("error", message, {})`` or ``("infra", message, {})`` once it returned."""
    env_seconds: float = 0.0
    trajectory: Trajectory | None = None


@dataclass
class _Waiting:
    """A request whose choices are being sampled."""

    running: _Running
    answer: Any
    request: ChatRequest
    codec: ChatCodec
    prompt: list[int]
    extends: bool
    version: int
    generations: dict[int, Generation] = field(default_factory=dict)


def _score(result: Any, env: gym.Env, task: Mapping[str, Any]) -> tuple[str, Any, Mapping[str, Any]]:
    """A program's outcome: its float reward, or its string answer as the env scores it."""
    if isinstance(result, numbers.Real) and not isinstance(result, bool):
        if math.isfinite(float(result)):
            return "reward", float(result), {}
        return "error", f"returned {result}: the reward must be finite", {}
    if not isinstance(result, str):
        return "error", f"returned {type(result).__name__}: expected a float reward or a str answer", {}
    try:
        env.reset(options={"task": dict(task)})
        _, reward, _, _, info = env.step(env_contract(env).answer_action(result))
    except InfrastructureError as error:
        return "infra", f"scoring the answer: {one_line(error)}", {}
    return "reward", float(reward), info


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


def _play(running: _Running, settings: ProgramSettings, server: CompletionsServer) -> None:
    """Runs the program of an episode to its end and scores it (in the episode's thread)."""
    try:
        endpoint = server.endpoint(running.key, settings.model)
        result = settings.program(endpoint=endpoint, task=dict(running.task))
        if inspect.isawaitable(result):
            result = asyncio.run(_awaited(result))
        start = time.perf_counter()
        running.outcome = _score(result, running.env, running.task)
        running.env_seconds = time.perf_counter() - start
    except BaseException as error:  # the user's program: whatever it raises ends its episode only
        running.outcome = "error", f"raised {type(error).__name__}: {one_line(error)}", {}
    finally:
        server.hand_over(None)  # wakes the rollout thread


def _trajectory(running: _Running, settings: ProgramSettings, budgets: RolloutBudgets) -> Trajectory:
    """The finished trajectory of an episode whose program returned, failed or ran out of time."""
    trajectory = running.episode.trajectory()
    trajectory.env_seconds = running.env_seconds
    kind, value, info = running.outcome or ("error", f"did not return within {settings.timeout:g} s", {})
    if running.episode.ended is not None:  # a budget ended it, whatever the program made of that
        return finished(trajectory, running.episode.ended, 0.0, budgets)
    if kind == "reward":
        return finished(trajectory, "stop", value, budgets, info)
    finished(trajectory, "stop", 0.0, budgets)
    if kind == "infra":
        trajectory.infra_failure = value
    else:
        trajectory.reward_error = f"agent program {settings.name} {value}"
    return trajectory


class ProgramStream:
    """Agent programs' episodes in flight over one engine, driven as the turn loop's
    (:class:`~agentfly_train.rollout.stream.Episodes`): :meth:`start` starts an episode's
    program in a thread of its own, each :meth:`pump` serves the requests waiting (it waits for one, gathering those
    that come together, when the engine is idle and ``wait_for_env`` allows) and runs one engine step, and an episode
    is :attr:`finished` once its program returned, failed or ran out of time. Each sampled turn is tagged with
    :attr:`version` as it was when its request was submitted. Its endpoint serves until :meth:`close`.

    Args:
        backend: The generator.
        codec: The policy's chat codec.
        budgets: Turn and token limits.
        settings: The program.
        timing: Accumulates the engine's busy time and its idle time (waiting for requests).
    """

    def __init__(
        self,
        backend: GenerationBackend,
        codec: ChatCodec,
        budgets: RolloutBudgets,
        settings: ProgramSettings,
        timing: EngineTime | None = None,
    ) -> None:
        self.engine = streaming(backend)
        self.codec = codec
        self.budgets = budgets
        self.settings = settings
        self.timing = timing if timing is not None else EngineTime()
        self.version = 0
        """The policy version the engine samples with now; each sampled turn is tagged with it."""
        self.finished: list[int] = []
        """Keys of the episodes that ended, in the order they ended (the caller takes them out)."""
        self.server = CompletionsServer()
        self.codecs: dict[str, ChatCodec] = {}
        self.waiting: dict[str, tuple[_Waiting, int]] = {}
        self.request_ids = itertools.count()
        self.last_step_s = 0.0
        self._run = next(_RUNS)
        self._episodes: dict[int, _Running] = {}
        self._by_url: dict[str, _Running] = {}

    def start(self, key: int, env: gym.Env, task: Mapping[str, Any], params: SamplingParams) -> None:
        """Starts the program of an episode of ``task`` (``env`` scores a string answer), sampled with ``params``
        (a request's own ``temperature`` and ``top_p`` replace them); ``key`` names it until it is taken."""
        deadline = time.monotonic() + self.settings.timeout
        url_key = f"r{self._run}e{key}"
        running = _Running(url_key, key, env, task, params, ProgramEpisode(self.budgets), deadline, self.version)
        self._episodes[key] = self._by_url[url_key] = running
        self.server.live.add(url_key)
        name = f"agent-program-{url_key}"
        threading.Thread(target=_play, args=(running, self.settings, self.server), name=name, daemon=True).start()

    def peek(self, key: int) -> Trajectory:
        """The trajectory of a finished episode, left in the stream."""
        trajectory = self._episodes[key].trajectory
        assert trajectory is not None, f"episode {key} has not finished"
        return trajectory

    def take(self, key: int) -> Trajectory:
        """The trajectory of a finished episode, which the stream then forgets."""
        trajectory = self.peek(key)
        self.finished.remove(key)
        del self._by_url[self._episodes.pop(key).key]
        return trajectory

    @property
    def in_flight(self) -> int:
        """Episodes started and not finished."""
        return len(self._episodes) - len(self.finished)

    def pump(self, wait_for_env: bool = True) -> bool:
        """Serves the requests waiting (with none and an idle engine, waits for them when ``wait_for_env``: see
        :meth:`_take`), ends the episodes whose program returned or ran out of time, then runs one engine step.

        Returns:
            Whether the engine stepped.
        """
        for request in self._take(wait_for_env):
            self._start(request)
        self._end_finished()
        stepped = self.engine.has_unfinished()
        if stepped:
            start = time.perf_counter()
            finished_requests = self.engine.step()
            self.last_step_s = time.perf_counter() - start
            self.timing.busy_s += self.last_step_s
            for request_id, generation in finished_requests:
                self._sampled(request_id, generation)
        return stepped

    def env_futures(self) -> list[Future[None]]:
        """What the engine waits for when it has nothing to sample: the next request, or a program's end."""
        return [self.server.arrival()]

    def oldest_version(self, key: int) -> int:
        """The oldest policy version among an episode's sampled turns (its start's, before any)."""
        running = self._episodes[key]
        return min((turn.version for turn in running.episode.turns), default=running.started_version)

    def close(self) -> None:
        """Stops the endpoint: the requests still open are refused (HTTP 404), and the programs still running are
        abandoned (their next request is refused too)."""
        self.server.live.clear()
        for waiting, _ in self.waiting.values():
            if not waiting.answer.done():
                waiting.answer.set_result((404, error_body("the rollout ended")))
        self.waiting.clear()
        while not self.server.requests.empty():
            if (request := self.server.requests.get()) is not None:
                request.answer.set_result((404, error_body(f"episode {request.key} is not running")))
        self.server.close()

    def _take(self, wait_for_env: bool) -> list[Request]:
        """The requests waiting: with the engine busy (or without ``wait_for_env``), those queued now; else at least one
        (or a program's end, or the nearest deadline), then more while fewer wait than programs run and each comes
        within :data:`GATHER_S` (or :data:`GATHER_SHARE` of the last engine step, if longer; :data:`START_GATHER_S`
        before the stream's first engine step) of the one before."""
        server = self.server
        taken: list[Request | None] = []
        if self.engine.has_unfinished() or not wait_for_env or not server.live:
            while not server.requests.empty():
                taken.append(server.requests.get())
            return [r for r in taken if r is not None]
        start = time.perf_counter()
        nearest = min(self._by_url[key].deadline for key in server.live)
        gap = max(GATHER_S, GATHER_SHARE * self.last_step_s) if self.last_step_s else START_GATHER_S
        try:
            taken.append(server.requests.get(timeout=max(nearest - time.monotonic(), 0.0) + 0.01))
            while sum(r is not None for r in taken) < sum(self._by_url[key].outcome is None for key in server.live):
                taken.append(server.requests.get(timeout=gap))  # a program's end (None) does not end the wait
        except queue.Empty:
            pass
        self.timing.idle_s += time.perf_counter() - start
        return [r for r in taken if r is not None]

    def _end_finished(self) -> None:
        """Ends the episodes whose program returned or ran out of time."""
        now = time.monotonic()
        live = self.server.live
        for key in [key for key in live if self._by_url[key].outcome is not None or self._by_url[key].deadline <= now]:
            live.discard(key)
            running = self._by_url[key]
            running.trajectory = _trajectory(running, self.settings, self.budgets)
            self.finished.append(running.stream_key)

    def _codec(self, tools: list[dict[str, Any]] | None) -> ChatCodec:
        name = json.dumps(tools, sort_keys=True)
        if name not in self.codecs:
            self.codecs[name] = self.codec.with_tools(tools)
        return self.codecs[name]

    def _start(self, request: Request) -> None:
        """Reads a request and submits its choices, or answers it with the reason it is refused."""
        running = self._by_url.get(request.key)
        if running is None or running.trajectory is not None:
            request.answer.set_result((404, error_body(f"episode {request.key} is not running")))
            return
        try:
            chat = read_request(request.body)
            codec = self._codec(chat.tools)
            prompt, extends, budget = running.episode.prompt(codec, chat)
        except (WireError, BudgetSpent) as error:
            request.answer.set_result((400, error_body(str(error))))
            return
        params = SamplingParams(
            running.params.temperature if chat.temperature is None else chat.temperature,
            running.params.top_p if chat.top_p is None else chat.top_p,
            running.params.top_k,
        )
        waiting = _Waiting(running, request.answer, chat, codec, prompt, extends, self.version)
        for choice in range(chat.n):
            request_id = f"{request.key}-{next(self.request_ids)}"
            self.waiting[request_id] = (waiting, choice)
            self.engine.submit(request_id, prompt, budget, params)

    def _sampled(self, request_id: str, generation: Generation) -> None:
        """Records a sampled choice; once every choice of its request is in, answers the request."""
        entry = self.waiting.pop(request_id, None)
        if entry is None:  # of an episode this stream closed on, or of an earlier stream over this streaming engine
            return
        waiting, choice = entry
        waiting.generations[choice] = generation
        if len(waiting.generations) < waiting.request.n:
            return
        choices = [self._choice(waiting, n, waiting.generations[n]) for n in range(waiting.request.n)]
        response = completion_response(
            f"chatcmpl-{request_id}", self.settings.model, choices, len(waiting.prompt), waiting.request.logprobs
        )
        waiting.answer.set_result((200, response))

    def _choice(self, waiting: _Waiting, index: int, generation: Generation) -> Choice:
        """A sampled choice: its stop text cut, its calls read, recorded in its episode."""
        codec, request = waiting.codec, waiting.request
        texts = [codec.tokenizer.decode([token], skip_special_tokens=True) for token in generation.token_ids]
        cut = stop_at(texts, request.stop) if request.stop else None
        kept = cut[0] if cut else len(texts)
        message = assistant_message(codec.decode(generation.token_ids[:kept]))
        if cut and not message.get("tool_calls"):
            message = {"role": "assistant", "content": "".join(texts)[: cut[1]]}
        message = conversation_message(message)
        turn = len(waiting.running.episode.turns)
        for n, call in enumerate(message.get("tool_calls", ())):
            call["id"] = call["id"] or f"call_{waiting.running.key}_{turn}_{n}"
        reason = "tool_calls" if message.get("tool_calls") else "stop" if cut or generation.stopped else "length"
        waiting.running.episode.record(
            SampledTurn(waiting.prompt, generation, generation.token_ids[:kept], request.messages, message,
                        waiting.extends and index == 0, waiting.version)
        )  # fmt: skip
        return Choice(message, texts[:kept], generation.logprobs[:kept], reason)
