"""TextArena (Guertler et al., 2025): single-player text puzzles, pure Python, played in this process.

The ``textarena`` package generates each game from a seed. Only its offline single-player puzzles are offered
(:data:`GAMES`); its word games download data and others need API keys. A game's TextArena variants (e.g.
``TowerOfHanoi-v0-hard``, ``Minesweeper-v0-medium``) are all accepted as the row's ``game``.

Commands are TextArena's own, in square brackets (``[A C]``, ``[up]``, ``[1 2 3 4]``, ``[2 3]``). A command the
game rejects (wrong format, an illegal move) is an observation, but TextArena's rule holds: a second invalid move
in a row loses the game. The games draw from Python's global ``random``; each world keeps its own generator state
and swaps it in around every call, so a game replays the same from its seed whatever else the process draws.
"""

from __future__ import annotations

import copy
import importlib
import random
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from agentfly_envs.errors import AgentflyError, TaskFormatError
from agentfly_envs.worlds.base import WORLDS, World, WorldCommandError, WorldCrashedError, WorldState, require_module
from agentfly_envs.worlds.puzzle_solvers import SOLVERS

GAMES: dict[str, str] = {
    "TowerOfHanoi": "TowerOfHanoi-v0",
    "FrozenLake": "FrozenLake-v0",
    "Mastermind": "Mastermind-v0",
    "Sokoban": "Sokoban-v0",
    "Minesweeper": "Minesweeper-v0-small",
    "2048": "2048-v0-mega-easy",
}
"""Game family (its folder in ``textarena.envs``, ``Game2048`` for 2048) -> the TextArena id played by default:
Tower of Hanoi with 3 disks (every seed is the same puzzle), FrozenLake 4x4 with 3 holes, Mastermind with 4
distinct digits of 1-6, Sokoban 6x6 with 3 boxes, Minesweeper 5x5 with 5 mines, 2048 up to the 64 tile."""
SPLIT_SEEDS: dict[str, range] = {
    "train": range(0, 10_000),
    "dev": range(100_000, 101_000),
    "test": range(200_000, 201_000),
}
"""The seeds of each split. Far apart because Sokoban retries a room that fails to generate with the next seed."""
INSTALL_HINT = "pip install 'agentfly-rl[puzzles]' (the textarena package)"
_VARIANT_SUFFIXES = ("-train", "-raw")  # the same game under TextArena's observation wrappers, which are not used


def require_textarena() -> None:
    """Checks that the package is installed.

    Raises:
        WorldUnavailableError: it is missing; the message says what to install.
    """
    require_module("textarena", "TextArena", INSTALL_HINT)


def family(game_id: str) -> str:
    """The game family of a TextArena id (``"Sokoban-v0-medium"`` -> ``"Sokoban"``, ``"2048-v0"`` -> ``"2048"``)."""
    return game_id.split("-v", 1)[0]


def game_ids() -> list[str]:
    """Every TextArena id of the families in :data:`GAMES` (needs the package)."""
    from textarena.envs.registration import ENV_REGISTRY

    return sorted(
        game_id for game_id in ENV_REGISTRY if family(game_id) in GAMES and not game_id.endswith(_VARIANT_SUFFIXES)
    )


def check_game(game_id: str) -> None:
    """Raises ``TaskFormatError`` naming the playable ids when ``game_id`` is not one (needs the package)."""
    if game_id not in game_ids():
        raise TaskFormatError(f"unknown TextArena game {game_id!r}; choose one of {game_ids()}")


def _new_game(game_id: str) -> Any:
    """A TextArena env, unwrapped (the raw game: its messages are put together here)."""
    from textarena.envs.registration import ENV_REGISTRY

    spec = ENV_REGISTRY[game_id]
    module, name = spec.entry_point.split(":")
    return getattr(importlib.import_module(module), name)(**spec.kwargs)


