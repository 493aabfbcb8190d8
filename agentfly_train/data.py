"""Task rows for training and validation, and the TRL dataset built from them."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym

from agentfly_envs.errors import AgentflyError, TaskFormatError
from agentfly_envs.tasks.files import load_rows


def env_task_rows(env: gym.Env, limit: int | None) -> list[dict[str, Any]]:
    """The first ``limit`` rows (all when ``None``) of the env's own task source, in order."""
    tasks = env.unwrapped.tasks
    count = len(tasks) if limit is None else min(limit, len(tasks))
    return [dict(tasks.row(index)) for index in range(count)]


def file_task_rows(files: Sequence[str], env: gym.Env, limit: int | None) -> list[dict[str, Any]]:
    """Rows from JSON list / JSONL / parquet files, checked against the env's task format.

    Args:
        files: Local data files.
        env: The env the rows are for (its task source names the required fields).
        limit: Keep at most this many rows (``None``: all).

    Raises:
        TaskFormatError: a row misses a field the task needs; the message names the file, row and field.
    """
    tasks = env.unwrapped.tasks
    dataset = load_rows("", None, "train", list(files), required_fields=tasks.required_fields)
    count = len(dataset) if limit is None else min(limit, len(dataset))
    rows = []
    for index in range(count):
        row = dict(dataset[index])
        try:
            tasks.validate(row)
        except AgentflyError as error:
            raise TaskFormatError(f"{list(files)} row {index}: {error}") from None
        rows.append(row)
    if not rows:
        raise TaskFormatError(f"no rows in {list(files)}")
    return rows


def trl_dataset(rows: Sequence[Mapping[str, Any]], prompts: Sequence[str]) -> Any:
    """The ``datasets.Dataset`` the trainer iterates: ``prompt`` (rendered opening, for TRL's logs) and
    ``task`` (the row as JSON, since rows of one file may differ in their fields)."""
    from datasets import Dataset

    return Dataset.from_dict({"prompt": list(prompts), "task": [json.dumps(dict(row), default=str) for row in rows]})
