"""MiniWoB++ web tasks: one row per (task, split, seed), played with the web tools (``click``, ``type``, ``press``,
``scroll``).

A row is ``{"world": "miniwob", "game": "click-button", "split": "train", "seed": 7, "time_limit_s": 300.0}``; the
page (its instruction and elements), its reward and its solver come from the browser (see
:mod:`agentfly_envs.worlds.miniwob`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentfly_envs.errors import TaskFormatError
from agentfly_envs.tasks.base import TASKS, Row
from agentfly_envs.tasks.world_games import WorldGames
from agentfly_envs.worlds.miniwob import check_task, require_miniwob

SPLIT_SEEDS: dict[str, range] = {
    "train": range(0, 10_000),
    "dev": range(100_000, 101_000),
    "test": range(200_000, 201_000),
}
"""The seeds of each split (the test split also sets MiniWoB's data mode to ``test``)."""
SYSTEM_PROMPT = (
    "You operate a web page in a browser to do the task the user gives. Each turn, call one tool (click, type, "
    "press or scroll) and look at the page that comes back; the episode ends as soon as the task is done."
)


@TASKS.register("miniwob")
class MiniWoBTasks(WorldGames):
    """The seeds of one MiniWoB task and split.

    Args:
        game: A MiniWoB task of :data:`agentfly_envs.worlds.miniwob.TASKS`, e.g. "click-button", "email-inbox".
        split: "train" (seeds 0-9,999), "dev" (100,000-100,999) or "test" (200,000-200,999).
        num_tasks: How many of the split's seeds to use, from the first (default: all).
        time_limit_s: Each episode's time limit in seconds, after which MiniWoB fails it (its own: 10 s for most
            tasks, for fast scripted agents; ``None`` keeps it). The ``world_score`` reward decays over it.

    Raises:
        WorldUnavailableError: the web extra or Chromium is missing (the message says what to install).
        TaskFormatError: an unknown task or split, ``num_tasks`` out of range, or a time limit that is not > 0.
    """

    world, label, split_seeds, prompt = "miniwob", "MiniWoB", SPLIT_SEEDS, SYSTEM_PROMPT

    def __init__(
        self,
        game: str = "click-button",
        split: str = "train",
        num_tasks: int | None = None,
        time_limit_s: float | None = 300.0,
    ):
        self._pick_seeds(split, num_tasks)
        if time_limit_s is not None and not time_limit_s > 0:
            raise TaskFormatError(f"time_limit_s must be > 0 (or None for MiniWoB's own), got {time_limit_s}")
        require_miniwob()
        check_task(game)
        self.game, self.time_limit_s = game, time_limit_s

    def row(self, index: int) -> Row:
        return {
            "world": self.world,
            "game": self.game,
            "split": self.split,
            "seed": self.seeds[index],
            "time_limit_s": self.time_limit_s,
        }

    def validate(self, row: Mapping[str, Any]) -> None:
        """Checks the world's fields (see :class:`WorldGames`) and that ``game`` is an offered task.

        Raises:
            TaskFormatError: a field is missing or wrong.
        """
        super().validate(row)
        check_task(row["game"])
