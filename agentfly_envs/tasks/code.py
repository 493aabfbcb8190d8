"""Program synthesis scored by unit tests: MBPP- and HumanEval-style rows.

- MBPP rows: ``text`` (or ``prompt``) says what to write; ``test_list`` holds assert statements;
  optional ``code`` is a reference solution and ``test_setup_code`` / ``test_imports`` what the tests
  need (``google-research-datasets/mbpp``, configs ``full`` and ``sanitized``).
- HumanEval rows: ``prompt`` is the function's signature and docstring, ``test`` defines
  ``check(candidate)``, ``entry_point`` names the function; optional ``canonical_solution``
  (``openai/openai_humaneval``).

The reference the reward sees is the list of test programs; ``code_reward`` runs each after the
answer's code in the sandbox.
"""

from __future__ import annotations

import builtins
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentfly_envs.errors import TaskFormatError
from agentfly_envs.tasks.base import TASKS, GoldenSolution, Row
from agentfly_envs.tasks.files import DataFiles, LoadedTasks

OFFLINE_HINT = (
    "To run offline, pass data_files= a JSON list, JSONL or parquet file of MBPP-style rows ('text', "
    "'test_list', optional 'code') or HumanEval-style rows ('prompt', 'test', 'entry_point'), e.g. "
    "gymnasium.make('agentfly/Code-Tests', data_files='data/mbpp_sample.jsonl')."
)
_CALLED = re.compile(r"(?<![\w.])([A-Za-z_]\w*)\s*\(")  # a call of a name, not of an attribute
_DEFINED = re.compile(r"^def\s+([A-Za-z_]\w*)\s*\(", re.MULTILINE)


@dataclass(frozen=True)
class CodeProblem:
    """One row, whichever format it came in.

    Attributes:
        prompt: The task as the agent reads it.
        entry_point: The function the tests call (``None`` if it cannot be told).
        tests: Test programs, each run after the solution; a test passes when it raises nothing.
        examples: The test code shown in the prompt.
        reference: A solution that passes the tests, or ``None``.
    """

    prompt: str
    entry_point: str | None
    tests: tuple[str, ...]
    examples: str
    reference: str | None


def code_problem(row: Mapping[str, Any], shown_tests: int = 1) -> CodeProblem:
    """Reads an MBPP- or HumanEval-style row.

    Args:
        row: The dataset row.
        shown_tests: How many MBPP tests the prompt shows as examples (all are scored).

    Raises:
        TaskFormatError: the row is in neither format.

    Example:
        >>> problem = code_problem({"text": "Add two numbers.", "test_list": ["assert add(1, 2) == 3"]})
        >>> problem.entry_point, problem.tests
        ('add', ('assert add(1, 2) == 3',))
    """
    if isinstance(row.get("test_list"), Sequence) and isinstance(row.get("text", row.get("prompt")), str):
        return _mbpp_problem(row, shown_tests)
    if all(isinstance(row.get(key), str) for key in ("prompt", "test", "entry_point")):
        return _humaneval_problem(row)
    raise TaskFormatError(
        f"a code task row needs MBPP fields ('text' or 'prompt', and 'test_list') or HumanEval fields "
        f"('prompt', 'test', 'entry_point'); the row has {sorted(row)}"
    )


def code_golden(problem: CodeProblem) -> GoldenSolution | None:
    """The golden episode of a code problem: run the reference on the shown tests, then answer with it
    (``None`` without a reference solution)."""
    if problem.reference is None:
        return None
    check = f"{problem.reference.rstrip()}\n\n{problem.examples}\nprint('The example tests pass.')"
    return GoldenSolution(
        answer=problem.reference,
        programs=(check,),
        final=f"Here is my solution:\n```python\n{problem.reference.rstrip()}\n```",
    )


