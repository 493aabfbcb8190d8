"""Solvers for TextArena puzzles: the moves that win a freshly reset game, in the game's own command format.

TextArena has no gold paths, so golden episodes come from these. Each solver reads the game it is given (a
``textarena`` env right after ``reset``, hidden state included: a solver may use the secret code or the mine
positions) and may play moves on it, so it is handed a private copy, never the agent's game.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable
from typing import Any

Solver = Callable[[Any], list[str]]
"""A fresh game (a ``textarena.Env`` after ``reset``) -> the commands that win it."""

_STEPS = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}


def tower_of_hanoi(game: Any) -> list[str]:
    """Moves all disks from tower A to tower C (2^n - 1 moves), e.g. ``"[A C]"``."""

    def move(disks: int, source: str, target: str, spare: str) -> list[str]:
        if disks == 0:
            return []
        return [
            *move(disks - 1, source, spare, target),
            f"[{source} {target}]",
            *move(disks - 1, spare, target, source),
        ]

    return move(game.num_disks, "A", "C", "B")


def frozen_lake(game: Any) -> list[str]:
    """A shortest walk around the holes to the goal (breadth-first search on the map), e.g. ``"[down]"``."""
    state = game.state.game_state
    grid, start, goal = state["grid"], tuple(state["player_pos"]), tuple(state["goal_pos"])
    size = len(grid)
    previous: dict[tuple[int, int], tuple[tuple[int, int], str] | None] = {start: None}
    queue = deque([start])
    while queue:
        cell = queue.popleft()
        if cell == goal:
            break
        for name, (dr, dc) in _STEPS.items():
            row, col = cell[0] + dr, cell[1] + dc
            if 0 <= row < size and 0 <= col < size and grid[row][col] != "H" and (row, col) not in previous:
                previous[(row, col)] = (cell, name)
                queue.append((row, col))
    return _walk_back(previous, goal)


def mastermind(game: Any) -> list[str]:
    """Guesses consistent with all feedback so far (the next such code in lexicographic order each time, one pass
    over the codes), e.g. ``"[1 2 3 4]"``; the feedback is worked out from the secret code, so the guesses are
    those the game would answer."""
    state = game.state.game_state
    secret, length, numbers = state["secret_code"], state["code_length"], range(1, state["num_numbers"] + 1)
    if state["duplicate_numbers"]:
        codes = itertools.product(numbers, repeat=length)
    else:
        codes = itertools.permutations(numbers, length)
    answered: list[tuple[list[int], tuple[int, int]]] = []
    for code in map(list, codes):
        if all(_pegs(guess, code) == feedback for guess, feedback in answered):
            if code == secret:
                return [f"[{' '.join(map(str, guess))}]" for guess, _ in answered] + [f"[{' '.join(map(str, code))}]"]
            answered.append((code, _pegs(code, secret)))
    raise ValueError("the secret code is not a code of this game")


def _pegs(guess: list[int], code: list[int]) -> tuple[int, int]:
    """(black, white): digits in the right place, and further digits in common in the wrong place."""
    black = sum(g == c for g, c in zip(guess, code, strict=True))
    common = sum(min(guess.count(d), code.count(d)) for d in set(guess))
    return black, common - black


def sokoban(game: Any) -> list[str]:
    """A shortest sequence of moves (breadth-first search over player and box positions, never pushing a box into
    a corner without a target) that puts every box on a target, e.g. ``"[left]"``."""
    fixed, room = game.room_fixed, game.room_state  # fixed: 0 wall, 2 target; room: 3/4 box, 5 player
    walls = {(int(r), int(c)) for r, c in zip(*(fixed == 0).nonzero(), strict=True)}
    targets = frozenset((int(r), int(c)) for r, c in zip(*(fixed == 2).nonzero(), strict=True))
    boxes = frozenset((int(r), int(c)) for r, c in zip(*((room == 3) | (room == 4)).nonzero(), strict=True))
    corners = {  # a box pushed into a corner that is no target can never move again
        (r, c)
        for r, c in zip(*(fixed != 0).nonzero(), strict=True)
        if ((r - 1, c) in walls or (r + 1, c) in walls) and ((r, c - 1) in walls or (r, c + 1) in walls)
    } - targets
    player = tuple(int(x) for x in game.player_position)
    start = (player, boxes)
    previous: dict[Any, tuple[Any, str] | None] = {start: None}
    queue = deque([start])
    while queue:
        position = queue.popleft()
        (row, col), boxes = position
        if boxes <= targets:
            return _walk_back(previous, position)
        for name, (dr, dc) in _STEPS.items():
            step = (row + dr, col + dc)
            if step in walls:
                continue
            moved = boxes
            if step in boxes:
                beyond = (step[0] + dr, step[1] + dc)
                if beyond in walls or beyond in boxes or beyond in corners:
                    continue
                moved = boxes - {step} | {beyond}
            following = (step, moved)
            if following not in previous:
                previous[following] = (position, name)
                queue.append(following)
    raise ValueError("this Sokoban room has no solution")


def minesweeper(game: Any) -> list[str]:
    """Opens the centre cell (the first move is always safe), then every safe cell still closed, e.g.
    ``"[2 3]"``; plays them on ``game`` because the mines are laid on the first move."""
    moves = [f"[{game.rows // 2} {game.cols // 2}]"]
    game.step(moves[0])
    while not game.state.done:
        cells = itertools.product(range(game.rows), range(game.cols))
        row, col = next((r, c) for r, c in cells if not game.revealed[r][c] and game.grid[r][c] != -1)
        moves.append(f"[{row} {col}]")
        game.step(moves[-1])
    return moves


def _walk_back(previous: dict[Any, tuple[Any, str] | None], end: Any) -> list[str]:
    """The moves of a breadth-first search's path to ``end``, as bracketed commands."""
    moves = []
    while previous[end] is not None:
        end, name = previous[end]
        moves.append(f"[{name}]")
    return moves[::-1]


SOLVERS: dict[str, Solver] = {
    "TowerOfHanoi": tower_of_hanoi,
    "FrozenLake": frozen_lake,
    "Mastermind": mastermind,
    "Sokoban": sokoban,
    "Minesweeper": minesweeper,
}
"""TextArena game family (its folder in ``textarena.envs``) -> its solver. 2048 has none (its tiles are random)."""
