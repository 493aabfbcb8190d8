"""A run's envs and tasks: the configured env, checked against the env contract, the training and validation rows
(:func:`run_data`), and the TRL dataset built from them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import gymnasium as gym

import agentfly_envs  # noqa: F401  (registers the env ids)
from agentfly_envs.contract import check_env_contract, env_contract
from agentfly_envs.errors import (
    AgentflyError,
    EnvContractError,
    TaskFormatError,
    ToolDefinitionError,
)
from agentfly_envs.parsers import PARSERS
from agentfly_envs.runtime import RemoteEnvError
from agentfly_envs.tasks.files import load_rows
from agentfly_envs.tools.mcp_client import McpServerError
from agentfly_train.config.errors import ConfigError
from agentfly_train.config.schema import TrainConfig

if TYPE_CHECKING:
    from agentfly_envs.contract import TrainableEnv

ENV_VAL_SIZE = 256
"""Validation rows taken from an env's own task source (which may generate thousands) when ``data.val_size`` is
``null`` and no ``data.val_files`` are given."""


def takes_data_files(env_id: str, env_kwargs: Mapping[str, Any]) -> bool:
    """Whether the task source of ``gymnasium.make(env_id, **env_kwargs)`` reads its rows from ``data_files=``
    (GSM8K, HotpotQA, code tests, files), so the run's data files can replace its default (Hub) data."""
    import inspect

    from agentfly_envs.tasks import TASKS

    task = env_kwargs.get("task", gym.spec(env_id).kwargs.get("task"))
    return isinstance(task, str) and task in TASKS and "data_files" in inspect.signature(TASKS.get(task)).parameters


def env_kwargs(config: TrainConfig, validation: bool = False) -> dict[str, Any]:
    """``gymnasium.make`` keyword arguments for the configured agent (env :attr:`TrainConfig.env_id`).

    Without ``agent.env`` the env reads ``data.train_files`` (``data.val_files`` for ``validation``).
    ``agent.agent_type`` picks the parser, ``agent.max_turns`` the turn budget, ``agent.tools`` and
    ``agent.reward_name`` (or ``custom_reward_function``) replace the env's tools and reward, ``agent.turn_reward_name``
    adds a turn reward;
    ``agent.use_agent=false`` allows one turn and no tools. ``validation`` adds ``data.val_env_kwargs`` (used
    when no ``data.val_files`` are given).
    """
    agent = config.agent
    kwargs: dict[str, Any] = {
        **config.env_source_kwargs,
        **agent.env_kwargs,
        "parser": PARSERS.canonical(agent.agent_type),  # hf: the tool_calls parser
        "max_turns": agent.turns,
    }
    files = config.data.val_files if validation else config.data.train_files
    if agent.env is None or (files and takes_data_files(agent.env, kwargs)):  # the files' rows, never the Hub's
        kwargs["data_files"] = files
    if agent.tools is not None:
        kwargs["tools"] = tuple(agent.tools)
    if agent.tool_options:
        kwargs["tool_options"] = agent.tool_options
    if config.reward_name is not None:
        kwargs["reward"] = config.reward_name
    if agent.turn_reward_name is not None:
        kwargs["turn_reward"] = agent.turn_reward_name
    if not agent.use_agent:
        kwargs["tools"] = ()
    if validation and not config.data.val_files:
        kwargs.update(config.data.val_env_kwargs)
    return kwargs


def make_env(config: TrainConfig, validation: bool = False) -> gym.Env:
    """The configured env (:func:`env_kwargs`), checked to have what the trainer reads of it
    (:func:`~agentfly_envs.contract.check_env_contract`).

    Raises:
        ConfigError: the env cannot be built from the configuration or its data, or lacks a member of the env
            contract (one line, naming the key).
    """
    key = "data.val_files" if validation else "data.train_files"
    try:
        env = gym.make(config.env_id, **env_kwargs(config, validation))
    except (ToolDefinitionError, McpServerError) as error:  # a tool function, or an MCP server, of agent.tools
        raise ConfigError(f"agent.tools: {_one_line(error)}") from None
    except (AgentflyError, RemoteEnvError, ImportError) as error:  # also a server or a module that is not there
        where = key if config.agent.env is None else f"agent.env={config.agent.env}"
        raise ConfigError(f"{where}: {_one_line(error)}") from None
    except (TypeError, ValueError) as error:
        raise ConfigError(f"cannot build {config.env_id} from agent.* / agent.env_kwargs: {_one_line(error)}") from None
    try:
        check_env_contract(env)
    except EnvContractError as error:
        env.close()
        raise ConfigError(f"agent.env={config.env_id}: {error}") from None
    return env


def _one_line(error: Exception) -> str:
    return " ".join(str(error).split())


def train_rows(config: TrainConfig, env: gym.Env) -> list[dict[str, Any]]:
    """Training rows: from ``data.train_files``, else the env's own task source (``data.train_size`` max).

    Raises:
        ConfigError: a file cannot be read, has no rows, or a row lacks a field the task needs.
    """
    try:
        return task_rows(env, config.data.train_files, config.data.train_size)
    except AgentflyError as error:
        raise ConfigError(f"data.train_files: {_one_line(error)}") from None


