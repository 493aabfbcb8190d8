"""The :class:`TaskSource` interface and the task registry.

A task source owns a sequence of dataset rows and knows how to turn one row into the system and
user prompts, the reference answer the reward compares against, and (optionally) a golden
solution. It never sees tools, parsers or rewards: the env composes those.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentfly_envs.errors import TaskFormatError
from agentfly_envs.registry import Registry
from agentfly_envs.rewards import GroundTruth

Row = dict[str, Any]


@dataclass(frozen=True)
class GoldenSolution:
    """A reference solution: the steps, in order, in tool-neutral terms, and the final answer.

    The env turns each kind of step into calls of the tool it has for it (see ``ToolEnv.golden_actions``).

    Attributes:
        answer: The final answer text (what an ``answer`` call submits).
        expressions: Arithmetic expressions that solve the task step by step (e.g. ``["16-3-4", "9*2"]``),
            for a calculator, or printed by Python.
        results: The value each expression should give, as written in the data.
        programs: Python programs to run (e.g. a solution and its example tests).
        queries: Search queries that find the facts the answer rests on.
        final: The final turn's text when answering without a tool (default: ``answer`` in ``\\boxed{}``).
    """

    answer: str
    expressions: tuple[str, ...] = ()
    results: tuple[str, ...] = ()
    programs: tuple[str, ...] = ()
    queries: tuple[str, ...] = ()
    final: str | None = None


class TaskSource(ABC):
    """Rows of one task plus how to prompt for, score and solve them.

    Subclasses set ``required_fields`` and implement the abstract methods; rows are plain dicts.
    """

    required_fields: tuple[str, ...] = ()

    @abstractmethod
    def __len__(self) -> int:
        """Number of rows available by index."""

    @abstractmethod
    def row(self, index: int) -> Row:
        """Row ``index`` (0-based, in file order), as a new dict."""

    @abstractmethod
    def system_prompt(self, answer_by_tool: bool, tools: Sequence[str]) -> str:
        """The task's instructions.

        Args:
            answer_by_tool: Whether the episode ends by an ``answer`` call (else by a turn without calls).
            tools: The names of the env's tools, for instructions that depend on them.
        """

    @abstractmethod
    def user_prompt(self, row: Row) -> str:
        """The user turn that poses the task."""

    @abstractmethod
    def ground_truth(self, row: Row) -> GroundTruth:
        """The reference answer(s) the reward function compares against."""

    def golden(self, row: Row) -> GoldenSolution | None:
        """A reference solution for ``row``, or ``None`` if the task has none."""
        return None

    def where(self, index: int) -> str:
        """Where row ``index`` comes from, for messages: ``"row N (1-based)"`` here; sources that read files name the
        file and the row within it."""
        return f"row {index + 1} (1-based)"

    def validate_at(self, row: Mapping[str, Any], index: int) -> None:
        """:meth:`validate` for row ``index`` of this source.

        Raises:
            TaskFormatError: as :meth:`validate`, the message starting with where the row comes from (:meth:`where`).
        """
        try:
            self.validate(row)
        except TaskFormatError as error:
            raise TaskFormatError(f"{self.where(index)}: {error}") from None

    def validate(self, row: Mapping[str, Any]) -> None:
        """Checks that ``row`` has every field the task needs.

        Raises:
            TaskFormatError: a field is missing or not a string, naming it and what the task expects.
        """
        if not isinstance(row, Mapping):
            raise TaskFormatError(f"a task row must be a mapping of field -> value, got {type(row).__name__}")
        missing = [name for name in self.required_fields if name not in row]
        if missing:
            raise TaskFormatError(
                f"task row is missing field(s) {missing}; {type(self).__name__} rows need "
                f"{list(self.required_fields)}; the row has {sorted(row)}"
            )
        for name in self.required_fields:
            if not isinstance(row[name], str):
                raise TaskFormatError(f"task field {name!r} must be a string, got {type(row[name]).__name__}")


TASKS: Registry[type[TaskSource]] = Registry("task", where="agentfly_envs/tasks/")


def get_task_source(name: str) -> type[TaskSource]:
    """Returns the registered task-source class ``name``; raises ``UnknownNameError`` with close matches."""
    return TASKS.get(name)
