"""TextWorldExpress games as tasks: one row per (game, split, seed), played through the ``act`` tool.

A row is ``{"world": "textworld_express", "game": "coin", "split": "train", "seed": 7, "params": ""}``; the
game itself (its goal and first observation), its score and its gold path come from the simulator, which the
``act`` tool runs (see :mod:`agentfly_envs.worlds.textworld_express`). Row ``i`` of a split is its ``i``-th seed,
so ``options={"index": i}`` and seeded draws address the same games on every machine.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentfly_envs.errors import TaskFormatError
from agentfly_envs.rewards import GroundTruth
from agentfly_envs.tasks.base import TASKS, Row, TaskSource
from agentfly_envs.worlds.textworld_express import GAMES, SPLIT_SEEDS, require_textworld_express

SYSTEM_PROMPT = (
    "You are playing a text game. Each turn, call the act tool with one command (a few words, such as "
    '"look around", "move north", "open fridge" or "take coin") and read what happens. Keep acting until the '
    "task is complete; the game ends when the task is solved or failed."
)


@TASKS.register("textworld_express")
class TextWorldExpressTasks(TaskSource):
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

    required_fields = ("world", "game", "split")

    def __init__(self, game: str = "coin", split: str = "train", params: str = "", num_tasks: int | None = None):
        if game not in GAMES:
            raise TaskFormatError(f"unknown TextWorldExpress game {game!r}; choose one of {list(GAMES)}")
        if split not in SPLIT_SEEDS:
            raise TaskFormatError(f"unknown TextWorldExpress split {split!r}; choose one of {list(SPLIT_SEEDS)}")
        seeds = SPLIT_SEEDS[split]
        if num_tasks is not None and not 1 <= num_tasks <= len(seeds):
            raise TaskFormatError(f"num_tasks must be in [1, {len(seeds)}], got {num_tasks}")
        require_textworld_express()
        self.game, self.split, self.params = game, split, params
        self.seeds = seeds[: num_tasks or len(seeds)]

    def __len__(self) -> int:
        return len(self.seeds)

    def row(self, index: int) -> Row:
        return {
            "world": "textworld_express",
            "game": self.game,
            "split": self.split,
            "seed": self.seeds[index],
            "params": self.params,
        }

    def system_prompt(self, answer_by_tool: bool, tools: Sequence[str]) -> str:
        return SYSTEM_PROMPT

    def user_prompt(self, row: Row) -> str:
        """Empty: the ``act`` tool puts the game's goal and first observation in the user turn."""
        return ""

    def ground_truth(self, row: Row) -> GroundTruth:
        """Empty: world rewards score the world's final state, not a reference answer."""
        return ""

    def validate(self, row: Mapping[str, Any]) -> None:
        """Checks the string fields, and that ``seed`` is one of the split's seeds.

        Raises:
            TaskFormatError: a field is missing or has the wrong type, or the seed is outside its split.
        """
        super().validate(row)
        seed, split = row.get("seed"), row["split"]
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise TaskFormatError(f"task field 'seed' must be an int, got {type(seed).__name__}")
        if split in SPLIT_SEEDS and seed not in SPLIT_SEEDS[split]:
            first, last = SPLIT_SEEDS[split].start, SPLIT_SEEDS[split].stop - 1
            raise TaskFormatError(f"seed {seed} is not a {split} seed; {split} seeds are {first}-{last}")
