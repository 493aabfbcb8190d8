"""A blocking client of one MCP server, for the tools of one env (:mod:`agentfly_envs.tools.mcp`).

The server is a command line (a stdio server, started as a child process with this process's environment variables
and working directory) or an ``http(s)://`` URL (a
streamable-HTTP server). The `mcp SDK <https://github.com/modelcontextprotocol/python-sdk>`_'s client session lives
on an event loop in a background thread of its own, started at the first request and stopped by :meth:`close`; the
env's thread waits on it with a timeout.

A server that is gone (its process exited, its connection was lost, it answered nonsense or nothing at all) is
restarted once per request; if the restarted one fails too, the request raises :class:`McpServerError`, an
:class:`~agentfly_envs.errors.InfrastructureError` (not the agent's doing). A call that runs past ``timeout_s``, a
call the server refuses (an unknown tool, arguments it rejects) and a tool's own error come back as results for the
tool to show the agent (:class:`McpCallError`).

Needs the ``mcp`` extra (``pip install "agentfly-rl[mcp]"``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import shlex
import threading
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentfly_envs.errors import InfrastructureError, one_line

if TYPE_CHECKING:
    from mcp.client import Client
    from mcp.types import CallToolResult, Tool

GRACE_S = 10.0
"""Extra seconds the env's thread waits on the event loop beyond a request's own timeout (the SDK's shutdown of a
stdio server takes up to about 6 s: stdin closed, then SIGTERM, then SIGKILL)."""
_QUIET = logging.NullHandler()
"""Put on the SDK's logger: where the program configured no logging, a server's unreadable line is not printed with
a traceback (the request's error says what happened, in one line); configured handlers still get the SDK's records."""
MCP_EXTRA = 'MCP tools need the mcp SDK (the "mcp" extra): pip install "agentfly-rl[mcp]"'


class McpServerError(InfrastructureError):
    """The MCP server could not be started or reached, or stopped answering and did not come back after a
    restart."""


class McpCallError(Exception):
    """A call the server answered with an error or did not answer within the timeout (the tool's, or the agent's,
    mistake: shown to the agent)."""


@dataclass(frozen=True)
class McpServerSpec:
    """Where an MCP server is: a URL, or the command line that starts it.

    Attributes:
        url: The streamable-HTTP endpoint (``http(s)://host:port/mcp``), or ``None`` for a stdio server.
        command: The stdio server's command line, split as a shell would (empty for a URL).
    """

    url: str | None
    command: tuple[str, ...]

    @classmethod
    def parse(cls, target: str) -> McpServerSpec:
        """The server ``target`` names: what follows ``mcp:`` in a tool list.

        Raises:
            ValueError: ``target`` is empty or not a command line (an unclosed quote).

        Example:
            >>> McpServerSpec.parse("python server.py --name 'my tools'").command
            ('python', 'server.py', '--name', 'my tools')
            >>> McpServerSpec.parse("http://127.0.0.1:8000/mcp").url
            'http://127.0.0.1:8000/mcp'
        """
        target = target.strip()
        if target.startswith(("http://", "https://")):
            return cls(url=target, command=())
        try:
            command = tuple(shlex.split(target))
        except ValueError as error:
            raise ValueError(f"mcp:{target} is not a command line ({error})") from None
        if not command:
            raise ValueError(
                "mcp: needs a server: a command line (mcp:python my_server.py) or a URL (mcp:http://127.0.0.1:8000/mcp)"
            )
        return cls(url=None, command=command)

    def __str__(self) -> str:
        return self.url or shlex.join(self.command)


def _leaf(error: BaseException) -> BaseException:
    """The first error of an exception group (anyio's task groups wrap what failed), else ``error``."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return error


class McpConnection:
    """A client session with one MCP server, used from any one thread at a time (see the module docstring).

    Args:
        spec: The server.
        timeout_s: Longest wait for one tool call, in seconds.
        startup_timeout_s: Longest wait for the server to start and answer the handshake, in seconds.
    """

    def __init__(self, spec: McpServerSpec, timeout_s: float = 30.0, startup_timeout_s: float = 60.0) -> None:
        if timeout_s <= 0 or startup_timeout_s <= 0:
            raise ValueError(f"timeout_s and startup_timeout_s must be > 0, got {timeout_s} and {startup_timeout_s}")
        self.spec = spec
        self.timeout_s = timeout_s
        self.startup_timeout_s = startup_timeout_s
        self.starts = 0
        """How many times the server was started (a restart adds one)."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._client: Client | None = None
        self._stop: asyncio.Event | None = None
        self._held: concurrent.futures.Future[None] | None = None

    # -- the background loop ----------------------------------------------------------------------------------------

    def _submit(self, coroutine: Coroutine[Any, Any, Any]) -> concurrent.futures.Future[Any]:
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            self._thread = threading.Thread(target=self._loop.run_forever, name=f"mcp {self.spec}", daemon=True)
            self._thread.start()
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop)

    def _transport(self) -> Any:
        """What :class:`mcp.client.Client` connects through: the URL, or a stdio transport starting the command."""
        if self.spec.url is not None:
            return self.spec.url
        from mcp.client.stdio import StdioServerParameters, stdio_client

        command, *args = self.spec.command
        return stdio_client(StdioServerParameters(command=command, args=args, env=dict(os.environ)))

    async def _hold(self, ready: concurrent.futures.Future[tuple[Client, asyncio.Event]]) -> None:
        """Opens the session, hands it to :meth:`_start` through ``ready``, and keeps it open until told to stop
        (the SDK's session must be closed by the task that opened it)."""
        from mcp.client import Client

        try:
            async with Client(self._transport()) as client:
                stop = asyncio.Event()
                ready.set_result((client, stop))
                await stop.wait()
        except BaseException as error:  # the start failed, or the connection broke while held
            if not ready.done():
                ready.set_exception(_leaf(error))
            if isinstance(error, asyncio.CancelledError):
                raise

    def _start(self) -> Client:
        """Starts the server and opens a session.

        Raises:
            McpServerError: the server did not start, or did not answer the handshake within ``startup_timeout_s``.
        """
        logging.getLogger("mcp").addHandler(_QUIET)  # added once: a logger keeps a handler once
        ready: concurrent.futures.Future[tuple[Client, asyncio.Event]] = concurrent.futures.Future()
        self.starts += 1
        self._held = self._submit(self._hold(ready))
        try:
            self._client, self._stop = ready.result(timeout=self.startup_timeout_s)
        except concurrent.futures.TimeoutError:
            self._disconnect()
            raise McpServerError(
                f"the MCP server {self.spec} did not answer MCP's handshake within {self.startup_timeout_s:g} s"
            ) from None
        except Exception as error:  # it exited, could not be started, or answered nonsense
            self._disconnect()
            raise McpServerError(f"the MCP server {self.spec} did not start: {one_line(error)}") from None
        return self._client

    def _disconnect(self) -> None:
        """Closes the session (stopping a stdio server's process), waiting at most :data:`GRACE_S` seconds."""
        held, stop, loop = self._held, self._stop, self._loop
        self._client = self._stop = self._held = None
        if held is None or loop is None:
            return
        if stop is not None and not held.done():
            loop.call_soon_threadsafe(stop.set)
        else:
            held.cancel()
        # it may have failed already, or its shutdown may hang: the loop's thread is a daemon
        with contextlib.suppress(concurrent.futures.CancelledError, concurrent.futures.TimeoutError, Exception):
            held.result(timeout=GRACE_S)

    def _session(self) -> Client:
        """The open session; a new one (a restart) when there is none or the last one ended."""
        if self._client is None or self._held is None or self._held.done():
            self._disconnect()
            return self._start()
        return self._client

    # -- requests ---------------------------------------------------------------------------------------------------

    def _request(self, name: str, send: Any) -> Any:
        """``await send(client)`` on a live session, the server restarted once if the session is lost.

        Raises:
            McpServerError: the server could not be (re)started, or the restarted one was lost too.
            McpCallError: the server answered with an error, or ran past ``timeout_s``.
        """
        try:
            from mcp.shared.exceptions import MCPError
            from mcp.types import CONNECTION_CLOSED, REQUEST_TIMEOUT
        except ImportError:
            raise McpServerError(MCP_EXTRA) from None

        lost: BaseException | None = None
        for _attempt in range(2):
            client = self._session()
            future = self._submit(send(client))
            try:
                return future.result(timeout=self.timeout_s + GRACE_S)
            except concurrent.futures.TimeoutError as error:  # the loop itself is stuck
                future.cancel()
                lost = error
            except MCPError as error:
                if error.code == REQUEST_TIMEOUT:
                    raise McpCallError(f"{name} did not answer within {self.timeout_s:g} s") from None
                if error.code != CONNECTION_CLOSED:
                    raise McpCallError(f"the MCP server refused {name}: {one_line(error)}") from None
                lost = error
            except Exception as error:  # a broken transport, or an answer the SDK cannot read
                lost = _leaf(error)
                if type(lost).__name__ == "ValidationError":  # pydantic's: an answer of the wrong shape
                    lost = RuntimeError(f"it answered {name} with a {lost.title} that MCP does not allow")
            self._disconnect()
        raise McpServerError(
            f"the MCP server {self.spec} stopped answering and did not come back after a restart "
            f"({one_line(lost) if lost else 'no answer'})"
        )

    def list_tools(self) -> list[Tool]:
        """The server's tools (every page of ``tools/list``).

        Raises:
            McpServerError: the server cannot be started or reached.
        """

        async def send(client: Client) -> list[Tool]:
            tools, cursor = [], None
            while True:
                page = await client.list_tools(cursor=cursor)
                tools.extend(page.tools)
                cursor = page.next_cursor
                if not cursor:
                    return tools

        try:
            return self._request("tools/list", send)
        except McpCallError as error:
            raise McpServerError(f"the MCP server {self.spec} did not list its tools: {error}") from None

    def call_tool(self, name: str, arguments: Mapping[str, Any]) -> CallToolResult:
        """``tools/call`` of ``name`` with ``arguments``.

        Raises:
            McpServerError: the server was lost and a restarted one was lost too.
            McpCallError: the server refused the call or ran past ``timeout_s``.
        """

        async def send(client: Client) -> CallToolResult:
            return await client.call_tool(name, dict(arguments), read_timeout_seconds=self.timeout_s)

        return self._request(name, send)

    def close(self) -> None:
        """Closes the session (a stdio server's process ends) and stops the loop's thread; a later request starts
        them again."""
        self._disconnect()
        loop, thread = self._loop, self._thread
        self._loop = self._thread = None
        if loop is not None and thread is not None:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=GRACE_S)
            if not thread.is_alive():
                loop.close()
