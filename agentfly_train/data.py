"""Task rows for training and validation, and the TRL dataset built from them."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym

from agentfly_envs.contract import env_contract
from agentfly_envs.errors import AgentflyError, TaskFormatError
from agentfly_envs.tasks.files import load_rows


def takes_data_files(env_id: str, env_kwargs: Mapping[str, Any]) -> bool:
    """Whether the task source of ``gymnasium.make(env_id, **env_kwargs)`` reads its rows from ``data_files=``
    (GSM8K, HotpotQA, code tests, files), so the run's data files can replace its default (Hub) data."""
    import inspect

    from agentfly_envs.tasks import TASKS

    task = env_kwargs.get("task", gym.spec(env_id).kwargs.get("task"))
    return isinstance(task, str) and task in TASKS and "data_files" in inspect.signature(TASKS.get(task)).parameters


def env_task_rows(env: gym.Env, limit: int | None) -> list[dict[str, Any]]:
    """The first ``limit`` rows (all when ``None``) of the env's own task source, in order."""
    tasks = env_contract(env).tasks
    count = len(tasks) if limit is None else min(limit, len(tasks))
    return [dict(tasks.row(index)) for index in range(count)]


def file_task_rows(files: Sequence[str], env: gym.Env, limit: int | None) -> list[dict[str, Any]]:
    """Rows from JSON list / JSONL / parquet files, every one checked against the env's task format.

    Every row of every file is checked (``limit`` only cuts what is returned), so a bad row fails the run
    before the model loads. A field a row leaves out is absent from it (``datasets`` fills it with ``None``).

    Args:
        files: Local data files.
        env: The env the rows are for (its task source names the required fields).
        limit: Return at most this many rows (``None``: all).

    Raises:
        TaskFormatError: a row misses a field the task needs; the message names the file, the row (1-based)
            and the field.
        DataUnavailableError: a file cannot be read (for JSON, the message names the line), or all are empty.
    """
    tasks = env_contract(env).tasks
    rows = []
    for name in files:
        dataset = load_rows(
            "",
            None,
            "train",
            [name],
            required_fields=(),
            offline_hint="data.train_files and data.val_files take JSON-list, JSONL or parquet files of rows",
        )
        for index in range(len(dataset)):
            row = {key: value for key, value in dataset[index].items() if value is not None}
            try:
                tasks.validate(row)
            except AgentflyError as error:
                raise TaskFormatError(f"{name} row {index + 1} (1-based): {error}") from None
            rows.append(row)
    return rows if limit is None else rows[:limit]


class PromptColumn:
    """A dataset transform that adds ``prompt`` (``render_prompt(row)``) to each batch of ``task`` rows read.

    ``datasets`` fingerprints a transform by pickling it; the renderer (a tokenizer, envs) is neither worth
    serialising nor picklable, so the transform pickles as a token unique to this instance.
    """

    def __init__(self, render_prompt: Callable[[dict[str, Any]], str]) -> None:
        self.render_prompt = render_prompt
        self.token = uuid.uuid4().hex

    def __call__(self, batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
        return {**batch, "prompt": [self.render_prompt(json.loads(task)) for task in batch["task"]]}

    def __reduce__(self) -> tuple[Any, ...]:
        return (str, (self.token,))


def trl_dataset(rows: Sequence[Mapping[str, Any]], render_prompt: Callable[[dict[str, Any]], str]) -> Any:
    """The ``datasets.Dataset`` the trainer iterates: ``task`` (the row as JSON, since rows of one file may differ
    in their fields) and ``prompt`` (``render_prompt(row)``: the rendered opening, for TRL's logs).

    ``prompt`` is rendered when a row is read (:class:`PromptColumn`), so a run renders the rows it samples, not
    every row of a large task set at start-up.
    """
    from datasets import Dataset

    tasks = Dataset.from_dict({"task": [json.dumps(dict(row), default=str) for row in rows]})
    return tasks.with_transform(PromptColumn(render_prompt))