def _mbpp_problem(row: Mapping[str, Any], shown_tests: int) -> CodeProblem:
    asserts = [str(test) for test in row["test_list"]]
    if not asserts:
        raise TaskFormatError(f"MBPP row {row.get('task_id')!r} has an empty 'test_list'")
    setup = str(row.get("test_setup_code") or "") + "".join(f"{line}\n" for line in row.get("test_imports") or ())
    reference = row.get("code") or None
    entry_point = _entry_point(asserts[0], reference)
    examples = "\n".join(asserts[:shown_tests])
    name = f" named `{entry_point}`" if entry_point else ""
    prompt = (
        f"{str(row.get('text', row.get('prompt'))).strip()}\n\n"
        f"Write a Python function{name}. It should pass tests like this:\n```python\n{examples}\n```"
    )
    tests = tuple(f"{setup.strip()}\n{test}".lstrip("\n") for test in asserts)
    return CodeProblem(prompt, entry_point, tests, f"{setup}{examples}".strip("\n"), reference)


def _humaneval_problem(row: Mapping[str, Any]) -> CodeProblem:
    entry_point, signature = row["entry_point"], row["prompt"]
    prompt = f"Complete this Python function; answer with the whole function.\n```python\n{signature.rstrip()}\n```"
    test = f"{row['test'].rstrip()}\n\ncheck({entry_point})"
    solution = row.get("canonical_solution")
    reference = f"{signature}{solution}" if solution else None
    return CodeProblem(prompt, entry_point, (test,), test, reference)


def _entry_point(test: str, reference: str | None) -> str | None:
    """The function a test calls: one the reference defines, else the first call that is not a builtin."""
    called = [name for name in _CALLED.findall(test) if not hasattr(builtins, name)]
    defined = set(_DEFINED.findall(reference or ""))
    return next((name for name in called if name in defined), called[0] if called else None)


@TASKS.register("code_tests")
class CodeTestTasks(LoadedTasks):
    """Write a function that passes unit tests (MBPP by default; HumanEval-style rows work too).

    Args:
        data_files: Local data instead of the Hub: a JSON list, JSONL or parquet file (or list of
            files, or ``{split: files}``) of MBPP- or HumanEval-style rows.
        split: Split to use (MBPP on the Hub: ``train``, ``validation``, ``test``, ``prompt``).
        path: Hub dataset id (e.g. ``"openai/openai_humaneval"`` with ``name=None``).
        name: Hub dataset config.
        shown_tests: How many tests the prompt shows as examples (every test is scored).
    """

    def __init__(
        self,
        data_files: DataFiles | None = None,
        split: str = "test",
        path: str = "google-research-datasets/mbpp",
        name: str | None = "full",
        shown_tests: int = 1,
    ) -> None:
        self.shown_tests = shown_tests
        self.load(path, name, split, data_files, (), OFFLINE_HINT)
        self.validate_at(self.row(0), 0)

    def validate(self, row: Mapping[str, Any]) -> None:
        """Checks that ``row`` is an MBPP- or HumanEval-style row (raises ``TaskFormatError``)."""
        if not isinstance(row, Mapping):
            raise TaskFormatError(f"a task row must be a mapping of field -> value, got {type(row).__name__}")
        code_problem(row, self.shown_tests)

    def system_prompt(self, answer_by_tool: bool, tools: Sequence[str]) -> str:
        run = (
            " You can run Python to try your code before you answer."
            if {"python", "python_executor"} & set(tools)
            else ""
        )
        finish = (
            "When your solution is ready, call the answer tool with the complete code."
            if answer_by_tool
            else "When your solution is ready, reply with the complete code in one fenced code block and no tool call."
        )
        return (
            "You are an expert Python programmer. Write a correct, self-contained Python function for the task; "
            f"its imports go inside the code.{run} {finish}"
        )

    def user_prompt(self, row: Row) -> str:
        return code_problem(row, self.shown_tests).prompt

    def ground_truth(self, row: Row) -> list[str]:
        return list(code_problem(row, self.shown_tests).tests)

    def golden(self, row: Row) -> GoldenSolution | None:
        return code_golden(code_problem(row, self.shown_tests))
