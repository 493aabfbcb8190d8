"""TextWorldExpress (Jansen and Côté, 2022): fast procedurally generated text games, run in a JVM.

The ``textworld-express`` package ships the simulator as a jar and talks to it through py4j; each world (one
per env) runs it in a JVM of its own (see :mod:`agentfly_envs.worlds.jvm`).

Games (``game=`` name: what the agent does): ``coin`` (find the coin), ``cookingworld`` (read the recipe,
gather, prepare and eat a meal), ``twc`` (TextWorld Commonsense: put things where they belong in a house),
``mapreader`` (read a map, fetch the coin), ``sorting`` (put objects in a box by quantity), ``arithmetic``
(solve a problem, fetch the item it counts), ``peckingorder`` (follow an instruction book), ``simonsays``.
Each game has 1,000 seeds per split: train 0-999, dev 10,000-10,999, test 20,000-20,999.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from agentfly_envs.errors import TaskFormatError
from agentfly_envs.worlds.base import WORLDS, WorldState, require_module
from agentfly_envs.worlds.jvm import JavaWorld, py4j_safe, require_java

GAMES = ("coin", "cookingworld", "twc", "mapreader", "sorting", "arithmetic", "peckingorder", "simonsays")
"""The simulator's game names."""
SPLIT_SEEDS: dict[str, range] = {"train": range(0, 1000), "dev": range(10_000, 11_000), "test": range(20_000, 21_000)}
"""The seeds of each split (the same for every game and parameter setting)."""
INSTALL_HINT = "pip install 'agentfly-rl[worlds]' (the textworld-express package)"


def require_textworld_express() -> None:
    """Checks that the package and a Java runtime are installed.

    Raises:
        WorldUnavailableError: one is missing; the message says what to install.
    """
    require_module("textworld_express", "TextWorldExpress", INSTALL_HINT)
    require_java("TextWorldExpress")


@WORLDS.register("textworld_express")
class TextWorldExpress(JavaWorld):
    """One TextWorldExpress game session, in a JVM of its own (see :class:`~agentfly_envs.worlds.jvm.JavaWorld`
    for ``timeout_s``).

    Rows: ``game`` (one of :data:`GAMES`), ``seed`` (an int of the split's seeds), ``split`` (``train``, ``dev``
    or ``test``) and optional ``params``, the simulator's generation parameters (e.g.
    ``"numLocations=5,includeDoors=0"``; see the TextWorldExpress README for each game's).
    """

    label = "TextWorldExpress"

    def __init__(self, timeout_s: float = 60.0) -> None:
        super().__init__(timeout_s)
        self._loaded: tuple[str, str] | None = None  # the (game, params) the session generates
        self._task = ""
        self._valid: tuple[str, ...] = ()  # the simulator lists them with every answer

    def _require(self) -> None:
        require_textworld_express()

    def _classpath(self) -> tuple[str, str]:
        from textworld_express.constants import BASEPATH, JAR_PATH

        return JAR_PATH, BASEPATH

    def _open_session(self, gateway: Any) -> Any:
        return gateway.jvm.textworldexpress.runtime.PythonInterface()

    def _forget_session(self) -> None:
        self._loaded = None

    def _start(self, session: Any, row: Mapping[str, Any]) -> WorldState:
        game, params = str(row["game"]), str(row.get("params") or "")
        if self._loaded != (game, params):
            self._loaded = None
            message = str(session.load(game, params) or "").strip()
            if message:
                raise TaskFormatError(f"TextWorldExpress game {game!r} with params {params!r}: {message}")
            self._loaded = (game, params)
        response = self._generate(session)
        self._task = str(session.getTaskDescription())
        return self._state(response)

    def _generate(self, session: Any) -> dict[str, Any]:
        """Generates the row's game afresh (the same game every time: the world is deterministic)."""
        response = json.loads(session.generateNewGameJSON(int(self._row["seed"]), self._row["split"], True))
        if str(response.get("observation", "")).startswith("ERROR"):
            raise TaskFormatError(f"TextWorldExpress cannot start {self._row}: {response['observation'].strip()}")
        return response

    def step(self, command: str) -> WorldState:
        command = py4j_safe(command)
        response = json.loads(self._call(command, lambda session: session.stepJSON(command)))
        self._history.append(command)
        return self._state(response)

    def task_description(self) -> str:
        return self._task

    def valid_actions(self) -> tuple[str, ...]:
        return self._valid

    def _gold_key(self) -> tuple:
        row = self._row
        return row["game"], str(row.get("params") or ""), row["split"], int(row["seed"])

    def _find_gold_path(self, session: Any) -> tuple[str, ...]:
        """The gold path, cut where the task is solved (some games' paths go on after it), found by playing it
        from a fresh copy of the game, which is then set back to where the episode is."""
        self._generate(session)
        path = tuple(str(command) for command in session.getGoldActionSequence())
        for moves, command in enumerate(path, start=1):
            response = json.loads(session.stepJSON(command))
            if response.get("tasksuccess") or float(response.get("score", 0.0)) >= 1.0:
                path = path[:moves]
                break
        self._generate(session)
        for command in self._history:
            session.stepJSON(command)
        return path

    def _state(self, response: Mapping[str, Any]) -> WorldState:
        score = min(max(float(response.get("score", 0.0)), 0.0), 1.0)
        self._valid = tuple(str(action) for action in response.get("validActions", ()))
        return WorldState(
            observation=str(response.get("observation", "")).strip(),
            score=score,
            success=bool(response.get("tasksuccess")) or score >= 1.0,
            failure=bool(response.get("taskfailure")),
            moves=len(self._history),
        )
