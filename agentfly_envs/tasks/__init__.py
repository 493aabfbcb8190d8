"""Task sources: where an env's tasks come from (``gsm8k`` from the Hub or files, ``arithmetic`` generated)."""

from agentfly_envs.tasks.arithmetic import ArithmeticTasks, generate_problem
from agentfly_envs.tasks.base import TASKS, GoldenSolution, Row, TaskSource, get_task_source
from agentfly_envs.tasks.gsm8k import GSM8KTasks, MathWordProblems, calculator_annotations, final_answer

__all__ = [
    "TASKS",
    "ArithmeticTasks",
    "GSM8KTasks",
    "GoldenSolution",
    "MathWordProblems",
    "Row",
    "TaskSource",
    "calculator_annotations",
    "final_answer",
    "generate_problem",
    "get_task_source",
]
