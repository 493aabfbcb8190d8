"""ScienceWorld (Wang et al., 2022): elementary-school science experiments in a simulated house, run in a JVM.

The ``scienceworld`` package ships the simulator as a jar and talks to it through py4j; each world (one per env)
runs it in a JVM of its own (see :mod:`agentfly_envs.worlds.jvm`). A game is one of 30 tasks (boil water, grow a
plant, test an object's conductivity, find a living thing, ...) in one of its variations (the substance, the
objects, the rooms' contents); each task's variations are split into train, dev and test, as in the paper.

The world's score is ScienceWorld's progress score (in [0, 1]); the task is solved at 1 and failed when the
simulator's score drops below 0 (e.g. the agent focused on the wrong object).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentfly_envs.errors import TaskFormatError
from agentfly_envs.worlds.base import WORLDS, WorldState, require_module
from agentfly_envs.worlds.jvm import JavaWorld, py4j_safe, require_java

INSTALL_HINT = "pip install 'agentfly-rl[scienceworld]' (the scienceworld package)"

TASK_SPLITS: dict[str, tuple[int, int, int]] = {
    "boil": (14, 21, 30),
    "change-the-state-of-matter-of": (14, 21, 30),
    "chemistry-mix": (16, 24, 32),
    "chemistry-mix-paint-secondary-color": (18, 27, 36),
    "chemistry-mix-paint-tertiary-color": (18, 27, 36),
    "find-animal": (150, 225, 300),
    "find-living-thing": (150, 225, 300),
    "find-non-living-thing": (150, 225, 300),
    "find-plant": (150, 225, 300),
    "freeze": (14, 21, 30),
    "grow-fruit": (62, 93, 126),
    "grow-plant": (62, 93, 126),
    "identify-life-stages-1": (6, 9, 14),
    "identify-life-stages-2": (4, 6, 10),
    "inclined-plane-determine-angle": (84, 126, 168),
    "inclined-plane-friction-named-surfaces": (692, 1038, 1386),
    "inclined-plane-friction-unnamed-surfaces": (80, 120, 162),
    "lifespan-longest-lived": (62, 93, 125),
    "lifespan-longest-lived-then-shortest-lived": (62, 93, 125),
    "lifespan-shortest-lived": (62, 93, 125),
    "measure-melting-point-known-substance": (218, 327, 436),
    "measure-melting-point-unknown-substance": (150, 225, 300),
    "melt": (14, 21, 30),
    "mendelian-genetics-known-plant": (60, 90, 120),
    "mendelian-genetics-unknown-plant": (240, 360, 480),
    "power-component": (10, 15, 20),
    "power-component-renewable-vs-nonrenewable-energy": (10, 15, 20),
    "test-conductivity": (450, 675, 900),
    "test-conductivity-of-unknown-substances": (300, 450, 600),
    "use-thermometer": (270, 405, 540),
}
"""Task name -> (end of train, end of dev, number of variations): train variations are ``0..end of train - 1``,
dev the next ones, test the rest (7,207 variations in all; the simulator's own split, checked by the tests)."""
SIMPLIFICATIONS = (
    "easy",
    "noElectricalAction",
    "openContainers",
    "openDoors",
    "selfWateringFlowerPots",
    "teleportAction",
)
"""The simulator's simplifications (``params=``, comma-separated); ``easy`` is all of the others."""


def split_variations(task: str, split: str) -> range:
    """The variations of ``task`` in ``split`` ("train", "dev" or "test").

    Raises:
        TaskFormatError: an unknown task or split.
    """
    if task not in TASK_SPLITS:
        raise TaskFormatError(f"unknown ScienceWorld task {task!r}; choose one of {list(TASK_SPLITS)}")
    train_end, dev_end, total = TASK_SPLITS[task]
    splits = {"train": range(0, train_end), "dev": range(train_end, dev_end), "test": range(dev_end, total)}
    if split not in splits:
        raise TaskFormatError(f"unknown ScienceWorld split {split!r}; choose one of {list(splits)}")
    return splits[split]


def check_simplifications(params: str, task: str) -> None:
    """Checks a comma-separated simplification string for ``task``; raises ``TaskFormatError`` naming the bad one."""
    for name in filter(None, params.split(",")):
        if name not in SIMPLIFICATIONS:
            raise TaskFormatError(f"unknown ScienceWorld simplification {name!r}; choose from {list(SIMPLIFICATIONS)}")
    electrical = "power-component" in task or "conductivity" in task
    if electrical and ("noElectricalAction" in params.split(",") or "easy" in params.split(",")):
        raise TaskFormatError(f"ScienceWorld task {task!r} needs electrical actions; drop 'noElectricalAction'/'easy'")


def canonical(observation: str) -> str:
    """``observation`` with the items of each listing sorted (lines indented by one tab, each with the lines
    indented deeper under it): the simulator lists a room's contents in an order that changes between loads of
    the same game (it iterates over hash sets of objects), and the same game must read the same."""
    lines, out, block = observation.strip().splitlines(), [], []
    for line in lines:
        if line.startswith("\t\t") and block:
            block[-1].append(line)
        elif line.startswith("\t"):
            block.append([line])
        else:
            out += [item for entry in sorted(block) for item in entry]
            block = []
            out.append(line)
    out += [item for entry in sorted(block) for item in entry]
    return "\n".join(out)


def require_scienceworld() -> None:
    """Checks that the package and a Java runtime are installed.

    Raises:
        WorldUnavailableError: one is missing; the message says what to install.
    """
    require_module("scienceworld", "ScienceWorld", INSTALL_HINT)
    require_java("ScienceWorld")


@WORLDS.register("scienceworld")
class ScienceWorld(JavaWorld):
    """One ScienceWorld session, in a JVM of its own (see :class:`~agentfly_envs.worlds.jvm.JavaWorld` for
    ``timeout_s``). Listing the valid actions takes the simulator about 90 ms, so it is done only when asked.

    Rows: ``game`` (a task of :data:`TASK_SPLITS`), ``seed`` (a variation of the split), ``split`` (``train``,
    ``dev`` or ``test``) and optional ``params``, the simplifications (e.g. ``"openDoors,teleportAction"``).
    """

    label = "ScienceWorld"

    def __init__(self, timeout_s: float = 60.0) -> None:
        super().__init__(timeout_s)
        self._task = ""

    def _require(self) -> None:
        require_scienceworld()

    def _classpath(self) -> tuple[str, str]:
        from scienceworld.constants import BASEPATH, JAR_PATH

        return JAR_PATH, BASEPATH

    def _open_session(self, gateway: Any) -> Any:
        return gateway.jvm.scienceworld.runtime.pythonapi.PythonInterface()

    def _start(self, session: Any, row: Mapping[str, Any]) -> WorldState:
        self._load(session, with_gold_path=False)
        self._task = str(session.getTaskDescription()).strip()
        # The simulator updates its score on the next command (until then it reports the previous game's).
        return WorldState(
            observation=canonical(str(session.freeActionLook())),
            score=0.0,
            success=False,
            failure=False,
            moves=0,
        )

    def _load(self, session: Any, with_gold_path: bool) -> None:
        row = self._row
        session.load(str(row["game"]), int(row["seed"]), str(row.get("params") or ""), with_gold_path)

    def step(self, command: str) -> WorldState:
        command = py4j_safe(command)
        observation = self._call(command, lambda session: str(session.step(command)))
        self._history.append(command)
        return self._call(command, lambda session: self._state(session, observation))

    def task_description(self) -> str:
        return self._task

    def valid_actions(self) -> tuple[str, ...]:
        listed = self._call("(list valid actions)", lambda session: session.getValidActionObjectCombinations())
        return tuple(str(action) for action in listed)

    def _gold_key(self) -> tuple:
        row = self._row
        return row["game"], str(row.get("params") or ""), int(row["seed"])

    def _find_gold_path(self, session: Any) -> tuple[str, ...]:
        """The simulator's gold path, cut where the task is solved, found by playing it on a fresh copy of the
        game, which is then set back to where the episode is."""
        self._load(session, with_gold_path=True)
        path = tuple(str(command) for command in session.getGoldActionSequence())
        self._load(session, with_gold_path=False)
        for moves, command in enumerate(path, start=1):
            session.step(command)
            if float(session.getScore()) >= 1.0:
                path = path[:moves]
                break
        self._load(session, with_gold_path=False)
        for command in self._history:
            session.step(command)
        return path

    def _state(self, session: Any, observation: str) -> WorldState:
        raw_score = float(session.getScore())
        return WorldState(
            observation=canonical(observation),
            score=min(max(raw_score, 0.0), 1.0),
            success=raw_score >= 0.0 and (raw_score >= 1.0 or bool(session.getCompleted())),
            failure=raw_score < 0.0,
            moves=len(self._history),
        )
