"""Generated mazes as tasks: one row per (split, seed), played through the ``act`` tool.

A row is ``{"world": "maze", "game": "maze", "split": "train", "seed": 7, "params": ""}``; the maze (its start, exit
and doors), its score and its gold path come from the world (see :mod:`agentfly_envs.worlds.maze`). Nothing is
downloaded or installed: the long-horizon env that runs everywhere.
"""

from __future__ import annotations

from agentfly_envs.tasks.base import TASKS, Row
from agentfly_envs.tasks.world_games import WorldGames
from agentfly_envs.worlds.maze import SPLIT_SEEDS, parse_params

SYSTEM_PROMPT = (
    "You are in a maze of rooms. Each turn, call the act tool with one direction (north, south, east or west) and "
    "read the room you reach. Keep walking until you reach the exit."
)


@TASKS.register("maze")
class MazeTasks(WorldGames):
    """The seeds of one maze split.

    Args:
        split: "train" (seeds 0-99,999), "dev" (100,000-109,999) or "test" (200,000-209,999).
        params: Generation parameters, e.g. "size=6,loops=0.2" ("" for 4 x 4 rooms with 10% of the walls opened).
        num_tasks: How many of the split's seeds to use, from the first (default: all).

    Raises:
        TaskFormatError: an unknown split or parameter, or ``num_tasks`` out of range.
    """

    world, label, split_seeds, prompt = "maze", "maze", SPLIT_SEEDS, SYSTEM_PROMPT

    def __init__(self, split: str = "train", params: str = "", num_tasks: int | None = None) -> None:
        self._pick_seeds(split, num_tasks)
        parse_params(params)
        self.params = params

    def row(self, index: int) -> Row:
        return {
            "world": self.world,
            "game": "maze",
            "split": self.split,
            "seed": self.seeds[index],
            "params": self.params,
        }