def val_rows(config: TrainConfig, env: gym.Env | None) -> list[dict[str, Any]]:
    """Validation rows: from ``data.val_files``, else the task source of ``env`` (made with
    ``env_kwargs(config, validation=True)``; none without ``agent.env``), at most ``data.val_size`` of them
    (``null``: every row of the files, or :data:`ENV_VAL_SIZE` of the env's own tasks); ``data.val_size=0``
    disables validation.

    Raises:
        ConfigError: as :func:`train_rows`, for ``data.val_files``.
    """
    if env is None or config.data.val_size == 0:
        return []
    # without files, an env's own (maybe generated) tasks: ENV_VAL_SIZE of them when data.val_size is null
    size = ENV_VAL_SIZE if config.data.val_size is None and not config.data.val_files else config.data.val_size
    try:
        return task_rows(env, config.data.val_files, size)
    except AgentflyError as error:
        raise ConfigError(f"data.val_files: {_one_line(error)}") from None


def has_validation(config: TrainConfig) -> bool:
    """Whether the run validates: it has validation files, or an env whose own task source serves them. An env that
    reads the run's data files (GSM8K, HotpotQA, code tests) and got ``data.train_files`` validates on
    ``data.val_files`` only: its own default data is on the Hub, which a run with its own files never asks."""
    if config.data.val_size == 0:
        return False
    return bool(config.data.val_files) or (config.agent.env is not None and not validates_on_files_only(config))


def validates_on_files_only(config: TrainConfig) -> bool:
    """Whether ``agent.env`` reads the run's ``data.train_files``, so that only ``data.val_files`` can serve its
    validation rows (:func:`has_validation`)."""
    env_id = config.agent.env
    return env_id is not None and bool(config.data.train_files) and takes_data_files(env_id, env_kwargs(config, True))


def check_search_backend(config: TrainConfig, rows: list[dict[str, Any]]) -> None:
    """A search tool on its default backend (the row's own ``context`` paragraphs) needs rows that have them.

    Raises:
        ConfigError: the rows have no ``context`` and the tool has no corpus or URL; says which option to set.
    """
    options = config.agent.tool_options
    for tool in config.agent.tools or ():
        if tool not in ("search", "google_search") or options.get(tool, {}).get("backend", "context") != "context":
            continue
        if rows and "context" not in rows[0]:
            raise ConfigError(
                f"agent.tools has {tool}, whose default backend searches each row's 'context' paragraphs, but the "
                f"rows have no 'context' field: set agent.tool_options={{{tool}: {{backend: bm25, corpus_file: "
                f"FILE.jsonl}}}} or {{{tool}: {{backend: http, url: URL}}}}"
            )


@dataclass
class RunData:
    """A run's tasks.

    Attributes:
        env: The training env (open: the SFT warm start plays its golden episodes; the caller closes it).
        train: Training rows.
        val: Validation rows (empty: no validation).
        env_kwargs: The keyword arguments it was made with (:func:`env_kwargs`), those of the rollouts' envs.
        notes: What the run's log should say of them (one line each).
    """

    env: gym.Env
    train: list[dict[str, Any]]
    val: list[dict[str, Any]]
    env_kwargs: dict[str, Any]
    notes: list[str] = field(default_factory=list)

    @property
    def contract(self) -> TrainableEnv:
        """The training env's members beyond Gymnasium's API (:func:`~agentfly_envs.contract.env_contract`)."""
        return env_contract(self.env)


def run_data(config: TrainConfig) -> RunData:
    """The training env and the training and validation rows, checked as a run needs them.

    Raises:
        ConfigError: no training tasks, unreadable data (:func:`train_rows`, :func:`val_rows`), a search tool
            without its corpus (:func:`check_search_backend`), or fewer rows than ``data.train_batch_size``.
    """
    if config.agent.env is None and not config.data.train_files:
        raise ConfigError("no training tasks: set data.train_files, or agent.env to an env with its own tasks")
    env = make_env(config)
    val_env = make_env(config, validation=True) if has_validation(config) else None
    train, val = train_rows(config, env), val_rows(config, val_env)
    if val_env is not None:
        val_env.close()
    check_search_backend(config, train)
    if len(train) < config.data.train_batch_size:
        # TRL's sampler would yield no full batch and Trainer.train() would stop at step 0 without a word.
        raise ConfigError(
            f"data.train_batch_size={config.data.train_batch_size} prompts per step, but there are only "
            f"{len(train)} training rows: lower data.train_batch_size or give more rows"
        )
    notes = []
    if not config.data.val_files and config.data.val_size != 0 and validates_on_files_only(config):
        notes.append(
            f"no validation: agent.env={config.agent.env} reads data.train_files, and its own data would come from "
            "the Hub; set data.val_files to validate"
        )
    return RunData(env, train, val, env_kwargs(config), notes)


def task_rows(env: gym.Env, files: Sequence[str] | None, limit: int | None) -> list[dict[str, Any]]:
    """The rows of ``files`` (as :func:`file_task_rows` reads and checks them) or, with no files, those of the env's
    own task source, in order; at most ``limit`` (``None``: all).

    Raises:
        TaskFormatError, DataUnavailableError: as :func:`file_task_rows`.
    """
    tasks = env_contract(env).tasks
    if not files:
        return [dict(tasks.row(index)) for index in range(len(tasks) if limit is None else min(limit, len(tasks)))]
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
    return task_rows(env, files, limit)
