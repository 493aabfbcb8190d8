"""Worlds whose simulator is a jar run in a JVM behind py4j (TextWorldExpress, ScienceWorld).

Each such world (one per env) launches its own JVM the first time a game starts and reuses it for every later
episode; a JVM that died, or hung past ``timeout_s``, is killed and launched again on the next episode, and the
episode it broke ends with an error observation. Envs do not share a JVM because the simulators keep some game
state in static fields: a second TextWorldExpress session playing the same Sorting game in one JVM breaks the
first one's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from abc import abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from agentfly_envs.errors import WorldStartError, WorldUnavailableError
from agentfly_envs.worlds.base import World, WorldCommandError, WorldCrashedError, WorldState

JAVA_HINT = "install a Java runtime, e.g. apt-get install default-jre-headless"
JVM_OPTIONS = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")
"""One GC thread and the quick JIT only: the JVM starts its first game in about half the time (0.6 s instead of
1.0 s on 2 busy cores) and plays as fast over short runs; the simulators are single-threaded."""

T = TypeVar("T")


def require_java(label: str) -> None:
    """Checks that ``java`` is on PATH; raises ``WorldUnavailableError`` saying what to install."""
    if shutil.which("java") is None:
        raise WorldUnavailableError(f"no 'java' on PATH: {label} runs in Java; {JAVA_HINT}")


@dataclass
class JVM:
    """A simulator JVM, the py4j gateway to it, and the game session object in it."""

    gateway: Any  # py4j.java_gateway.JavaGateway
    process: subprocess.Popen
    session: Any  # the simulator's Python-facing interface object, in the JVM
    owner_pid: int  # the Python process that launched it (a forked copy of the world launches its own)

    def alive(self) -> bool:
        return self.owner_pid == os.getpid() and self.process.poll() is None

    def stop(self) -> None:
        """Disconnects (so py4j stops talking to a dead JVM) and kills the JVM if it is ours and runs."""
        self.gateway.close(keep_callback_server=True)
        if self.alive():
            self.process.kill()
            self.process.wait()


class JavaWorld(World):
    """A world whose simulator runs in a JVM of its own.

    Subclasses set ``label`` (the simulator's name in messages) and implement :meth:`_require`,
    :meth:`_classpath`, :meth:`_open_session`, :meth:`_start`, :meth:`_gold_key` and :meth:`_find_gold_path`;
    they reach the simulator through :meth:`_call`, which turns py4j failures into the world errors.

    Args:
        timeout_s: Longest wait for one answer of the simulator, in seconds; a JVM that hangs longer is stopped
            and the episode reports it. py4j sends a command twice before it gives up, so a hung JVM is found
            after about twice this.
    """

    label: str
    _gold_lock: ClassVar[threading.Lock] = threading.Lock()
    _gold_paths: ClassVar[dict[tuple, tuple[str, ...]]] = {}
    """Gold paths by game key, shared by the worlds of a process: some simulators draw a new one on every start
    (TextWorldExpress's Coin and Commonsense), so the first one found is kept and golden episodes repeat."""

    def __init__(self, timeout_s: float = 60.0) -> None:
        self.timeout_s = timeout_s
        self._jvm: JVM | None = None
        self._row: dict[str, Any] = {}
        self._history: list[str] = []  # commands played this episode

    @abstractmethod
    def _require(self) -> None:
        """Checks that the simulator's package and Java are installed (``WorldUnavailableError`` otherwise)."""

    @abstractmethod
    def _classpath(self) -> tuple[str, str]:
        """The simulator's jar and the directory to run it in."""

    @abstractmethod
    def _open_session(self, gateway: Any) -> Any:
        """Creates the simulator's interface object in a freshly launched JVM."""

    @abstractmethod
    def _start(self, session: Any, row: Mapping[str, Any]) -> WorldState:
        """Starts the row's game in ``session`` (py4j errors are handled by :meth:`start`)."""

    @abstractmethod
    def _gold_key(self) -> tuple:
        """What identifies the running game, for the gold-path cache."""

    @abstractmethod
    def _find_gold_path(self, session: Any) -> tuple[str, ...]:
        """The running game's gold path; leaves the game where the episode is (``self._history`` played)."""

    def _forget_session(self) -> None:
        """Drops what the subclass remembers of the JVM's session (called when a JVM is launched or dropped)."""

    def start(self, row: Mapping[str, Any]) -> WorldState:
        from py4j.protocol import Py4JError

        for attempt in range(2):  # a JVM that died since the last episode is launched again, once
            try:
                if self._jvm is None or not self._jvm.alive():
                    self._jvm = self._launch()
                    self._forget_session()
                self._row, self._history = dict(row), []
                return self._start(self._jvm.session, row)
            except Py4JError as e:
                self._drop()
                if attempt:
                    raise WorldCrashedError(f"the {self.label} simulator failed: {first_line(e)}") from None
        raise AssertionError("unreachable")

    def _launch(self) -> JVM:
        self._require()
        from py4j.java_gateway import GatewayParameters, JavaGateway, launch_gateway

        jar, cwd = self._classpath()
        try:
            port, process = launch_gateway(
                classpath=jar, die_on_exit=True, cwd=cwd, javaopts=list(JVM_OPTIONS), return_proc=True
            )
            parameters = GatewayParameters(port=port, auto_field=True, read_timeout=self.timeout_s)
            gateway = JavaGateway(gateway_parameters=parameters, java_process=process)
            session = self._open_session(gateway)
        except Exception as e:  # py4j reports a JVM that fails to start in several ways
            raise WorldStartError(f"the {self.label} JVM did not start: {first_line(e)}") from None
        return JVM(gateway, process, session, os.getpid())

    def _call(self, command: str, call: Callable[[Any], T]) -> T:
        """Runs ``call(session)`` for the agent's ``command``.

        Raises:
            WorldCommandError: the simulator threw on this command and runs on.
            WorldCrashedError: no answer (the JVM died, or hung past the timeout); the JVM is dropped.
        """
        from py4j.protocol import Py4JError, Py4JJavaError

        if self._jvm is None:
            raise WorldCrashedError("no game is running; start one first")
        try:
            return call(self._jvm.session)
        except Py4JJavaError as e:
            raise WorldCommandError(f"the world could not carry out {command[:100]!r}: {first_line(e)}") from None
        except Py4JError as e:
            self._drop()
            raise WorldCrashedError(f"the {self.label} simulator stopped: {first_line(e)}") from None

    def gold_commands(self) -> list[str]:
        """The simulator's gold path for the running game, from its start (cached per game, see above)."""
        if self._jvm is None:
            raise WorldCrashedError("no game is running; start one first")
        key = (self.label, *self._gold_key())
        with self._gold_lock:
            path = self._gold_paths.get(key)
        if path is None:
            from py4j.protocol import Py4JError

            try:
                path = self._find_gold_path(self._jvm.session)
            except Py4JError as e:
                self._drop()
                raise WorldCrashedError(f"the {self.label} simulator stopped: {first_line(e)}") from None
            with self._gold_lock:
                path = self._gold_paths.setdefault(key, path)
        return list(path)

    def _drop(self) -> None:
        """Forgets the JVM, stopping it if it still runs (hung), so that the next start launches a new one."""
        if self._jvm is not None:
            self._jvm.stop()
        self._jvm = None
        self._forget_session()

    def close(self) -> None:
        """Stops the JVM."""
        self._drop()


def py4j_safe(command: str) -> str:
    """``command`` with lone surrogates replaced: py4j cannot send them."""
    return command.encode("utf-8", "replace").decode("utf-8")


def first_line(error: Exception) -> str:
    """The first line of an error's message (py4j's carry Java stack traces)."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
