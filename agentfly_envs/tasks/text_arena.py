"""TextArena puzzles as tasks: one row per (game, split, seed), played through the ``act`` tool.

A row is ``{"world": "textarena", "game": "Sokoban-v0", "split": "train", "seed": 7}``; the game (its rules and
first board), its score and its solver's moves come from the world (see :mod:`agentfly_envs.worlds.text_arena`).
"""

from __future__ import annotations

from agentfly_envs.tasks.base import TASKS, Row
from agentfly_envs.tasks.world_games import WorldGames
from agentfly_envs.worlds.text_arena import SPLIT_SEEDS, check_game, require_textarena

SYSTEM_PROMPT = (
    "You are solving a puzzle. Each turn, call the act tool with one move written as the rules say, in square "
    'brackets (such as "[A C]", "[up]" or "[1 2 3 4]"), and read the new board. Keep playing until the puzzle '
    "is solved; two invalid moves in a row lose the game."
)


@TASKS.register("textarena")
class TextArenaTasks(WorldGames):
    """The seeds of one TextArena puzzle and split.

    Args:
        game: A TextArena id of an offered family (see ``agentfly_envs.worlds.text_arena.GAMES``), e.g.
            "TowerOfHanoi-v0", "Sokoban-v0-medium", "Minesweeper-v0-small".
        split: "train" (seeds 0-9,999), "dev" (100,000-100,999) or "test" (200,000-200,999).
        num_tasks: How many of the split's seeds to use, from the first (default: all).

    Raises:
        WorldUnavailableError: textarena is missing (the message says what to install).
        TaskFormatError: an unknown game or split, or ``num_tasks`` out of range.
    """

    world, label, split_seeds, prompt = "textarena", "TextArena", SPLIT_SEEDS, SYSTEM_PROMPT

    def __init__(self, game: str = "TowerOfHanoi-v0", split: str = "train", num_tasks: int | None = None):
        self._pick_seeds(split, num_tasks)
        require_textarena()
        check_game(game)
        self.game = game

    def row(self, index: int) -> Row:
        return {"world": self.world, "game": self.game, "split": self.split, "seed": self.seeds[index]}
