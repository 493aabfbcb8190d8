"""``agentfly/Remote``: a Gymnasium env played on a server that speaks OpenEnv's protocol.

``gymnasium.make("agentfly/Remote", url="http://127.0.0.1:8000")`` opens a WebSocket session (``/ws``) on the
server at its first reset and plays episodes there; each env instance is one session. Two kinds of server:

- an agentfly env served by ``python -m agentfly_envs serve`` (:mod:`agentfly_envs.remote.server`; it answers
  ``/info``): the env behaves as the served one (observations, ``info["messages"]``, ``info["tools"]``, rewards
  and their components); its tasks are ``{"index": i}`` rows of the served env's own, and any other row is sent
  as the task;
- any other OpenEnv server (e.g. OpenEnv's ``echo_env``): the assistant's text goes into the action's one string
  field (``action_field``, read from ``/schema`` when not given), the observation's fields (one string field: its
  text; else their JSON) come back as a ``user`` message, the server's reward and ``done`` are the env's; tasks are
  ``{"seed": i}`` rows (``num_tasks`` of them), sent as reset data. The episode is truncated after ``max_turns``
  turns with ``truncation_reward``.

A server that stops answering (a dead process, a closed connection, a step past ``timeout`` seconds), or refuses a
turn, ends the episode with an ``Error:`` observation (truncated, ``info["remote_failure"]``: ``server_lost`` or
``refused``, and ``info["infra_failure"]``), as a lost Ray actor does; the next reset opens a new session. An
infrastructure failure of the served env itself comes through in its step's ``info["infra_failure"]``. A server
whose sessions are all taken refuses a new one: the reset raises :class:`~agentfly_envs.runtime.RemoteEnvError`
with its message at once (close a session, or serve with a larger ``--max-sessions``). A reset that fails twice
raises :class:`~agentfly_envs.runtime.RemoteEnvError` with the server's message. A pool's ``check_health()`` pings
the server's ``/health`` (:attr:`HTTPEnv.health_url`) between batches and counts it in ``servers_down`` when it does
not answer: the server is the user's to restart.

Needs ``websockets`` (in the ``openenv`` extra).
"""

from __future__ import annotations

import contextlib
import json
import socket
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any, ClassVar, SupportsFloat

import gymnasium as gym
from gymnasium.error import ResetNeeded

from agentfly_envs.errors import AgentflyError, EpisodeFinishedError
from agentfly_envs.parsers import Action, get_parser
from agentfly_envs.remote.capacity import CAPACITY_REACHED, TRY_AGAIN_LATER
from agentfly_envs.runtime.failures import WorkerLost, lost_episode
from agentfly_envs.runtime.remote import RemoteEnvError
from agentfly_envs.spaces import TextSpace

MAX_MESSAGE_BYTES = 64 * 1024 * 1024
"""Largest message the client reads (OpenEnv's observations may hold screenshots)."""
OPENENV_FIELDS = ("done", "reward", "metadata")
"""Observation fields of every OpenEnv env, not part of its text."""
RESET_ARGUMENTS = frozenset({"index", "seed"})
"""Row keys sent to an agentfly server as reset arguments rather than as the task row."""


class IndexedRows:
    """The tasks of a remote env: ``{key: i}`` rows for ``i`` in ``range(count)`` (``index`` or ``seed``)."""

    required_fields: tuple[str, ...] = ()

    def __init__(self, key: str, count: int) -> None:
        self.key = key
        self.count = count

    def __len__(self) -> int:
        return self.count

    def row(self, index: int) -> dict[str, Any]:
        """Row ``index``."""
        return {self.key: index}

    def validate(self, row: Mapping[str, Any]) -> None:
        """Any row is a task: the server checks it at reset."""

    def golden(self, row: Mapping[str, Any]) -> None:
        """No task has a golden solution here (they are not part of the protocol)."""
        return None


