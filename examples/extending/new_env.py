"""A new env: a task source that generates its tasks, registered as a Gymnasium id.

A task source owns the rows and says how to prompt for, score and solve them; the env (``ToolEnv``) adds the
tools, the parser and the reward by name. Importing this module registers both.
"""

from __future__ import annotations

from collections.abc import Sequence

import gymnasium as gym
import numpy as np

from agentfly_envs import GoldenSolution, TaskSource
from agentfly_envs.registration import ENTRY_POINT
from agentfly_envs.tasks import TASKS


@TASKS.register("minutes")
class MinutesTasks(TaskSource):
    """ "How many minutes are in H hours and M minutes?", generated from ``(task_seed, index)``.

    Args:
        num_tasks: How many tasks the env addresses by index and draws from on reset.
        task_seed: The seed of the task set.
    """

    required_fields = ("question", "answer")

    def __init__(self, num_tasks: int = 1_000, task_seed: int = 0) -> None:
        self.num_tasks, self.task_seed = num_tasks, task_seed

    def __len__(self) -> int:
        return self.num_tasks

    def row(self, index: int) -> dict:
        hours, minutes = (int(n) for n in np.random.default_rng([self.task_seed, index]).integers(1, 60, size=2))
        return {
            "question": f"How many minutes are in {hours} hours and {minutes} minutes?",
            "answer": str(hours * 60 + minutes),
            "expression": f"{hours}*60+{minutes}",
        }

    def system_prompt(self, answer_by_tool: bool, tools: Sequence[str]) -> str:
        finish = "call the answer tool" if answer_by_tool else "reply with the final answer as \\boxed{N}"
        return f"Convert durations to minutes. Use the calculator, then {finish}."

    def user_prompt(self, row: dict) -> str:
        return row["question"]

    def ground_truth(self, row: dict) -> str:
        return row["answer"]

    def golden(self, row: dict) -> GoldenSolution:
        return GoldenSolution(answer=row["answer"], expressions=(row["expression"],), results=(row["answer"],))


gym.register(
    id="myproject/Minutes-Calc",
    entry_point=ENTRY_POINT,  # agentfly_envs.core:ToolEnv
    kwargs={
        "task": "minutes",
        "tools": ("calculator",),
        "parser": "hermes",
        "reward": "math_reward_string_equal",
        "max_turns": 4,
    },
)
