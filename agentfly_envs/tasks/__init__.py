"""Task sources: where an env's tasks come from (``gsm8k`` and ``hotpotqa`` from the Hub or files,
``code_tests`` (MBPP, HumanEval-style) likewise, ``arithmetic`` generated)."""

from agentfly_envs.tasks.arithmetic import ArithmeticTasks, generate_problem
from agentfly_envs.tasks.base import TASKS, GoldenSolution, Row, TaskSource, get_task_source
from agentfly_envs.tasks.code import CodeProblem, CodeTestTasks, code_problem
from agentfly_envs.tasks.gsm8k import (
    GSM8KTasks,
    MathWordProblems,
    calculator_annotations,
    final_answer,
    reference_answer,
)
from agentfly_envs.tasks.hotpotqa import HotpotQATasks, supporting_titles

__all__ = [
    "TASKS",
    "ArithmeticTasks",
    "CodeProblem",
    "CodeTestTasks",
    "GSM8KTasks",
    "GoldenSolution",
    "HotpotQATasks",
    "MathWordProblems",
    "Row",
    "TaskSource",
    "calculator_annotations",
    "code_problem",
    "final_answer",
    "generate_problem",
    "get_task_source",
    "reference_answer",
    "supporting_titles",
]