class HTTPEnv(gym.Env[str, Action]):
    """An env on a server speaking OpenEnv's protocol (see the module docstring).

    Args:
        url: The server (``http(s)://host:port`` or ``ws(s)://...``).
        max_turns: Assistant turns per episode before it is truncated here (the served env may end it sooner).
        truncation_reward: Reward of an episode truncated here (default: the served env's, else 0).
        parser: The format the turns are in: a served agentfly env parses them itself, so it must be the one it
            was started with (checked; ``None``: any), and ``self.parser`` is that format's. Another OpenEnv server
            receives the text as it is (``self.parser``: this format's, default ``tool_calls``).
        num_tasks: Tasks (``{"seed": i}`` rows) of a server that is not an agentfly one.
        action_field: The action's field the text goes into, on a server that is not an agentfly one (default:
            the action schema's only string field).
        timeout: Seconds a reset or step may take (opening the session at the first reset included).
        connect_timeout: Seconds to reach the server (its description, and each session's connection).

    Attributes:
        health_url: The server's ``/health``, which a pool's ``check_health()`` pings
            (:func:`~agentfly_envs.runtime.failures.servers_down`).

    Raises:
        RemoteEnvError: the server cannot be reached, or its action schema has no place for text.
        ValueError: ``parser`` is not the served env's.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}
    reward_fn: ClassVar[None] = None
    """The server scores the episodes (the env contract's ``reward_fn``)."""

    def __init__(
        self,
        url: str,
        max_turns: int = 8,
        truncation_reward: float | None = None,
        parser: str | None = None,
        num_tasks: int = 1024,
        action_field: str | None = None,
        timeout: float = 300.0,
        connect_timeout: float = 10.0,
    ) -> None:
        try:
            from websockets.sync.client import connect
        except ImportError as error:
            raise ImportError('agentfly/Remote needs websockets: pip install "agentfly-rl[openenv]"') from error
        self._connect = connect
        self.url = url.rstrip("/")
        self.http_url = self.url.replace("ws://", "http://", 1).replace("wss://", "https://", 1)
        self.health_url = self.http_url + "/health"
        self.max_turns = max_turns
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        described = self._get("/info")
        self.agentfly = described is not None
        if described is not None:
            served = described.get("parser")
            if parser is not None and served is not None and parser != served:
                raise ValueError(
                    f"the env at {self.url} parses {served!r} turns, not {parser!r}: use its format "
                    f'(agent.agent_type), or serve it with --env-kwargs \'{{"parser": "{parser}"}}\''
                )
            self.parser = get_parser(served or parser or "hermes")
            self.tasks = IndexedRows("index", int(described["num_tasks"]))
            served_reward = float(described.get("truncation_reward", 0.0))
            self.action_field = None
        else:
            self.parser = get_parser(parser or "tool_calls")  # the text (or a message's content) is sent as is
            self.tasks = IndexedRows("seed", num_tasks)
            served_reward = 0.0
            self.action_field = action_field or self._text_field()
        self.truncation_reward = served_reward if truncation_reward is None else float(truncation_reward)
        self.observation_space = TextSpace(1 << 20)
        self.action_space = TextSpace(1 << 20)
        self._ws: Any = None
        self._session = contextlib.ExitStack()  # holds the open WebSocket connection
        self._turns = 0
        self._done = True
        self._error_counts: dict[str, int] = {}

    # --- the server's description ---

    def _get(self, path: str) -> dict[str, Any] | None:
        """``GET path`` as JSON; ``None`` when the server has no such route (404)."""
        try:
            with urllib.request.urlopen(self.http_url + path, timeout=self.connect_timeout) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return None
            raise RemoteEnvError(f"the env server at {self.url} answered {path} with HTTP {error.code}") from None
        except (OSError, ValueError) as error:
            raise RemoteEnvError(
                f"cannot reach an env server at {self.url} ({error}): is it running? (start one with "
                "`python -m agentfly_envs serve ENV_ID --port PORT`)"
            ) from None

    def _text_field(self) -> str:
        schema = (self._get("/schema") or {}).get("action", {})
        fields = [
            name
            for name, spec in schema.get("properties", {}).items()
            if name != "metadata" and spec.get("type") == "string"
        ]
        if len(fields) != 1:
            raise RemoteEnvError(
                f"the env at {self.url} takes actions with string fields {fields}: pass action_field= (in "
                "agent.env_kwargs) to say which one gets the assistant's text"
            )
        return fields[0]

    # --- the session ---

    def _exchange(self, message: dict[str, Any]) -> dict[str, Any]:
        """Sends ``message`` on the session and returns the server's answer (a connection closed with code
        :data:`TRY_AGAIN_LATER`, the server's refusal of a session past its limit, answers an error
        ``CAPACITY_REACHED`` with the close's reason).

        Raises:
            WorkerLost: the server cannot be reached, closed the connection or did not answer in time.
        """
        from websockets.exceptions import ConnectionClosed, WebSocketException

        try:
            if self._ws is None:
                self._ws = self._session.enter_context(self._open())
            self._ws.send(json.dumps(message))
            return json.loads(self._ws.recv(timeout=self.timeout))
        except ConnectionClosed as error:
            self._drop()
            if error.rcvd is not None and error.rcvd.code == TRY_AGAIN_LATER:  # refused: every session is taken
                return {"type": "error", "data": {"message": error.rcvd.reason, "code": CAPACITY_REACHED}}
            raise WorkerLost("server_lost") from error
        except (OSError, TimeoutError, WebSocketException, ValueError) as error:
            self._drop()
            kind = "timeout" if isinstance(error, TimeoutError) else "server_lost"
            raise WorkerLost(kind) from error

    def _open(self) -> Any:
        """A new WebSocket session: the TCP connection within ``connect_timeout``, the opening handshake within
        ``timeout`` (the server answers it on its event loop after the work queued there, which takes long while
        hundreds of sessions open at once). The connection is direct (no ``HTTPS_PROXY``). Messages are not
        compressed: on loopback or a LAN permessage-deflate costs both ends more CPU per step than it saves."""
        ws_url = self.url.replace("http://", "ws://", 1).replace("https://", "wss://", 1) + "/ws"
        where = urllib.parse.urlsplit(ws_url)
        sock = socket.create_connection(
            (where.hostname, where.port or (443 if where.scheme == "wss" else 80)), timeout=self.connect_timeout
        )
        sock.settimeout(None)
        return self._connect(ws_url, sock=sock, open_timeout=self.timeout, max_size=MAX_MESSAGE_BYTES, compression=None)

    def _drop(self) -> None:
        self._session.close()
        self._ws = None

    def reset(self, *, seed: int | None = None, options: Mapping[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Starts an episode on the server: ``options={"task": row}`` or ``{"index": i}`` (a row of :attr:`tasks`).

        Raises:
            RemoteEnvError: the server refused the reset (with its message) or cannot be reached, twice.
        """
        super().reset(seed=seed)
        options = dict(options or {})
        if set(options) - {"task", "index"} or len(options) > 1:
            raise ValueError(f"reset options must be {{'task': row}} or {{'index': i}}, got keys {sorted(options)}")
        row = dict(options["task"]) if "task" in options else self.tasks.row(options.get("index", 0))
        data = dict(row) if not self.agentfly or set(row) <= RESET_ARGUMENTS else {"task": row}
        if seed is not None:
            data.setdefault("seed", seed)
        problem = ""
        for _ in range(2):
            try:
                answer = self._exchange({"type": "reset", "data": data})
            except WorkerLost as lost:
                problem = f"the server stopped answering ({lost.kind})"
                continue
            if answer.get("type") == "error" and answer["data"].get("code") == CAPACITY_REACHED:
                self._drop()  # the server closed this connection: the next reset opens another
                raise RemoteEnvError(f"the env server at {self.url} has no room for a session: {_message(answer)}")
            if answer.get("type") == "error":
                raise RemoteEnvError(f"the env server at {self.url} refused the reset: {_message(answer)}")
            self._turns, self._done, self._error_counts = 0, False, {}
            return self._opening(answer["data"], row)
        raise RemoteEnvError(f"cannot reset the env at {self.url}: {problem}")

    def _opening(self, data: dict[str, Any], row: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        observation = data["observation"]
        if self.agentfly:
            info = {**observation["info"], "messages": observation["messages"], "tools": observation["tools"] or []}
            return observation["text"], info
        text = _observation_text(observation)
        return text, {"messages": [{"role": "user", "content": text}], "tools": [], "task": row, "task_index": None}

    def step(self, action: Action) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
        """Plays one turn on the server; a server lost or refusing it ends the episode with an ``Error:`` observation.

        Raises:
            ResetNeeded: no episode was started (or it was lost with its server).
            EpisodeFinishedError: the episode has ended.
        """
        if self._ws is None:
            raise ResetNeeded("call reset() before step() (this env has no session on its server)")
        if self._done:
            raise EpisodeFinishedError("the episode has ended (terminated or truncated); call reset() to start another")
        if self.agentfly:
            payload = {"text": action} if isinstance(action, str) else {"message": dict(action)}
        else:
            payload = {self.action_field: action if isinstance(action, str) else action.get("content") or ""}
        self._turns += 1
        try:
            answer = self._exchange({"type": "step", "data": payload})
        except WorkerLost as lost:
            self._done = True
            return lost_episode(lost, self.timeout, self._error_counts, self.truncation_reward)
        if answer.get("type") == "error":
            self._done = True
            lost = WorkerLost("refused", detail=_message(answer))
            return lost_episode(lost, self.timeout, self._error_counts, self.truncation_reward)
        return self._result(answer["data"])

    def _result(self, data: dict[str, Any]) -> tuple[str, float, bool, bool, dict[str, Any]]:
        observation = data["observation"]
        reward = float(data.get("reward") or 0.0)
        if self.agentfly:
            terminated, truncated = bool(observation["terminated"]), bool(observation["truncated"])
            info = {**observation["info"], "messages": observation["messages"]}
            text = observation["text"]
            self._error_counts = dict(info.get("error_counts", {}))
        else:
            terminated, truncated = bool(data.get("done")), False
            text = _observation_text(observation)
            info = {"messages": [{"role": "user", "content": text}], "tool_calls": [], "parse_errors": []}
            info.update(error_counts={}, answer=None, reward_components={}, turn=self._turns)
        if not (terminated or truncated) and self._turns >= self.max_turns:
            truncated, reward = True, self.truncation_reward
        self._done = terminated or truncated
        return text, reward, terminated, truncated, info

    def golden_actions(self, row: Mapping[str, Any] | None = None) -> list[Action]:
        """Raises: the server's solutions are not part of its protocol (a warm start needs ``sft.enable=false``).

        Raises:
            AgentflyError: always.
        """
        raise AgentflyError(f"the env at {self.url} does not share golden solutions over its protocol")

    def answer_action(self, answer: str, final: str | None = None) -> Action:
        """Raises: the server's answer format is not part of its protocol (and its tasks have no golden answers to
        guess from).

        Raises:
            AgentflyError: always.
        """
        raise AgentflyError(f"the env at {self.url} does not share its answer format over its protocol")

    def close(self) -> None:
        """Closes the session (the server closes its env)."""
        if self._ws is not None:
            from websockets.exceptions import WebSocketException

            with contextlib.suppress(OSError, WebSocketException):  # the server dropped the session already
                self._ws.send(json.dumps({"type": "close"}))
            self._drop()


def _message(answer: Mapping[str, Any]) -> str:
    """The one-line message of an error answer (with the first validation error's, when it has some)."""
    data = answer.get("data", {})
    errors = data.get("errors") or []
    detail = f": {errors[0].get('msg')}" if errors and isinstance(errors[0], Mapping) else ""
    return f"{data.get('message', 'no message')}{detail} ({data.get('code', 'no code')})"


def _observation_text(observation: Mapping[str, Any]) -> str:
    """An OpenEnv observation's text: its one string field, else its fields as JSON."""
    fields = {key: value for key, value in observation.items() if key not in OPENENV_FIELDS}
    if len(fields) == 1 and isinstance(next(iter(fields.values())), str):
        return next(iter(fields.values()))
    return json.dumps(fields, default=str)
