"""The run's ``/v1/chat/completions`` on localhost: an aiohttp server in a thread of its own that hands each request
to the rollout thread and sends back its answer.

Each episode has its own base URL, ``http://127.0.0.1:<port>/<key>/v1``: the ``openai`` SDK and the frameworks built
on it append ``/chat/completions``, so every request names its episode. The rollout thread (:mod:`.runner`) takes
the requests from :attr:`CompletionsServer.requests` and answers each through its future; a request for an episode
that is not running is answered at once (HTTP 404), so a program left behind by its episode cannot wait forever.
"""

from __future__ import annotations

import asyncio
import queue
import secrets
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from agentfly_train.programs.wire import error_body

Answer = tuple[int, dict[str, Any]]
"""An HTTP status and its JSON body."""


@dataclass(frozen=True)
class Endpoint:
    """What an agent program is handed: what the ``openai`` SDK (and every framework built on it) takes.

    Attributes:
        base_url: The episode's own base URL (``.../<key>/v1``).
        api_key: The run's key (requests without it are refused).
        model: The policy's name (any name is served the policy).
    """

    base_url: str
    api_key: str
    model: str


@dataclass(frozen=True)
class Request:
    """A request waiting for the rollout thread.

    Attributes:
        key: The episode it names.
        body: Its decoded JSON body (not yet checked).
        answer: Set by the rollout thread to the :data:`Answer`.
    """

    key: str
    body: Any
    answer: Future[Answer]


class CompletionsServer:
    """The server, started at construction and stopped by :meth:`close`.

    Attributes:
        requests: Requests for running episodes, in arrival order (the rollout thread takes them).
        live: Keys of the running episodes (the rollout thread sets them).
    """

    def __init__(self) -> None:
        self.requests: queue.Queue[Request | None] = queue.Queue()
        self._arrival: Future[None] | None = None
        self._arrival_lock = threading.Lock()
        self.live: set[str] = set()
        self.api_key = f"agentfly-{secrets.token_hex(8)}"
        self._loop = asyncio.new_event_loop()
        self._started: Future[int] = Future()
        self._thread = threading.Thread(target=self._serve, name="agentfly-completions", daemon=True)
        self._thread.start()
        self.port = self._started.result(timeout=60)

    def endpoint(self, key: str, model: str) -> Endpoint:
        """The :class:`Endpoint` of episode ``key``."""
        return Endpoint(f"http://127.0.0.1:{self.port}/{key}/v1", self.api_key, model)

    def hand_over(self, request: Request | None) -> None:
        """Queues ``request`` for the rollout thread (``None``: a program ended, which wakes it too) and completes the
        future :meth:`arrival` handed out."""
        self.requests.put(request)
        with self._arrival_lock:
            arrival, self._arrival = self._arrival, None
        if arrival is not None:
            arrival.set_result(None)

    def arrival(self) -> Future[None]:
        """A future completed when something is queued (already completed if something waits)."""
        with self._arrival_lock:
            if not self.requests.empty():
                done: Future[None] = Future()
                done.set_result(None)
                return done
            if self._arrival is None:
                self._arrival = Future()
            return self._arrival

    def _serve(self) -> None:
        from aiohttp import web

        asyncio.set_event_loop(self._loop)
        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_post("/{key}/v1/chat/completions", self._completion)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        try:
            self._loop.run_until_complete(runner.setup())
            site = web.TCPSite(runner, "127.0.0.1", 0)
            self._loop.run_until_complete(site.start())
        except OSError as error:
            self._started.set_exception(error)
            return
        self._started.set_result(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
        self._loop.run_forever()
        self._loop.run_until_complete(runner.cleanup())
        self._loop.close()

    async def _completion(self, request: Any) -> Any:
        from aiohttp import web

        key = request.match_info["key"]
        if request.headers.get("Authorization") != f"Bearer {self.api_key}":
            refused = error_body("wrong api_key: use the endpoint's", "authentication_error")
            return web.json_response(refused, status=401)
        if key not in self.live:
            return web.json_response(error_body(f"episode {key} is not running", "not_found_error"), status=404)
        try:
            body = await request.json()
        except ValueError:
            return web.json_response(error_body("the body is not JSON"), status=400)
        answer: Future[Answer] = Future()
        self.hand_over(Request(key, body, answer))
        status, payload = await asyncio.wrap_future(answer)
        return web.json_response(payload, status=status)

    def close(self) -> None:
        """Stops the server (requests still open are answered first by whoever holds them)."""
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
