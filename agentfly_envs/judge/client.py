"""The judge's client: an OpenAI-compatible chat endpoint (a vLLM server) asked for JSON that a regular expression
constrains (vLLM's structured outputs).

Requests go out concurrently from one event loop on a background thread (:meth:`JudgeClient.submit` returns a
``concurrent.futures.Future``, so the rollout can go on while the judge works); the server batches them. Each
answer is cached by the digest of the model, the prompt and the schema, so a repeated (task, answer) pair is not
judged twice. Each request has a timeout and is retried; a judge that stays down raises
:class:`JudgeUnavailableError`, an :class:`~agentfly_envs.errors.InfrastructureError`: the episode it was to score is
left out of training, never scored 0. Needs the ``judge`` extra (the ``openai`` SDK).

vLLM (0.10 and later) constrains the output with ``structured_outputs: {regex: pattern}`` in the request's body
(:mod:`agentfly_envs.judge.verdicts` says why a regular expression and not a JSON schema).
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import json
import threading
import time
from collections.abc import Coroutine
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, TypeVar

from agentfly_envs.errors import InfrastructureError, one_line

T = TypeVar("T")
START_HINT = "start one with: python -m vllm.entrypoints.openai.api_server --model MODEL"


class JudgeUnavailableError(InfrastructureError):
    """The judge did not answer (or answered no usable JSON) after its retries: an infrastructure failure."""


@dataclass(frozen=True)
class JudgeSettings:
    """Where the judge is and how it is asked.

    Attributes:
        url: The OpenAI-compatible base URL, e.g. ``http://127.0.0.1:8000/v1``.
        model: The served model's name; ``None``: the first the server lists.
        max_tokens: Tokens the judge may write per answer.
        temperature: Its sampling temperature (0: greedy).
        timeout_s: Seconds one request may take.
        retries: Further tries of a request that failed or timed out.
        max_concurrency: Requests in flight at once.
        cache_size: Answers kept (least recently used dropped first); 0: no cache.
    """

    url: str
    model: str | None = None
    max_tokens: int = 1024
    temperature: float = 0.0
    timeout_s: float = 60.0
    retries: int = 2
    max_concurrency: int = 64
    cache_size: int = 4096


class JudgeClient:
    """Asks the judge for JSON; see the module's docstring.

    Attributes:
        settings: The judge's settings.
        model: The served model asked: ``settings.model``, or the first the server lists (set by :meth:`check`).
        calls: Requests answered by the server. ``cache_hits``: answers served from the cache. ``failures``:
            requests that failed (each retry counted). ``seconds``: time the answered requests took, summed.
    """

    def __init__(self, settings: JudgeSettings) -> None:
        self.settings = settings
        self.model = settings.model
        self.calls = self.cache_hits = self.failures = 0
        self.seconds = 0.0
        self._cache: collections.OrderedDict[str, dict[str, Any]] = collections.OrderedDict()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._client: Any = None
        self._slots: asyncio.Semaphore | None = None

    def check(self) -> str:
        """Checks at start-up that the judge answers and serves ``settings.model``; returns the model's name.

        Raises:
            JudgeUnavailableError: nothing answers at ``settings.url``, or it does not serve the model (one line).
        """
        return self.run(self._check())

    async def _check(self) -> str:
        import openai

        url = self.settings.url
        try:
            served = [model.id for model in (await self._openai().models.list(timeout=10)).data]
        except openai.OpenAIError as error:
            raise JudgeUnavailableError(
                f"the judge at {url} does not answer ({type(error).__name__}); {START_HINT}"
            ) from None
        model = self.settings.model or (served[0] if served else None)
        if model not in served:
            raise JudgeUnavailableError(f"the judge at {url} does not serve model {model!r} (it serves {served})")
        self.model = model
        return model

    def submit(self, coroutine: Coroutine[Any, Any, T]) -> Future[T]:
        """Runs ``coroutine`` (e.g. one of :meth:`ask`) on the judge's loop; its result comes back in the future."""
        if self._loop is None:  # started at the first request: a client that only checked settings starts nothing
            self._loop = asyncio.new_event_loop()
            self._thread = threading.Thread(target=self._loop.run_forever, name="judge", daemon=True)
            self._thread.start()
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop)

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Runs ``coroutine`` on the judge's loop and waits for its result."""
        return self.submit(coroutine).result()

    async def ask(self, prompt: str, pattern: str) -> dict[str, Any]:
        """The judge's JSON answer to ``prompt`` (one user message), its text constrained to match ``pattern``.

        Raises:
            JudgeUnavailableError: every try failed, timed out or gave no JSON object.
        """
        key = hashlib.sha256(json.dumps([self.model, prompt, pattern]).encode()).hexdigest()
        if key in self._cache:
            self.cache_hits += 1
            self._cache.move_to_end(key)
            return self._cache[key]
        answer = await self._ask_with_retries(prompt, pattern)
        if self.settings.cache_size:
            self._cache[key] = answer
            while len(self._cache) > self.settings.cache_size:
                self._cache.popitem(last=False)
        return answer

    async def _ask_with_retries(self, prompt: str, pattern: str) -> dict[str, Any]:
        import openai

        failure = ""
        for attempt in range(self.settings.retries + 1):
            if attempt:
                await asyncio.sleep(min(0.5 * 2 ** (attempt - 1), 4.0))
            start = time.perf_counter()
            try:
                async with self._semaphore():
                    text = await self._complete(prompt, pattern)
                answer = json.loads(text)
                if not isinstance(answer, dict):
                    raise ValueError(f"the judge wrote {type(answer).__name__}, not a JSON object")
            except (openai.OpenAIError, ValueError) as error:
                self.failures += 1
                failure = f"{type(error).__name__}: {one_line(error)}"
                continue
            self.calls += 1
            self.seconds += time.perf_counter() - start
            return answer
        raise JudgeUnavailableError(
            f"the judge at {self.settings.url} failed {self.settings.retries + 1} tries ({failure})"[:300]
        )

    async def _complete(self, prompt: str, pattern: str) -> str:
        response = await self._openai().chat.completions.create(
            model=self.model or "",
            messages=[{"role": "user", "content": prompt}],
            max_tokens=self.settings.max_tokens,
            temperature=self.settings.temperature,
            extra_body={"structured_outputs": {"regex": pattern}},
        )
        return response.choices[0].message.content or ""

    def _openai(self) -> Any:
        """The SDK's async client, made on the judge's loop (no retries of its own: :meth:`ask` retries)."""
        if self._client is None:
            from openai import AsyncOpenAI

            self._client = AsyncOpenAI(
                base_url=self.settings.url, api_key="EMPTY", timeout=self.settings.timeout_s, max_retries=0
            )
        return self._client

    def _semaphore(self) -> asyncio.Semaphore:
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.settings.max_concurrency)
        return self._slots

    def close(self) -> None:
        """Closes the connections and stops the loop's thread."""
        if self._loop is None:
            return
        if self._client is not None:
            self.run(self._client.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        self._loop = self._client = None
