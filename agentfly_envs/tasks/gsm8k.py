"""GSM8K-format math word problems: rows with ``question`` and ``answer``.

The ``answer`` field is a worked solution whose arithmetic carries calculator annotations
(``<<48/2=24>>``) and ends with ``#### <final answer>``. Those annotations are the golden
calculator calls; the text after ``####`` is the reference answer. Any other question/answer data
works too: an ``answer`` without ``####`` is the reference itself (or its last ``\\boxed{}``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from agentfly_envs.errors import TaskFormatError
from agentfly_envs.rewards import last_boxed
from agentfly_envs.tasks.base import TASKS, GoldenSolution, Row, TaskSource
from agentfly_envs.tasks.files import DataFiles, LoadedTasks

_ANNOTATION = re.compile(r"<<([^<>]*)>>")
OFFLINE_HINT = (
    "To run offline, pass data_files= a JSON list, JSONL or parquet file with 'question' and "
    "'answer' fields (GSM8K format: the answer ends with '#### N'), e.g. "
    "gymnasium.make('agentfly/GSM8K-Calc', data_files='gsm8k/test.jsonl'); or use "
    "'agentfly/Arith-Calc', which generates its tasks and needs no data."
)


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


def reference_answer(answer: str) -> str:
    r"""The reference final answer in a row's ``answer`` field: the text after ``####`` (GSM8K), else the
    last ``\boxed{}``, else the whole field (a plain answer such as ``"18"``).

    Example:
        >>> [reference_answer(a) for a in ("so 9*2=<<9*2=18>>18.\n#### 18", "it is \\boxed{7}", " 42 ")]
        ['18', '7', '42']
    """
    if "####" in answer:
        return final_answer(answer)
    boxed = last_boxed(answer)
    return answer.strip() if boxed is None else boxed


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
        return reference_answer(row["answer"])

    def golden(self, row: Row) -> GoldenSolution:
        pairs = calculator_annotations(row["answer"])
        return GoldenSolution(
            answer=reference_answer(row["answer"]),
            expressions=tuple(e for e, _ in pairs),
            results=tuple(r for _, r in pairs),
        )


@TASKS.register("gsm8k")
class GSM8KTasks(LoadedTasks, MathWordProblems):
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
        self.load(path, name, split, data_files, self.required_fields, OFFLINE_HINT)
