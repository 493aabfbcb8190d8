"""TextWorldExpress (Jansen and Côté, 2022): fast procedurally generated text games, run in a JVM.

The ``textworld-express`` package ships the simulator as a jar and talks to it through py4j. Each world (one
per env) launches its own JVM the first time a game starts and reuses it for every later episode; a JVM that
died is launched again on the next episode. Sessions do not share a JVM because the simulator keeps some game
state in static fields: a second session playing the same Sorting game in one JVM breaks the first one's.

Games (``game=`` name: what the agent does): ``coin`` (find the coin), ``cookingworld`` (read the recipe,
gather, prepare and eat a meal), ``twc`` (TextWorld Commonsense: put things where they belong in a house),
``mapreader`` (read a map, fetch the coin), ``sorting`` (put objects in a box by quantity), ``arithmetic``
(solve a problem, fetch the item it counts), ``peckingorder`` (follow an instruction book), ``simonsays``.
Each game has 1,000 seeds per split: train 0-999, dev 10,000-10,999, test 20,000-20,999.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentfly_envs.errors import TaskFormatError, WorldUnavailableError
from agentfly_envs.worlds.base import WORLDS, World, WorldCommandError, WorldCrashedError, WorldState

GAMES = ("coin", "cookingworld", "twc", "mapreader", "sorting", "arithmetic", "peckingorder", "simonsays")
"""The simulator's game names."""
SPLIT_SEEDS: dict[str, range] = {"train": range(0, 1000), "dev": range(10_000, 11_000), "test": range(20_000, 21_000)}
"""The seeds of each split (the same for every game and parameter setting)."""
INSTALL_HINT = "pip install 'agentfly-rl[worlds]' (the textworld-express package)"
JAVA_HINT = "TextWorldExpress runs in Java; install a Java runtime, e.g. apt-get install default-jre-headless"
JVM_OPTIONS = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")
"""One GC thread and the quick JIT only: the JVM starts its first game in about half the time (0.6 s instead of
1.0 s on 2 busy cores) and plays as fast over short runs; the simulator is small and single-threaded."""

_GOLD_LOCK = threading.Lock()
_GOLD: dict[tuple[str, str, str, int], tuple[str, ...]] = {}
"""Gold paths by (game, params, split, seed): the simulator draws a new one on every start of some games
(Coin, Commonsense), so the first one found in this process is kept and golden episodes repeat."""


def require_textworld_express() -> None:
    """Checks that the package and a Java runtime are installed.

    Raises:
        WorldUnavailableError: one is missing; the message says what to install.
    """
    try:
        import textworld_express  # noqa: F401
    except ImportError:
        raise WorldUnavailableError(f"TextWorldExpress is not installed: {INSTALL_HINT}") from None
    if shutil.which("java") is None:
        raise WorldUnavailableError(f"no 'java' on PATH: {JAVA_HINT}")


@dataclass
class _JVM:
    """A simulator JVM, the py4j gateway to it, and the game session in it."""

    gateway: Any  # py4j.java_gateway.JavaGateway
    process: subprocess.Popen
    session: Any  # the JVM's textworldexpress.runtime.PythonInterface
    owner_pid: int  # the Python process that launched it (a forked copy of the world launches its own)

    def alive(self) -> bool:
        return self.owner_pid == os.getpid() and self.process.poll() is None

    def stop(self) -> None:
        """Disconnects (so py4j stops talking to a dead JVM) and kills the JVM if it is ours and runs."""
        self.gateway.close(keep_callback_server=True)
        if self.alive():
            self.process.kill()
            self.process.wait()


def _launch(timeout_s: float) -> _JVM:
    require_textworld_express()
    from py4j.java_gateway import GatewayParameters, JavaGateway, launch_gateway
    from textworld_express.constants import BASEPATH, JAR_PATH

    try:
        port, process = launch_gateway(
            classpath=JAR_PATH, die_on_exit=True, cwd=BASEPATH, javaopts=list(JVM_OPTIONS), return_proc=True
        )
        parameters = GatewayParameters(port=port, auto_field=True, read_timeout=timeout_s)
        gateway = JavaGateway(gateway_parameters=parameters, java_process=process)
        session = gateway.jvm.textworldexpress.runtime.PythonInterface()
    except Exception as e:  # py4j reports a JVM that fails to start in several ways
        raise WorldUnavailableError(f"the TextWorldExpress JVM did not start: {_first_line(e)}") from None
    return _JVM(gateway, process, session, os.getpid())


