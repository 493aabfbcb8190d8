"""Task sources: where an env's tasks come from (``gsm8k`` and ``hotpotqa`` from the Hub or files,
``code_tests`` (MBPP, HumanEval-style) likewise, ``files`` any question/answer or code rows, ``arithmetic``
generated, ``textworld_express``, ``scienceworld`` and ``textarena`` the games of interactive worlds, ``miniwob``
web pages, ``maze`` generated mazes)."""

from agentfly_envs.tasks.arithmetic import ArithmeticTasks, generate_problem
from agentfly_envs.tasks.base import TASKS, GoldenSolution, Row, TaskSource, get_task_source
from agentfly_envs.tasks.code import CodeProblem, CodeTestTasks, code_golden, code_problem
from agentfly_envs.tasks.generic import FileTasks, question_field
from agentfly_envs.tasks.gsm8k import (
    GSM8KTasks,
    MathWordProblems,
    calculator_annotations,
    final_answer,
    reference_answer,
)
from agentfly_envs.tasks.hotpotqa import HotpotQATasks, supporting_titles
from agentfly_envs.tasks.maze import MazeTasks
from agentfly_envs.tasks.miniwob import MiniWoBTasks
from agentfly_envs.tasks.science_world import ScienceWorldTasks
from agentfly_envs.tasks.text_arena import TextArenaTasks
from agentfly_envs.tasks.textworld_express import TextWorldExpressTasks

__all__ = [
    "TASKS",
    "ArithmeticTasks",
    "CodeProblem",
    "CodeTestTasks",
    "FileTasks",
    "GSM8KTasks",
    "GoldenSolution",
    "HotpotQATasks",
    "MathWordProblems",
    "MazeTasks",
    "MiniWoBTasks",
    "Row",
    "ScienceWorldTasks",
    "TaskSource",
    "TextArenaTasks",
    "TextWorldExpressTasks",
    "calculator_annotations",
    "code_golden",
    "code_problem",
    "final_answer",
    "generate_problem",
    "get_task_source",
    "question_field",
    "reference_answer",
    "supporting_titles",
]
