"""The shared part of the task sources of interactive worlds: one row per (game, split, seed), played through the
``act`` tool. Row ``i`` of a split is its ``i``-th seed, so ``options={"index": i}`` and seeded draws address the
same games on every machine; the game itself (its goal and first observation) and its score come from the world.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentfly_envs.errors import TaskFormatError
from agentfly_envs.rewards import GroundTruth
from agentfly_envs.tasks.base import Row, TaskSource


class WorldGames(TaskSource):
    """The seeds of one split of a world's game.

    Subclasses set ``world`` (the world's registered name), ``label`` (its name in messages), ``split_seeds`` and
    ``prompt`` (the system prompt), and call :meth:`_pick_seeds` (or override :meth:`seeds_of`, ``__len__`` and
    ``row`` where the seeds depend on the game).
    """

    required_fields = ("world", "game", "split")
    world: str
    label: str
    split_seeds: Mapping[str, range]
    prompt: str

    def _pick_seeds(self, split: str, num_tasks: int | None) -> None:
        """Sets ``split`` and ``seeds`` (the first ``num_tasks`` of the split's, or all).

        Raises:
            TaskFormatError: an unknown split, or ``num_tasks`` out of range.
        """
        if split not in self.split_seeds:
            raise TaskFormatError(f"unknown {self.label} split {split!r}; choose one of {list(self.split_seeds)}")
        seeds = self.split_seeds[split]
        if num_tasks is not None and not 1 <= num_tasks <= len(seeds):
            raise TaskFormatError(f"num_tasks must be in [1, {len(seeds)}], got {num_tasks}")
        self.split, self.seeds = split, seeds[: num_tasks or len(seeds)]

    def __len__(self) -> int:
        return len(self.seeds)

    def system_prompt(self, answer_by_tool: bool, tools: Sequence[str]) -> str:
        return self.prompt

    def user_prompt(self, row: Row) -> str:
        """Empty: the ``act`` tool puts the game's goal and first observation in the user turn."""
        return ""

    def ground_truth(self, row: Row) -> GroundTruth:
        """Empty: world rewards score the world's final state, not a reference answer."""
        return ""

    def seeds_of(self, row: Mapping[str, Any]) -> range | None:
        """The seeds of the row's split (``None`` for a split the world does not have, which it reports)."""
        return self.split_seeds.get(row["split"])

    def validate(self, row: Mapping[str, Any]) -> None:
        """Checks the string fields, and that ``seed`` is one of the split's seeds.

        Raises:
            TaskFormatError: a field is missing or has the wrong type, or the seed is outside its split.
        """
        super().validate(row)
        seed, split = row.get("seed"), row["split"]
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise TaskFormatError(f"task field 'seed' must be an int, got {type(seed).__name__}")
        seeds = self.seeds_of(row)
        if seeds is not None and seed not in seeds:
            raise TaskFormatError(
                f"seed {seed} is not a {split} seed; {split} seeds are {seeds.start}-{seeds.stop - 1} "
                f"(game {row['game']!r})"
            )
