"""A generated maze of rooms, pure Python: a long-horizon world with a score that measures progress.

The maze is a ``size`` x ``size`` grid of rooms (4 x 4 by default); a seed carves a spanning tree of doors
(randomised depth-first search), then opens a share ``loops`` of the remaining walls, so there is more than one way
round. The start and the exit are two rooms as far apart as the maze allows (at least :data:`MIN_MOVES` moves), so
an episode takes 10 or more turns. Every command is one direction, ``north``, ``south``, ``east`` or ``west``
(north raises ``y``, east raises ``x``); an observation is the deterministic text of the room (``Room 2,3. Doors:
north, west.``), the same in every episode that stands there, so states recur across the trajectories of a task.

The score is the progress towards the exit, ``1 - d_best / d_start``: ``d`` the fewest moves from a room to the exit,
``d_best`` the least of it over the rooms visited so far, so the score never falls; it reaches 1 at the exit, which
ends the task. The gold path is a shortest path (breadth-first search).

Example:
    >>> world = Maze()
    >>> state = world.start({"game": "maze", "split": "train", "seed": 0, "params": ""})
    >>> world.task_description()
    'Walk from room 0,0 to the exit in room 0,3. Each turn call act with one direction: north, south, east or west.'
    >>> state.observation, state.score
    ('Room 0,0. Doors: north.', 0.0)
    >>> path = world.gold_commands()
    >>> len(path), path[:3]
    (11, ['north', 'north', 'east'])
    >>> world.step("north").score  # one move of the 11 closer
    0.09090909090909094
    >>> [world.step(command) for command in path[1:]][-1].observation
    'Room 0,3. Doors: east. This is the exit.'
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from agentfly_envs.errors import TaskFormatError
from agentfly_envs.worlds.base import WORLDS, World, WorldCrashedError, WorldState

Room = tuple[int, int]
"""``(x, y)``: east raises ``x``, north raises ``y``; ``(0, 0)`` is the south-west corner."""
DIRECTIONS: dict[str, Room] = {"north": (0, 1), "south": (0, -1), "east": (1, 0), "west": (-1, 0)}
"""Command -> the step it takes, in the order an observation lists doors."""
MIN_MOVES = 10
"""Fewest moves of a shortest path from start to exit (a seed whose maze is shorter is carved again)."""
SPLIT_SEEDS: dict[str, range] = {
    "train": range(0, 100_000),
    "dev": range(100_000, 110_000),
    "test": range(200_000, 210_000),
}
"""The seeds of each split."""
PARAMS = {"size": (4, 10), "loops": (0.0, 1.0)}
"""The generation parameters a row's ``params`` may set (``"size=6,loops=0.2"``), with their ranges."""
DEFAULTS = {"size": 4, "loops": 0.1}
"""The parameters of a row whose ``params`` leaves them out."""


@dataclass(frozen=True)
class Layout:
    """One generated maze.

    Attributes:
        size: Rooms per side.
        doors: Each room's open directions (keys of :data:`DIRECTIONS`).
        start: The room the episode starts in.
        exit: The room that ends it.
        distance: Each room's fewest moves to the exit.
    """

    size: int
    doors: dict[Room, tuple[str, ...]]
    start: Room
    exit: Room
    distance: dict[Room, int]


def parse_params(params: str) -> dict[str, float]:
    """The generation parameters of a row's ``params`` (``"size=6,loops=0.2"``; ``""`` for :data:`DEFAULTS`).

    Raises:
        TaskFormatError: an unknown name, a value that is not a number, or one out of its range.

    Example:
        >>> parse_params("size=6")
        {'size': 6, 'loops': 0.1}
    """
    values: dict[str, float] = dict(DEFAULTS)
    for item in filter(None, (part.strip() for part in params.split(","))):
        name, _, text = item.partition("=")
        if name not in PARAMS:
            raise TaskFormatError(f"unknown maze parameter {name!r} in {params!r}; the maze takes {list(PARAMS)}")
        try:
            value = int(text) if name == "size" else float(text)
        except ValueError:
            raise TaskFormatError(f"maze parameter {name} must be a number, got {text!r}") from None
        low, high = PARAMS[name]
        if not low <= value <= high:
            raise TaskFormatError(f"maze parameter {name} must be in [{low}, {high}], got {value}")
        values[name] = value
    return values


def _neighbour(room: Room, direction: str) -> Room:
    dx, dy = DIRECTIONS[direction]
    return room[0] + dx, room[1] + dy


def _distances(doors: dict[Room, set[str]], source: Room) -> dict[Room, int]:
    """Fewest moves from ``source`` to every room (breadth-first search)."""
    distance, queue = {source: 0}, deque([source])
    while queue:
        room = queue.popleft()
        for direction in doors[room]:
            other = _neighbour(room, direction)
            if other not in distance:
                distance[other] = distance[room] + 1
                queue.append(other)
    return distance