@WORLDS.register("textworld_express")
class TextWorldExpress(World):
    """One TextWorldExpress game session, in a JVM of its own.

    Rows: ``game`` (one of :data:`GAMES`), ``seed`` (an int of the split's seeds), ``split`` (``train``, ``dev``
    or ``test``) and optional ``params``, the simulator's generation parameters (e.g.
    ``"numLocations=5,includeDoors=0"``; see the TextWorldExpress README for each game's).

    Args:
        timeout_s: Longest wait for one answer of the simulator, in seconds; a JVM that hangs longer is
            stopped and the episode reports it. py4j sends a command twice before it gives up, so a hung JVM is
            found after about twice this.
    """

    def __init__(self, timeout_s: float = 60.0) -> None:
        self.timeout_s = timeout_s
        self._jvm: _JVM | None = None
        self._loaded: tuple[str, str] | None = None  # the (game, params) the session generates
        self._row: dict[str, Any] = {}
        self._history: list[str] = []  # commands played this episode
        self._task = ""

    def start(self, row: Mapping[str, Any]) -> WorldState:
        from py4j.protocol import Py4JError

        for attempt in range(2):  # a JVM that died since the last episode is launched again, once
            try:
                return self._start(row)
            except Py4JError as e:
                self._drop()
                if attempt:
                    raise WorldCrashedError(f"the TextWorldExpress simulator failed: {_first_line(e)}") from None
        raise AssertionError("unreachable")

    def _start(self, row: Mapping[str, Any]) -> WorldState:
        if self._jvm is None or not self._jvm.alive():
            self._jvm, self._loaded = _launch(self.timeout_s), None
        session = self._jvm.session
        game, params = str(row["game"]), str(row.get("params") or "")
        if self._loaded != (game, params):
            self._loaded = None
            message = str(session.load(game, params) or "").strip()
            if message:
                raise TaskFormatError(f"TextWorldExpress game {game!r} with params {params!r}: {message}")
            self._loaded = (game, params)
        self._row, self._history = dict(row), []
        response = self._generate()
        self._task = str(session.getTaskDescription())
        return self._state(response)

    def _generate(self) -> dict[str, Any]:
        """Generates the row's game afresh (the same game every time: the world is deterministic)."""
        response = json.loads(self._jvm.session.generateNewGameJSON(int(self._row["seed"]), self._row["split"], True))
        if str(response.get("observation", "")).startswith("ERROR"):
            raise TaskFormatError(f"TextWorldExpress cannot start {self._row}: {response['observation'].strip()}")
        return response

    def step(self, command: str) -> WorldState:
        from py4j.protocol import Py4JError, Py4JJavaError

        if self._jvm is None:
            raise WorldCrashedError("no game is running; start one first")
        command = command.encode("utf-8", "replace").decode("utf-8")  # py4j cannot send lone surrogates
        try:
            response = json.loads(self._jvm.session.stepJSON(command))
        except Py4JJavaError as e:  # the simulator threw on this command and runs on
            raise WorldCommandError(f"the world could not carry out {command[:100]!r}: {_first_line(e)}") from None
        except Py4JError as e:  # no answer: the JVM died, or hung past the timeout
            self._drop()
            raise WorldCrashedError(f"the TextWorldExpress simulator stopped: {_first_line(e)}") from None
        self._history.append(command)
        return self._state(response)

    def task_description(self) -> str:
        return self._task

    def gold_commands(self) -> list[str]:
        """The simulator's gold path, cut where the task is solved (some games' paths go on after it).

        The path is found by playing it from a fresh copy of the game, which is then set back to where the
        episode is (the commands played so far are replayed).
        """
        if self._jvm is None:
            raise WorldCrashedError("no game is running; start one first")
        key = (self._row["game"], str(self._row.get("params") or ""), self._row["split"], int(self._row["seed"]))
        with _GOLD_LOCK:
            path = _GOLD.get(key)
        if path is None:
            from py4j.protocol import Py4JError

            try:
                path = self._find_gold_path()
            except Py4JError as e:
                self._drop()
                raise WorldCrashedError(f"the TextWorldExpress simulator stopped: {_first_line(e)}") from None
            with _GOLD_LOCK:
                path = _GOLD.setdefault(key, path)
        return list(path)

    def _find_gold_path(self) -> tuple[str, ...]:
        session = self._jvm.session
        self._generate()
        path = tuple(str(command) for command in session.getGoldActionSequence())
        for moves, command in enumerate(path, start=1):
            if self._state(json.loads(session.stepJSON(command))).success:
                path = path[:moves]
                break
        self._generate()
        for command in self._history:
            session.stepJSON(command)
        return path

    def _state(self, response: Mapping[str, Any]) -> WorldState:
        score = min(max(float(response.get("score", 0.0)), 0.0), 1.0)
        return WorldState(
            observation=str(response.get("observation", "")).strip(),
            score=score,
            success=bool(response.get("tasksuccess")) or score >= 1.0,
            failure=bool(response.get("taskfailure")),
            moves=len(self._history),
            valid_actions=tuple(str(action) for action in response.get("validActions", ())),
        )

    def _drop(self) -> None:
        """Forgets the JVM, stopping it if it still runs (hung), so that the next start launches a new one."""
        if self._jvm is not None:
            self._jvm.stop()
        self._jvm, self._loaded = None, None

    def close(self) -> None:
        """Stops the JVM."""
        self._drop()


def _first_line(error: Exception) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
