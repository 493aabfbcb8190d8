"""Procedurally generated multi-step arithmetic word problems, in GSM8K format.

Row ``i`` is a pure function of ``(seed, level, i)``, so the task set needs no data, is the same on
every machine, and ``reset(options={"index": i})`` is reproducible. Each problem tracks one
quantity through a chain of operations that keep it a positive integer; the ``answer`` field is a
GSM8K-style solution with ``<<expression=value>>`` annotations and ``#### N``, so rewards and golden
demonstrations work exactly as for GSM8K.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from agentfly_envs.errors import TaskFormatError
from agentfly_envs.tasks.base import TASKS, Row
from agentfly_envs.tasks.gsm8k import MathWordProblems


@dataclass(frozen=True)
class Level:
    """Difficulty of generated problems.

    Attributes:
        min_steps: Fewest operations after the opening quantity.
        max_steps: Most operations after the opening quantity.
        max_operand: Largest number an operation introduces.
        max_value: Largest value the tracked quantity may reach.
    """

    min_steps: int
    max_steps: int
    max_operand: int
    max_value: int


LEVELS = {
    "easy": Level(min_steps=1, max_steps=2, max_operand=20, max_value=200),
    "medium": Level(min_steps=3, max_steps=4, max_operand=100, max_value=5_000),
    "hard": Level(min_steps=5, max_steps=6, max_operand=1_000, max_value=200_000),
    "single": Level(min_steps=0, max_steps=0, max_operand=9, max_value=100),
}

_NAMES = (
    "Ava", "Ben", "Chloe", "Diego", "Emma", "Farah", "Gus", "Hana", "Ivan", "Jade", "Kofi", "Lena",
    "Mateo", "Nia", "Omar", "Priya", "Quinn", "Rosa", "Sami", "Tariq", "Uma", "Vera", "Wen", "Zoe",
)  # fmt: skip
_ITEMS = (
    "apples", "marbles", "stickers", "pencils", "cookies", "stamps", "seashells", "books", "coins",
    "cards", "beads", "eggs",
)  # fmt: skip

Step = tuple[str, str, int]
"""(sentence of the problem, calculator expression, new value)."""


def _gain(rng: np.random.Generator, x: int, level: Level, who: str, item: str) -> Step | None:
    b = int(rng.integers(2, level.max_operand + 1))
    return f"{who} then gets {b} more {item}.", f"{x}+{b}", x + b


def _lose(rng: np.random.Generator, x: int, level: Level, who: str, item: str) -> Step | None:
    if x < 3:
        return None
    b = int(rng.integers(1, min(x - 1, level.max_operand) + 1))
    return f"{who} gives {b} {item} to a friend.", f"{x}-{b}", x - b


def _gain_groups(rng: np.random.Generator, x: int, level: Level, who: str, item: str) -> Step | None:
    m, n = int(rng.integers(2, 10)), int(rng.integers(2, min(level.max_operand, 25) + 1))
    return f"{who} buys {m} packs with {n} {item} in each pack.", f"{x}+{m}*{n}", x + m * n


def _multiply(rng: np.random.Generator, x: int, level: Level, who: str, item: str) -> Step | None:
    k = int(rng.integers(2, 6))
    return f"Over the next month, {who} ends up with {k} times as many {item}.", f"{x}*{k}", x * k


def _share(rng: np.random.Generator, x: int, level: Level, who: str, item: str) -> Step | None:
    divisors = [k for k in range(2, 10) if x % k == 0]
    if not divisors:
        return None
    k = divisors[int(rng.integers(len(divisors)))]
    return f"{who} splits the {item} equally into {k} bags and keeps just one bag.", f"{x}/{k}", x // k


_OPERATIONS: tuple[Callable[..., Step | None], ...] = (_gain, _lose, _gain_groups, _multiply, _share)


def generate_problem(seed: int, level: str, index: int) -> Row:
    """Generates problem ``index`` of the task set ``(seed, level)`` as a GSM8K-format row.

    Args:
        seed: Task-set seed.
        level: One of ``LEVELS`` ("easy", "medium", "hard", "single").
        index: Problem number, >= 0.

    Returns:
        ``{"question": str, "answer": str (annotated solution ending "#### N"), "level": str, "index": int}``.

    Example:
        >>> row = generate_problem(seed=0, level="easy", index=3)
        >>> row["answer"].splitlines()[-1].startswith("####")
        True
    """
    spec = LEVELS[level]
    rng = np.random.default_rng([seed, list(LEVELS).index(level), index])
    who, item = _NAMES[int(rng.integers(len(_NAMES)))], _ITEMS[int(rng.integers(len(_ITEMS)))]
    m, n = int(rng.integers(2, 10)), int(rng.integers(2, min(spec.max_operand, 25) + 1))
    sentences = [f"{who} has {m} boxes with {n} {item} in each box."]
    solution = [f"{who} starts with {m}*{n} = <<{m}*{n}={m * n}>>{m * n} {item}."]
    x = m * n
    for _ in range(int(rng.integers(spec.min_steps, spec.max_steps + 1))):
        order = rng.permutation(len(_OPERATIONS))
        for op_index in order:
            step = _OPERATIONS[op_index](rng, x, spec, who, item)
            if step is not None and 0 < step[2] <= spec.max_value:
                break
        else:  # no operation fits; the chain simply ends here
            break
        sentence, expression, x = step
        sentences.append(sentence)
        solution.append(f"Now {who} has {expression} = <<{expression}={x}>>{x} {item}.")
    sentences.append(f"How many {item} does {who} have now?")
    solution.append(f"#### {x}")
    return {"question": " ".join(sentences), "answer": "\n".join(solution), "level": level, "index": index}


@TASKS.register("arithmetic")
class ArithmeticTasks(MathWordProblems):
    """Generated multi-step arithmetic word problems with exact integer answers.

    Args:
        level: "easy" (1-2 operations, numbers up to 20), "medium" (3-4, up to 100), "hard" (5-6, up to 1000),
            or "single" (one multiplication of two digits: the smallest task, for smoke tests and the quickstart).
        num_tasks: Size of the task set addressed by ``options={"index": i}`` and drawn from on reset.
        task_seed: Seed of the task set (not of the env's episode RNG).
    """

    def __init__(self, level: str = "medium", num_tasks: int = 10_000, task_seed: int = 0) -> None:
        if level not in LEVELS:
            raise TaskFormatError(f"unknown arithmetic level {level!r}; choose one of {list(LEVELS)}")
        if num_tasks < 1:
            raise TaskFormatError(f"num_tasks must be >= 1, got {num_tasks}")
        self.level, self.num_tasks, self.task_seed = level, num_tasks, task_seed

    def __len__(self) -> int:
        return self.num_tasks

    def row(self, index: int) -> Row:
        return generate_problem(self.task_seed, self.level, index)