def _carve(rng: np.random.Generator, size: int, loops: float) -> dict[Room, set[str]]:
    """A spanning tree of doors by randomised depth-first search, with a share ``loops`` of other walls opened."""
    doors: dict[Room, set[str]] = {(x, y): set() for x in range(size) for y in range(size)}
    opposite = {"north": "south", "south": "north", "east": "west", "west": "east"}
    stack, seen = [(0, 0)], {(0, 0)}
    while stack:
        room = stack[-1]
        fresh = [d for d in DIRECTIONS if _neighbour(room, d) in doors and _neighbour(room, d) not in seen]
        if not fresh:
            stack.pop()
            continue
        direction = fresh[int(rng.integers(len(fresh)))]
        other = _neighbour(room, direction)
        doors[room].add(direction)
        doors[other].add(opposite[direction])
        seen.add(other)
        stack.append(other)
    walls = [(room, d) for room in sorted(doors) for d in ("north", "east") if _neighbour(room, d) in doors]
    for room, direction in walls:
        if direction not in doors[room] and rng.random() < loops:
            doors[room].add(direction)
            doors[_neighbour(room, direction)].add(opposite[direction])
    return doors


def generate_maze(seed: int, size: int = 4, loops: float = 0.1) -> Layout:
    """The maze of ``seed``: carved until its start and exit, the farthest pair of rooms, are at least
    :data:`MIN_MOVES` moves apart.

    Args:
        seed: The maze's seed (any int >= 0).
        size: Rooms per side.
        loops: Share of the walls left by the spanning tree that get a door, in [0, 1].

    Example:
        >>> layout = generate_maze(0)
        >>> layout.distance[layout.start] >= MIN_MOVES
        True
    """
    for attempt in range(100):
        rng = np.random.default_rng([seed, size, int(loops * 1000), attempt])
        doors = _carve(rng, size, loops)
        tables = {room: _distances(doors, room) for room in sorted(doors)}
        start, exit_, moves = max(((a, b, d) for a in tables for b, d in tables[a].items()), key=lambda t: t[2])
        if moves >= MIN_MOVES:
            ordered = {room: tuple(d for d in DIRECTIONS if d in doors[room]) for room in doors}
            return Layout(size, ordered, start, exit_, tables[exit_])
    raise TaskFormatError(f"no maze of size {size} has {MIN_MOVES} moves between its farthest rooms")


def _name(room: Room) -> str:
    return f"{room[0]},{room[1]}"


@WORLDS.register("maze")
class Maze(World):
    """One maze at a time, in this process.

    Rows: ``seed`` (an int), ``split`` (``train``, ``dev`` or ``test``, which only bounds the seeds) and optional
    ``params`` (:func:`parse_params`).

    Args:
        timeout_s: Not used: the maze answers at once (the argument every world takes).
    """

    def __init__(self, timeout_s: float = 60.0) -> None:
        self.timeout_s = timeout_s
        self._layout: Layout | None = None
        self._room: Room = (0, 0)
        self._best = 0
        self._moves = 0

    def start(self, row: Mapping[str, Any]) -> WorldState:
        params = parse_params(str(row.get("params") or ""))
        self._layout = generate_maze(int(row["seed"]), int(params["size"]), float(params["loops"]))
        self._room, self._moves = self._layout.start, 0
        self._best = self._layout.distance[self._room]
        return self._state(self._describe())

    def step(self, command: str) -> WorldState:
        layout = self._running()
        direction = command.strip().lower().removeprefix("go ").strip()
        if direction not in DIRECTIONS:
            text = f"Unknown command {command[:40]!r}: type north, south, east or west. {self._describe()}"
        elif direction not in layout.doors[self._room]:
            text = f"There is no door {direction}. {self._describe()}"
        else:
            self._room = _neighbour(self._room, direction)
            self._best = min(self._best, layout.distance[self._room])
            text = self._describe()
        self._moves += 1
        return self._state(text)

    def task_description(self) -> str:
        layout = self._running()
        return (
            f"Walk from room {_name(layout.start)} to the exit in room {_name(layout.exit)}. "
            "Each turn call act with one direction: north, south, east or west."
        )

    def valid_actions(self) -> tuple[str, ...]:
        return self._running().doors[self._room]

    def gold_commands(self) -> list[str]:
        """A shortest path from the start to the exit: from each room, the first door (in :data:`DIRECTIONS`
        order) that leads one move closer."""
        layout = self._running()
        room, path = layout.start, []
        while room != layout.exit:
            direction = next(
                d for d in layout.doors[room] if layout.distance[_neighbour(room, d)] == layout.distance[room] - 1
            )
            path.append(direction)
            room = _neighbour(room, direction)
        return path

    def close(self) -> None:
        self._layout = None

    def _running(self) -> Layout:
        if self._layout is None:
            raise WorldCrashedError("no maze is running; start one first")
        return self._layout

    def _describe(self) -> str:
        layout = self._running()
        text = f"Room {_name(self._room)}. Doors: {', '.join(layout.doors[self._room])}."
        return f"{text} This is the exit." if self._room == layout.exit else text

    def _state(self, text: str) -> WorldState:
        layout = self._running()
        score = 1.0 - self._best / layout.distance[layout.start]
        return WorldState(text, score, success=self._room == layout.exit, failure=False, moves=self._moves)
