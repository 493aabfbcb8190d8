"""GSM8K-format math word problems: rows with ``question`` and ``answer``.

The ``answer`` field is a worked solution whose arithmetic carries calculator annotations
(``<<48/2=24>>``) and ends with ``#### <final answer>``. Those annotations are the golden
calculator calls; the text after ``####`` is the reference answer.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from agentfly_envs.errors import DataUnavailableError, TaskFormatError
from agentfly_envs.tasks.base import TASKS, GoldenSolution, Row, TaskSource

logger = logging.getLogger(__name__)

_ANNOTATION = re.compile(r"<<([^<>]*)>>")
_FILE_FORMATS = {".json": "json", ".jsonl": "json", ".parquet": "parquet"}

DataFiles = str | os.PathLike | Sequence[str | os.PathLike] | Mapping[str, str | os.PathLike | Sequence[str]]


def final_answer(solution: str) -> str:
    """The text after the last ``####`` of a GSM8K solution.

    Raises:
        TaskFormatError: the solution has no ``####`` line.

    Example:
        >>> final_answer("Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 duck eggs.\\n#### 18")
        '18'
    """
    _, marker, tail = solution.rpartition("####")
    if not marker or not tail.strip():
        raise TaskFormatError(
            f"GSM8K answer has no '#### <final answer>' line: {solution[-120:]!r}; "
            "rows need an 'answer' field that ends with '#### N'"
        )
    return tail.strip()


def calculator_annotations(solution: str) -> list[tuple[str, str]]:
    """The ``(expression, result)`` pairs of a solution's ``<<expression=result>>`` annotations.

    Example:
        >>> calculator_annotations("9 * 2 = $<<9*2=18>>18 and <<18/3=6>>6")
        [('9*2', '18'), ('18/3', '6')]
    """
    pairs = []
    for annotation in _ANNOTATION.findall(solution):
        expression, equals, result = annotation.rpartition("=")
        if equals and expression.strip():
            pairs.append((expression.strip(), result.strip()))
    return pairs


class MathWordProblems(TaskSource):
    """Shared prompting, reference and golden solution for GSM8K-format rows."""

    required_fields = ("question", "answer")

    def system_prompt(self, answer_by_tool: bool, tools: Sequence[str]) -> str:
        finish = (
            "When you know the answer, call the answer tool with the final number."
            if answer_by_tool
            else "When you know the answer, reply without calling a tool and write the final answer as \\boxed{N}."
        )
        if "calculator" in tools:
            compute = "Use the calculator tool for every arithmetic step."
        elif {"python", "python_executor"} & set(tools):
            compute = "Compute every arithmetic step with Python code."
        else:
            compute = "Use the tools for every arithmetic step."
        return f"You are a careful assistant that solves math word problems step by step. {compute} {finish}"

    def user_prompt(self, row: Row) -> str:
        return row["question"].strip()

    def ground_truth(self, row: Row) -> str:
        return final_answer(row["answer"])

    def golden(self, row: Row) -> GoldenSolution:
        pairs = calculator_annotations(row["answer"])
        return GoldenSolution(
            expressions=tuple(e for e, _ in pairs),
            results=tuple(r for _, r in pairs),
            answer=final_answer(row["answer"]),
        )


def _file_format(data_files: DataFiles) -> str:
    first = next(iter(data_files.values())) if isinstance(data_files, Mapping) else data_files
    if not isinstance(first, str | os.PathLike):
        first = next(iter(first))
    suffix = os.path.splitext(os.fspath(first))[1].lower()
    if suffix not in _FILE_FORMATS:
        raise DataUnavailableError(
            f"cannot tell the format of {os.fspath(first)!r}: use a .json (a list of rows), .jsonl or .parquet file"
        )
    return _FILE_FORMATS[suffix]


def load_rows(
    path: str, name: str | None, split: str, data_files: DataFiles | None, required_fields: Sequence[str]
) -> Any:
    """Loads a split with ``datasets``: from local files when ``data_files`` is given, else from the Hub.

    Args:
        path: Hub dataset id (used only without ``data_files``).
        name: Hub dataset config name.
        split: Split to load; with a single file or list of files the split is ``"train"``.
        data_files: JSON (list of rows), JSONL or parquet file(s), or a ``{split: files}`` mapping.
        required_fields: Columns the rows must have.

    Returns:
        A ``datasets.Dataset`` (indexable, ``len``-able, rows as dicts).

    Raises:
        DataUnavailableError: the data cannot be loaded; the message says how to provide it.
        TaskFormatError: the data lacks a required column.
    """
    import datasets  # lazy: datasets takes ~1 s to import

    try:
        if data_files is None:
            dataset = datasets.load_dataset(path, name, split=split)
        else:
            if not isinstance(data_files, Mapping):
                split = "train"
            dataset = datasets.load_dataset(_file_format(data_files), data_files=data_files, split=split)
    except DataUnavailableError:
        raise
    except Exception as e:
        source = f"files {data_files!r}" if data_files is not None else f"{path!r} (config {name!r}) from the Hub"
        raise DataUnavailableError(
            f"could not load split {split!r} of {source}: {type(e).__name__}: {e}\n"
            "To run offline, pass data_files= a JSON list, JSONL or parquet file with 'question' and "
            "'answer' fields (GSM8K format: the answer ends with '#### N'), e.g. "
            "gymnasium.make('agentfly/GSM8K-Calc', data_files='gsm8k/test.jsonl'); or use "
            "'agentfly/Arith-Calc', which generates its tasks and needs no data."
        ) from e
    missing = [f for f in required_fields if f not in dataset.column_names]
    if missing:
        raise TaskFormatError(
            f"the data lacks column(s) {missing} (it has {dataset.column_names}); GSM8K-format data needs "
            f"{list(required_fields)}"
        )
    return dataset


@TASKS.register("gsm8k")
class GSM8KTasks(MathWordProblems):
    """GSM8K (Cobbe et al., 2021), from the Hub by default or from local files.

    Args:
        data_files: Local data instead of the Hub: a JSON list, JSONL or parquet file (or list of
            files, or ``{split: files}``) with ``question`` and ``answer`` fields.
        split: Split to use (``"train"`` or ``"test"`` on the Hub).
        path: Hub dataset id.
        name: Hub dataset config.
    """

    def __init__(
        self,
        data_files: DataFiles | None = None,
        split: str = "train",
        path: str = "openai/gsm8k",
        name: str | None = "main",
    ) -> None:
        self._rows = load_rows(path, name, split, data_files, self.required_fields)
        if len(self._rows) == 0:
            raise DataUnavailableError(f"the GSM8K data ({data_files or path}) has no rows in split {split!r}")

    def __len__(self) -> int:
        return len(self._rows)

    def row(self, index: int) -> Row:
        return dict(self._rows[index])
