"""TextWorldExpress games as tasks: one row per (game, split, seed), played through the ``act`` tool.

A row is ``{"world": "textworld_express", "game": "coin", "split": "train", "seed": 7, "params": ""}``; the
game itself (its goal and first observation), its score and its gold path come from the simulator, which the
``act`` tool runs (see :mod:`agentfly_envs.worlds.textworld_express`).
"""

from __future__ import annotations

from agentfly_envs.errors import TaskFormatError
from agentfly_envs.tasks.base import TASKS, Row
from agentfly_envs.tasks.world_games import WorldGames
from agentfly_envs.worlds.textworld_express import GAMES, SPLIT_SEEDS, require_textworld_express

SYSTEM_PROMPT = (
    "You are playing a text game. Each turn, call the act tool with one command (a few words, such as "
    '"look around", "move north", "open fridge" or "take coin") and read what happens. Keep acting until the '
    "task is complete; the game ends when the task is solved or failed."
)


@TASKS.register("textworld_express")
class TextWorldExpressTasks(WorldGames):
    """The seeds of one TextWorldExpress game and split.

    Args:
        game: The simulator's game name: "coin", "cookingworld", "twc" (TextWorld Commonsense), "mapreader",
            "sorting", "arithmetic", "peckingorder" or "simonsays".
        split: "train" (seeds 0-999), "dev" (10,000-10,999) or "test" (20,000-20,999).
        params: The simulator's generation parameters, e.g. "numLocations=5,includeDoors=0" ("" for its defaults).
        num_tasks: How many of the split's seeds to use, from the first (default: all 1,000).

    Raises:
        WorldUnavailableError: textworld-express or Java is missing (the message says what to install).
        TaskFormatError: an unknown game or split, or ``num_tasks`` out of range.
    """

    world, label, split_seeds, prompt = "textworld_express", "TextWorldExpress", SPLIT_SEEDS, SYSTEM_PROMPT

    def __init__(self, game: str = "coin", split: str = "train", params: str = "", num_tasks: int | None = None):
        if game not in GAMES:
            raise TaskFormatError(f"unknown TextWorldExpress game {game!r}; choose one of {list(GAMES)}")
        self._pick_seeds(split, num_tasks)
        require_textworld_express()
        self.game, self.params = game, params

    def row(self, index: int) -> Row:
        return {
            "world": self.world,
            "game": self.game,
            "split": self.split,
            "seed": self.seeds[index],
            "params": self.params,
        }