class _OwnRandom:
    """A state of Python's global ``random``, swapped in for the calls made under :meth:`active`."""

    def __init__(self) -> None:
        self._state = random.Random().getstate()

    @contextmanager
    def active(self) -> Iterator[None]:
        outside = random.getstate()
        random.setstate(self._state)
        try:
            yield
        finally:
            self._state = random.getstate()
            random.setstate(outside)


@WORLDS.register("textarena")
class TextArena(World):
    """One TextArena game at a time, in this process.

    Rows: ``game`` (a TextArena id of a family in :data:`GAMES`, e.g. ``"Sokoban-v0"``), ``seed`` (an int of the
    split's seeds) and ``split`` (``train``, ``dev`` or ``test``).

    Args:
        timeout_s: Not used: the games are plain Python and answer at once (the argument every world takes).
    """

    def __init__(self, timeout_s: float = 60.0) -> None:
        self.timeout_s = timeout_s
        self._game: Any = None
        self._random = _OwnRandom()
        self._start: tuple[Any, _OwnRandom] | None = None  # copies of the game and its generator as they started
        self._row: dict[str, Any] = {}
        self._task = ""
        self._moves = 0

    def start(self, row: Mapping[str, Any]) -> WorldState:
        require_textarena()
        game_id = str(row["game"])
        check_game(game_id)
        self._row, self._moves = dict(row), 0
        self._game = _new_game(game_id)
        with self._random.active():
            self._game.reset(num_players=1, seed=int(row["seed"]))
        self._start = copy.deepcopy((self._game, self._random))  # some games take seconds to generate (Sokoban)
        messages = self._messages()
        self._task = "\n".join(text for kind, text in messages if kind == "PROMPT")
        return self._state([text for kind, text in messages if kind != "PROMPT"])

    def step(self, command: str) -> WorldState:
        if self._game is None:
            raise WorldCrashedError("no game is running; start one first")
        try:
            with self._random.active():
                self._game.step(command)
        except Exception as e:  # a game that trips over a command it should have rejected runs on
            self._messages()
            raise WorldCommandError(
                f"the game could not carry out {command[:100]!r}: {type(e).__name__}: {e}"
            ) from None
        self._moves += 1
        return self._state([text for _, text in self._messages()])

    def task_description(self) -> str:
        return self._task

    def gold_commands(self) -> list[str]:
        """The moves a solver finds for the running game from its start (see :mod:`.puzzle_solvers`).

        Raises:
            AgentflyError: the game has no solver (2048).
        """
        if self._game is None:
            raise WorldCrashedError("no game is running; start one first")
        game_id = str(self._row["game"])
        solver = SOLVERS.get(family(game_id))
        if solver is None:
            raise AgentflyError(f"TextArena {game_id} has no solver, so no golden episodes")
        game, own_random = copy.deepcopy(self._start)  # the solver may play on it
        with own_random.active():
            return solver(game)

    def close(self) -> None:
        self._game = self._start = None

    def _messages(self) -> list[tuple[str, str]]:
        """The game's new messages to the player, as (kind, text), leaving out the echo of the player's command."""
        _, messages = self._game.get_observation()
        return [(kind.name, str(text).strip()) for _, text, kind in messages if kind.name != "PLAYER_ACTION"]

    def _state(self, texts: list[str]) -> WorldState:
        state = self._game.state
        won = bool(state.done) and state.rewards is not None and state.rewards.get(0, 0) >= 1
        if state.done:
            texts.append(str(state.game_info[0].get("reason", "")))
            score = 1.0 if won else float((state.rewards or {}).get(0, 0.0))
        else:
            with self._random.active():
                score = float(self._game._get_percentage_completion())  # every offered game has one
        return WorldState(
            observation="\n\n".join(text for text in texts if text),
            score=min(max(score, 0.0), 1.0),
            success=won,
            failure=bool(state.done) and not won,
            moves=self._moves,
        )
