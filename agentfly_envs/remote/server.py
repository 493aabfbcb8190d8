"""Serving an agentfly env over HTTP and WebSocket in OpenEnv's protocol (``python -m agentfly_envs serve``).

The server is openenv-core's own (:class:`openenv.core.env_server.http_server.HTTPEnvServer`, on FastAPI and
uvicorn), so OpenEnv's clients (``GenericEnvClient``, TRL's OpenEnv integration) drive it unchanged:

- ``/ws``: one session per WebSocket connection, each with an env of its own: ``{"type": "reset", "data": {...}}``,
  ``{"type": "step", "data": action}``, ``{"type": "state"}``, ``{"type": "close"}``; answers
  ``{"type": "observation", "data": {"observation": {...}, "reward": r, "done": d}}`` or
  ``{"type": "error", "data": {"message": ..., "code": ...}}``;
- ``/reset``, ``/step``, ``/state``: OpenEnv's stateless HTTP calls (a fresh env each, so ``/step`` is always
  refused: a step needs a session's reset);
- ``/health``, ``/schema``, ``/metadata``: OpenEnv's; ``/info``: ours (the env id, its number of tasks, truncation
  reward, and the sessions open), read by the client env ``agentfly/Remote``.

An action is ``{"text": "<the assistant's turn>"}`` or ``{"message": {"content": ..., "tool_calls": [...]}}``. Reset
data: ``seed``, and ``task`` (a row) or ``index`` (a row of the env's own tasks); anything else is refused with an
error naming the known keys. An observation carries ``text`` (the env's observation), ``messages``
(``info["messages"]``), ``tools`` (the tools' schemas, at reset), ``terminated``, ``truncated`` and ``info`` (the
rest of the env's info, JSON-safe); ``done`` is ``terminated or truncated``.

A request the env cannot take (:class:`RequestError`: unknown reset or step data, a task or index the env refuses, a
step outside an episode) is refused with the same message on both transports. Over HTTP every failed request gets
``{"error": "<one line>"}`` and no traceback in the log (:func:`add_error_answers`): 400 for JSON that does not
parse, 422 for a body, action or reset data of the wrong shape, 409 for a step without an episode, 404 and 405 for
an unknown route or method, 500 for a failure of the server or its env (whose traceback goes to the log).

Memory is bounded: at most ``max_sessions`` sessions (one env, one thread and one socket each; default
:data:`DEFAULT_MAX_SESSIONS`). A connection past it is refused (:class:`SessionLimit`): openenv-core's error
``CAPACITY_REACHED`` with :func:`capacity_message` (which names ``--max-sessions``), then a close with code
:data:`TRY_AGAIN_LATER` and the same message as its reason. A session idle for ``session_timeout`` seconds is
closed with its env (openenv-core's reaper checks every ``max(timeout / 4, 5)`` seconds; a later message on its
connection gets an error saying so). WebSocket messages are limited to :data:`MAX_MESSAGE_BYTES`.

Needs the ``openenv`` extra (``pip install "agentfly-rl[openenv]"``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
from gymnasium.error import ResetNeeded
from pydantic import Field, model_validator
from pydantic_core import PydanticCustomError, to_jsonable_python

from agentfly_envs.contract import truncation_reward
from agentfly_envs.errors import EpisodeFinishedError
from agentfly_envs.remote.capacity import CAPACITY_REACHED, DEFAULT_MAX_SESSIONS, TRY_AGAIN_LATER

try:
    from fastapi.exceptions import RequestValidationError
    from openenv.core.env_server.http_server import HTTPEnvServer
    from openenv.core.env_server.interfaces import Environment
    from openenv.core.env_server.types import Action, ConcurrencyConfig, EnvironmentMetadata, Observation, State
    from starlette.exceptions import HTTPException
    from starlette.requests import Request
    from starlette.responses import JSONResponse
except ImportError as error:  # the extra is missing
    raise ImportError(
        'serving an env needs openenv-core (the "openenv" extra): pip install "agentfly-rl[openenv]"'
    ) from error

MAX_MESSAGE_BYTES = 4 * 1024 * 1024
"""Largest WebSocket message the server reads (an action, or a reset with a task row)."""
RESET_KEYS = ("seed", "episode_id", "task", "index")
"""The reset data a served env takes."""
STEP_KEYS = ("action", "timeout_s", "request_id")
"""The step data a served env takes (over HTTP; a ``/ws`` step message's data is the action)."""
NO_EPISODE = (
    "no episode to step: reset first in the same session, on a /ws connection (HTTP /reset and /step each run on a "
    "fresh env, so an HTTP /step has none)"
)


class RequestError(ValueError):
    """A request the served env cannot take: the caller's mistake, not the server's.

    Over HTTP it is answered with ``status`` and ``{"error": message}``; over ``/ws`` with an error message (code
    ``EXECUTION_ERROR``, openenv-core's for any refusal after the message's validation).
    """

    def __init__(self, message: str, status: int = 422) -> None:
        super().__init__(message)
        self.status = status


class AgentflyAction(Action):
    """One assistant turn: its text, or an OpenAI-style assistant message (exactly one of the two)."""

    text: str | None = None
    message: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _one_of(self) -> AgentflyAction:
        if (self.text is None) == (self.message is None):  # a custom error: a ValueError's context is not JSON
            raise PydanticCustomError(
                "action_form", 'an action is {"text": "..."} or {"message": {"content": ..., "tool_calls": [...]}}'
            )
        return self


class AgentflyObservation(Observation):
    """What a reset or step returns (``done`` and ``reward`` are OpenEnv's fields)."""

    text: str = ""
    messages: list[dict[str, Any]] = Field(default_factory=list)
    tools: list[dict[str, Any]] | None = None
    terminated: bool = False
    truncated: bool = False
    info: dict[str, Any] = Field(default_factory=dict)


def json_safe(value: Any) -> Any:
    """``value`` as plain JSON types (anything else becomes its ``str``; keys become strings), in one pass."""
    return to_jsonable_python(value, fallback=str)


class ServedEnv(Environment[AgentflyAction, AgentflyObservation, State]):
    """One session's env: a Gymnasium env made with ``gymnasium.make(env_id, **env_kwargs)``, behind OpenEnv's
    ``Environment`` interface."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, env_id: str, env_kwargs: Mapping[str, Any]) -> None:
        super().__init__()
        self.env_id = env_id
        self.env: gym.Env | None = gym.make(env_id, disable_env_checker=True, **env_kwargs)
        self._state = State()

    def _live(self) -> gym.Env:
        """The session's env.

        Raises:
            RuntimeError: the session was closed (it stayed idle past the server's session timeout).
        """
        if self.env is None:
            raise RuntimeError(
                "this session was closed after staying idle past the server's session timeout; open a new connection"
            )
        return self.env

    def reset(self, seed: int | None = None, episode_id: str | None = None, **options: Any) -> AgentflyObservation:
        """Starts an episode: ``task=row``, ``index=i``, or neither (a task drawn with ``seed``).

        Raises:
            RequestError: unknown reset data (naming the known keys), or a task or index the env refuses.
        """
        unknown = sorted(set(options) - set(RESET_KEYS))
        if unknown:
            raise RequestError(f"unknown reset data {unknown}; a served agentfly env takes {list(RESET_KEYS)}")
        try:
            text, info = self._live().reset(seed=seed, options=options or None)
        except (ValueError, IndexError) as error:  # ToolEnv's refusals of the options (TaskFormatError is a ValueError)
            raise RequestError(str(error)) from error
        self._state = State(episode_id=episode_id, step_count=0)
        tools = info.pop("tools", None)
        messages = info.pop("messages", [])
        return AgentflyObservation(text=text, messages=json_safe(messages), tools=tools, info=json_safe(info))

    def step(self, action: AgentflyAction, timeout_s: float | None = None, **kwargs: Any) -> AgentflyObservation:
        """Plays one assistant turn (agent mistakes come back as ``Error:`` observations, as locally).

        Raises:
            RequestError: unknown step data (422), or no episode to step: none was reset, or it ended (409).
        """
        unknown = sorted(set(kwargs) - set(STEP_KEYS))
        if unknown:
            raise RequestError(f"unknown step data {unknown}; a step takes {list(STEP_KEYS)}")
        turn = action.text if action.text is not None else action.message
        try:
            text, reward, terminated, truncated, info = self._live().step(turn)
        except ResetNeeded:
            raise RequestError(NO_EPISODE, status=409) from None
        except EpisodeFinishedError as error:
            raise RequestError(str(error), status=409) from error
        self._state.step_count += 1
        messages = info.pop("messages", [])
        return AgentflyObservation(
            text=text,
            messages=json_safe(messages),
            terminated=bool(terminated),
            truncated=bool(truncated),
            done=bool(terminated or truncated),
            reward=float(reward),
            info=json_safe(info),
        )

    @property
    def state(self) -> State:
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(name=self.env_id, description=f"agentfly env {self.env_id}, served by agentfly")

    def close(self) -> None:
        """Closes the env and lets it go (a timed-out session's connection may outlive it)."""
        if self.env is not None:
            self.env.close()
            self.env = None


def error_answer(status: int, message: str) -> JSONResponse:
    """The HTTP answer ``{"error": message}`` with ``status``, the message's whitespace (newlines too) made single
    spaces."""
    return JSONResponse({"error": " ".join(message.split())}, status_code=status)


def describe_errors(errors: Sequence[Mapping[str, Any]]) -> str:
    """Pydantic's validation errors as ``Invalid request: field: problem; ...`` (the field's path without FastAPI's
    ``body``; a whole-object error has no field)."""
    problems = []
    for error in errors:
        field = ".".join(str(part) for part in error.get("loc", ()) if part != "body")
        problems.append(f"{field}: {error['msg']}" if field else str(error["msg"]))
    return "Invalid request: " + "; ".join(problems)


async def _invalid_body(request: Request, error: RequestValidationError) -> JSONResponse:
    """A body FastAPI could not read as the route's request: 400 when it is not JSON, else 422."""
    errors = error.errors()
    unparsed = [problem for problem in errors if problem["type"] == "json_invalid"]
    if unparsed:
        return error_answer(400, f"Invalid JSON: {unparsed[0].get('ctx', {}).get('error', 'cannot parse the body')}")
    return error_answer(422, describe_errors(errors))


async def _http_error(request: Request, error: HTTPException) -> JSONResponse:
    """An HTTP error raised by the framework or openenv-core (404, 405, an invalid action's 422 with its errors)."""
    message = describe_errors(error.detail) if isinstance(error.detail, list) else str(error.detail)
    return error_answer(error.status_code, message)


async def _refused(request: Request, error: RequestError) -> JSONResponse:
    """A :class:`RequestError` of the served env."""
    return error_answer(error.status, str(error))


async def _server_failure(request: Request, error: Exception) -> JSONResponse:
    """Anything else: a failure of the server or its env (Starlette re-raises it, and uvicorn logs its traceback)."""
    return error_answer(500, f"server error: {type(error).__name__}: {error}")


def add_error_answers(app: Any) -> None:
    """Makes every failed HTTP request of ``app`` (a FastAPI app) answer ``{"error": "<one line>"}`` with a 4xx
    status (the caller's mistake, not logged) or 500 (the server's, logged with its traceback)."""
    app.add_exception_handler(RequestValidationError, _invalid_body)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(RequestError, _refused)
    app.add_exception_handler(Exception, _server_failure)


class QuietDisconnects:
    """ASGI middleware: a WebSocket client that leaves while its session is being closed is not an error
    (openenv-core's handler closes the socket once more after the client has gone)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        from starlette.websockets import WebSocketDisconnect
        from uvicorn.protocols.utils import ClientDisconnected

        try:
            await self.app(scope, receive, send)
        except (WebSocketDisconnect, ClientDisconnected):
            if scope["type"] != "websocket":
                raise


def capacity_message(max_sessions: int) -> str:
    """The refusal of a session past ``max_sessions`` (at most 123 bytes: it is also a WebSocket close reason)."""
    return f"all {max_sessions} sessions of this server are open (serve --max-sessions): close one or try again later"


class SessionLimit:
    """ASGI middleware: a WebSocket connection that openenv-core refuses because all ``max_sessions`` sessions are
    open gets its error answer (code ``CAPACITY_REACHED``) with :func:`capacity_message` as the message, then a
    close with code :data:`TRY_AGAIN_LATER` and the same message as reason (a client whose first message crossed
    the refusal reads it there)."""

    def __init__(self, app: Any, max_sessions: int) -> None:
        self.app = app
        self.message = capacity_message(max_sessions)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "websocket":
            await self.app(scope, receive, send)
            return
        first, refused = True, False

        async def send_refusal_clearly(message: dict[str, Any]) -> None:
            nonlocal first, refused
            if first and message["type"] == "websocket.send":  # openenv-core refuses in the first message only
                first = False
                text = message.get("text") or ""
                if text.startswith('{"type":"error"') and f'"code":"{CAPACITY_REACHED}"' in text:
                    refused = True
                    answer = json.loads(text)
                    answer["data"]["message"] = self.message
                    message = {**message, "text": json.dumps(answer)}
            elif refused and message["type"] == "websocket.close":
                message = {**message, "code": TRY_AGAIN_LATER, "reason": self.message}
            await send(message)

        await self.app(scope, receive, send_refusal_clearly)


def create_app(
    env_id: str,
    env_kwargs: Mapping[str, Any] | None = None,
    max_sessions: int = DEFAULT_MAX_SESSIONS,
    session_timeout: float = 600.0,
) -> Any:
    """The FastAPI app serving ``env_id`` (see the module docstring).

    Args:
        env_id: A registered id.
        env_kwargs: ``gymnasium.make`` keyword arguments of every session's env.
        max_sessions: Sessions (envs) open at once.
        session_timeout: Seconds a session may stay idle before it is closed.

    Raises:
        AgentflyError, TypeError, ValueError: the env cannot be built (checked once, here).
    """
    from fastapi import FastAPI

    kwargs = dict(env_kwargs or {})
    probe = ServedEnv(env_id, kwargs)  # a bad id or kwarg fails now, not at the first session
    description = {
        "env_id": env_id,
        "num_tasks": len(probe._live().unwrapped.tasks),
        "truncation_reward": truncation_reward(probe._live()),
        "parser": getattr(getattr(probe._live().unwrapped, "parser", None), "name", None),
    }
    probe.close()

    def factory() -> ServedEnv:
        return ServedEnv(env_id, kwargs)

    factory.__name__ = f"ServedEnv({env_id})"
    server = HTTPEnvServer(
        factory,
        AgentflyAction,
        AgentflyObservation,
        concurrency_config=ConcurrencyConfig(max_concurrent_envs=max_sessions, session_timeout=session_timeout),
    )
    app = FastAPI(title=f"agentfly: {env_id}")
    server.register_routes(app)
    add_error_answers(app)
    app.add_middleware(SessionLimit, max_sessions=max_sessions)
    app.add_middleware(QuietDisconnects)

    @app.get("/info")
    def info() -> dict[str, Any]:
        """The env served, and the sessions open."""
        return {**description, "sessions": server.active_sessions, "max_sessions": max_sessions}

    return app


class ServerThread:
    """Serves an app on a free local port from a thread of this process (tests, benchmarks, notebooks)::

        with ServerThread(create_app("agentfly/Arith-Calc")) as url:
            env = gymnasium.make("agentfly/Remote", url=url)

    ``stop()`` (or leaving the ``with`` block) shuts the server down, closing its sessions.
    """

    def __init__(self, app: Any, host: str = "127.0.0.1") -> None:
        import socket
        import threading

        import uvicorn

        with socket.socket() as probe:
            probe.bind((host, 0))
            port = probe.getsockname()[1]
        self.url = f"http://{host}:{port}"
        config = uvicorn.Config(app, host=host, port=port, ws_max_size=MAX_MESSAGE_BYTES, log_level="warning")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="agentfly-serve", daemon=True)

    def start(self, timeout: float = 60.0) -> str:
        """Starts serving; returns the URL.

        Raises:
            RuntimeError: the server did not start within ``timeout`` seconds.
        """
        import time

        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the env server did not start on {self.url}")
            time.sleep(0.02)
        return self.url

    def stop(self) -> None:
        """Shuts the server down and waits for its thread."""
        self._server.should_exit = True
        self._thread.join()

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
