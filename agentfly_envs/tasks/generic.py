"""Tasks from any file of rows, as AgentFly trains on them: the question is the user turn, the rest scores it.

A row's ``question`` field (or ``prompt``, ``instruction``, ``problem``: the first present) becomes the user
message; its ``answer`` field (or ``answers``, ``ground_truth``, ``solution``, ``target``) is the reference the
reward function compares against. MBPP- and HumanEval-style rows (unit tests in the row) are read as code tasks:
the prompt asks for the function and the reference is the tests, for ``code_reward``. Other fields ride along
in ``info["task"]`` (e.g. ``context`` paragraphs for the ``search`` tool's default backend).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentfly_envs.errors import TaskFormatError
from agentfly_envs.tasks.base import TASKS, GoldenSolution, Row
from agentfly_envs.tasks.code import code_golden, code_problem
from agentfly_envs.tasks.files import DataFiles, LoadedTasks
from agentfly_envs.tasks.gsm8k import calculator_annotations, reference_answer

QUESTION_FIELDS = ("question", "prompt", "instruction", "problem")
"""Fields that pose the task, in order of preference."""
ANSWER_FIELDS = ("answer", "answers", "ground_truth", "solution", "target")
"""Fields that hold the reference answer, in order of preference."""
OFFLINE_HINT = (
    "Pass data_files= a JSON list, JSONL or parquet file of rows with a 'question' (or 'prompt', 'instruction', "
    "'problem') field and an 'answer' field, e.g. gymnasium.make('agentfly/Files', data_files='data/x.json')."
)


def is_code_row(row: Mapping[str, Any]) -> bool:
    """Whether ``row`` is an MBPP-style (``test_list``) or HumanEval-style (``test`` + ``entry_point``) row."""
    return "test_list" in row or ("test" in row and "entry_point" in row)


def question_field(row: Mapping[str, Any]) -> str:
    """The name of the field that poses the task.

    Raises:
        TaskFormatError: the row has none of :data:`QUESTION_FIELDS` as a string.

    Example:
        >>> question_field({"instruction": "Add 2 and 3.", "answer": "5"})
        'instruction'
    """
    for name in QUESTION_FIELDS:
        if isinstance(row.get(name), str):
            return name
    raise TaskFormatError(
        f"the row has no question: it needs a string field {' or '.join(repr(f) for f in QUESTION_FIELDS)} "
        f"(the user message); the row has {sorted(row)}"
    )


@TASKS.register("files")
class FileTasks(LoadedTasks):
    """Rows from local files (or a Hub dataset), posed by their question field and scored against their answer.

    Args:
        data_files: A JSON list, JSONL or parquet file (or list of files, or ``{split: files}``).
        split: Split to use with ``{split: files}`` or the Hub.
        path: Hub dataset id, used only without ``data_files``.
        name: Hub dataset config.
        system_prompt: The task's instructions; ``None`` for a generic one that fits the tools.
        shown_tests: Code rows: how many tests the prompt shows as examples (every test is scored).
    """

    def __init__(
        self,
        data_files: DataFiles | None = None,
        split: str = "train",
        path: str | None = None,
        name: str | None = None,
        system_prompt: str | None = None,
        shown_tests: int = 1,
    ) -> None:
        if data_files is None and path is None:
            raise TaskFormatError(f"the 'files' task needs data. {OFFLINE_HINT}")
        self._instructions = system_prompt
        self.shown_tests = shown_tests
        self.load(path or "", name, split, data_files, (), OFFLINE_HINT)
        self.validate_at(self.row(0), 0)

    def validate(self, row: Mapping[str, Any]) -> None:
        """Checks that ``row`` poses a task this source can score (raises ``TaskFormatError``)."""
        if not isinstance(row, Mapping):
            raise TaskFormatError(f"a task row must be a mapping of field -> value, got {type(row).__name__}")
        if is_code_row(row):
            code_problem(row, self.shown_tests)
            return
        question_field(row)
        if not any(row.get(name) is not None for name in ANSWER_FIELDS):
            raise TaskFormatError(
                f"the row has no reference answer: it needs a field {' or '.join(repr(f) for f in ANSWER_FIELDS)} "
                f"for the reward; the row has {sorted(row)}"
            )

    def system_prompt(self, answer_by_tool: bool, tools: Sequence[str]) -> str:
        if self._instructions is not None:
            return self._instructions
        use = f" Use the tools ({', '.join(tools)}) when they help." if tools else ""
        finish = (
            "When you know the answer, call the answer tool with it."
            if answer_by_tool
            else "When you know the answer, reply without calling a tool and write the final answer as \\boxed{answer}."
        )
        return f"You are a helpful assistant that solves the user's task step by step.{use} {finish}"

    def user_prompt(self, row: Row) -> str:
        if is_code_row(row):
            return code_problem(row, self.shown_tests).prompt
        return row[question_field(row)].strip()

    def ground_truth(self, row: Row) -> str | list[str]:
        if is_code_row(row):
            return list(code_problem(row, self.shown_tests).tests)
        answer = next(row[name] for name in ANSWER_FIELDS if row.get(name) is not None)
        if isinstance(answer, str):
            return reference_answer(answer)
        if isinstance(answer, Sequence):
            return [str(item) for item in answer]
        return str(answer)

    def golden(self, row: Row) -> GoldenSolution | None:
        if is_code_row(row):
            return code_golden(code_problem(row, self.shown_tests))
        truth = self.ground_truth(row)
        answer = truth if isinstance(truth, str) else truth[0]
        raw = next(row[name] for name in ANSWER_FIELDS if row.get(name) is not None)
        pairs = calculator_annotations(raw) if isinstance(raw, str) else []
        return GoldenSolution(answer=answer, expressions=tuple(e for e, _ in pairs), results=tuple(r for _, r in pairs))
