"""ScienceWorld games as tasks: one row per (task, variation) of a split, played through the ``act`` tool.

A row is ``{"world": "scienceworld", "game": "boil", "split": "train", "seed": 3, "params": ""}`` (``seed`` is
the variation); the game (its goal and first observation), its score and its gold path come from the simulator,
which the ``act`` tool runs (see :mod:`agentfly_envs.worlds.science_world`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentfly_envs.errors import TaskFormatError
from agentfly_envs.tasks.base import TASKS, Row
from agentfly_envs.tasks.world_games import WorldGames
from agentfly_envs.worlds.science_world import (
    TASK_SPLITS,
    check_simplifications,
    require_scienceworld,
    split_variations,
)

SYSTEM_PROMPT = (
    "You are doing a science experiment in a simulated world. Each turn, call the act tool with one command "
    '(such as "look around", "open door to kitchen", "go to kitchen", "pick up thermometer", "focus on water", '
    '"use thermometer on water" or "wait1") and read what happens. Focus only on the object the task names: '
    "focusing on a wrong one fails the task. Keep acting until the task is complete."
)


@TASKS.register("scienceworld")
class ScienceWorldTasks(WorldGames):
    """The variations of some ScienceWorld tasks in one split.

    Rows go round the tasks (row 0 is the first variation of the first task, row 1 the first of the second, ...),
    so the first ``num_tasks`` rows and seeded draws cover every task.

    Args:
        game: A task name (see ``agentfly_envs.worlds.science_world.TASK_SPLITS``, e.g. "boil", "find-animal"),
            a list of them, or None for all 30.
        split: "train", "dev" or "test" (each task's own variations, as the simulator splits them).
        params: The simulator's simplifications, comma-separated (e.g. "openDoors,teleportAction", or "easy").
        num_tasks: How many rows to use, from the first (default: all of the split's).

    Raises:
        WorldUnavailableError: scienceworld or Java is missing (the message says what to install).
        TaskFormatError: an unknown task, split or simplification, or ``num_tasks`` out of range.
    """

    world, label, split_seeds, prompt = "scienceworld", "ScienceWorld", {}, SYSTEM_PROMPT

    def __init__(
        self,
        game: str | Sequence[str] | None = None,
        split: str = "train",
        params: str = "",
        num_tasks: int | None = None,
    ):
        games = list(TASK_SPLITS) if game is None else [game] if isinstance(game, str) else list(game)
        if not games:
            raise TaskFormatError("game must name at least one ScienceWorld task")
        variations = [split_variations(name, split) for name in games]
        for name in games:
            check_simplifications(params, name)
        pairs = [
            (name, variation[rank])
            for rank in range(max(len(v) for v in variations))
            for name, variation in zip(games, variations, strict=True)
            if rank < len(variation)
        ]
        if num_tasks is not None and not 1 <= num_tasks <= len(pairs):
            raise TaskFormatError(f"num_tasks must be in [1, {len(pairs)}], got {num_tasks}")
        require_scienceworld()
        self.split, self.params, self.pairs = split, params, pairs[: num_tasks or len(pairs)]

    def __len__(self) -> int:
        return len(self.pairs)

    def row(self, index: int) -> Row:
        game, variation = self.pairs[index]
        return {"world": self.world, "game": game, "split": self.split, "seed": variation, "params": self.params}

    def seeds_of(self, row: Mapping[str, Any]) -> range:
        """The row's task's variations in its split.

        Raises:
            TaskFormatError: an unknown task, split or simplification.
        """
        check_simplifications(str(row.get("params") or ""), str(row["game"]))
        return split_variations(str(row["game"]), str(row["split"]))
