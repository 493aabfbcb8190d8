"""Building a run's parts from its configuration: envs and their data, the chat codec, the env pool and rollout
driver, the generation backend and the trainer, and a whole run ready to train (:func:`prepare_run`).
``train.run``, ``evaluate`` and the dry run build with these; this is the only module that reads the whole
:class:`~agentfly_train.config.schema.TrainConfig` on a run's way, every other part takes its own sections."""

from __future__ import annotations

import functools
import json
import os
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym

import agentfly_envs  # noqa: F401  (registers the env ids)
from agentfly_envs.contract import check_env_contract, env_contract
from agentfly_envs.errors import AgentflyError, EnvContractError, ToolDefinitionError
from agentfly_envs.runtime import ENV_RUNTIMES, EnvPool, PoolSettings, RemoteEnvError
from agentfly_train.config.errors import ConfigError
from agentfly_train.config.schema import AGENT_TYPES, TrainConfig, TrainerConfig
from agentfly_train.data import env_task_rows, file_task_rows, takes_data_files, trl_dataset
from agentfly_train.generation.base import GENERATION_BACKENDS, SamplingParams
from agentfly_train.rollout import AgentRollout, ChatCodec, RolloutBudgets
from agentfly_train.run_claim import RunLock, claim_run_dir
from agentfly_train.run_dir import REFERENCE_DIR, RUN_CONFIG_FILE, RunResult
from agentfly_train.startup_episode import play_startup_episode
from agentfly_train.tiny_policies import TINY_POLICIES

ENV_VAL_SIZE = 256
"""Validation rows taken from an env's own task source (which may generate thousands) when ``data.val_size`` is
``null`` and no ``data.val_files`` are given."""


def env_kwargs(config: TrainConfig, validation: bool = False) -> dict[str, Any]:
    """``gymnasium.make`` keyword arguments for the configured agent (env :attr:`TrainConfig.env_id`).

    Without ``agent.env`` the env reads ``data.train_files`` (``data.val_files`` for ``validation``).
    ``agent.agent_type`` picks the parser, ``agent.max_turns`` the turn budget, ``agent.tools`` and
    ``agent.reward_name`` (or ``custom_reward_function``) replace the env's tools and reward;
    ``agent.use_agent=false`` allows one turn and no tools. ``validation`` adds ``data.val_env_kwargs`` (used
    when no ``data.val_files`` are given).
    """
    agent = config.agent
    kwargs: dict[str, Any] = {
        **config.env_source_kwargs,
        **agent.env_kwargs,
        "parser": AGENT_TYPES[agent.agent_type],
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
    if not agent.use_agent:
        kwargs["tools"] = ()
    if validation and not config.data.val_files:
        kwargs.update(config.data.val_env_kwargs)
    return kwargs


def make_codec(config: TrainConfig, tokenizer: Any, env: gym.Env, sample_task: dict[str, Any]) -> ChatCodec:
    """The chat codec for the env's tools and format, checked on a sample episode (the task's golden episode, after a
    call of the env's first tool where it calls none; :func:`~agentfly_train.chat_templates.choice.choose_codec`).

    A run whose env shows screenshots gets the policy's image inputs (:func:`~agentfly_train.models.policy_images`).

    Raises:
        ConfigError: the template cannot serve the run (one line naming ``agent.template`` or ``agent.agent_type``),
            or the task's prompt and the completion budget do not fit ``rollout.max_model_len``, or the env
            shows screenshots to a model that cannot see them, or the sample episode cannot be played
            (:func:`~agentfly_train.startup_episode.play_startup_episode`).
    """
    from agentfly_train.chat_templates.choice import choose_codec
    from agentfly_train.models import policy_images

    info, steps = play_startup_episode(
        env, config.env_id, sample_task, config.actor_rollout_ref.rollout.env_step_timeout
    )
    drop = config.agent.past_reasoning == "drop"
    codec = choose_codec(
        tokenizer,
        info["tools"],
        env_contract(env).parser,
        config.agent.chat_template_kwargs,
        info["messages"],
        steps,
        drop,
        images=policy_images(config, tokenizer),
    )
    rollout = config.actor_rollout_ref.rollout
    prompt = len(codec.prompt_ids(info["messages"]))
    if rollout.max_model_len is not None and prompt + rollout.response_length > rollout.max_model_len:
        raise ConfigError(
            f"actor_rollout_ref.rollout.max_model_len={rollout.max_model_len} cannot hold a prompt of the data "
            f"({prompt} tokens) and rollout.response_length={rollout.response_length}: raise max_model_len"
        )
    return codec


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
    except ToolDefinitionError as error:
        raise ConfigError(f"agent.tools: {error}") from None
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
        if config.data.train_files:
            return file_task_rows(config.data.train_files, env, config.data.train_size)
        return env_task_rows(env, config.data.train_size)
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
    try:
        if config.data.val_files:
            return file_task_rows(config.data.val_files, env, config.data.val_size)
        if config.data.val_size is None and not config.data.val_files:  # an env's own (maybe generated) tasks
            return env_task_rows(env, ENV_VAL_SIZE)
        return env_task_rows(env, config.data.val_size)
    except AgentflyError as error:
        raise ConfigError(f"data.val_files: {_one_line(error)}") from None


def has_validation(config: TrainConfig) -> bool:
    """Whether the run validates: it has validation files, or an env whose own task source serves them."""
    return config.data.val_size != 0 and (bool(config.data.val_files) or config.agent.env is not None)


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
    """

    env: gym.Env
    train: list[dict[str, Any]]
    val: list[dict[str, Any]]


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
    return RunData(env, train, val)


def env_pool(config: TrainConfig, kwargs: dict[str, Any]) -> EnvPool:
    """The envs of the rollouts, made with ``kwargs``, on the runtime ``actor_rollout_ref.rollout.env_runtime`` names
    (``local``: in this process; ``ray``: on ``env_workers`` Ray actors).

    Raises:
        ConfigError: the runtime cannot host them (e.g. the Ray cluster lacks, or cannot free within a while, the
            CPUs or resources the actors reserve).
    """
    rollout = config.actor_rollout_ref.rollout
    settings = PoolSettings(
        workers=rollout.env_workers,
        worker_cpus=rollout.env_worker_cpus,
        worker_resources=rollout.env_worker_resources,
        step_timeout=rollout.env_step_timeout,
        user_code=config.user_code,
    )
    try:
        return ENV_RUNTIMES.get(rollout.env_runtime).from_settings(config.env_id, kwargs, settings)
    except (ValueError, RemoteEnvError) as error:
        raise ConfigError(f"actor_rollout_ref.rollout.env_workers / env_worker_*: {error}") from None


def agent_rollout(config: TrainConfig, codec: ChatCodec, kwargs: dict[str, Any]) -> AgentRollout:
    """The rollout driver of the configured agent: an env pool made with ``kwargs`` (:func:`env_pool`), the
    budgets, training and validation sampling, and the env-stepping threads (with Ray envs, enough threads to wait on
    every env of every actor); the caller closes it (:meth:`~agentfly_train.rollout.AgentRollout.close`)."""
    pool = env_pool(config, kwargs)
    rollout = config.actor_rollout_ref.rollout
    threads = rollout.env_workers * pool.steps_per_worker  # with Ray envs, a thread for each env an actor steps
    return AgentRollout(
        pool=pool,
        codec=codec,
        budgets=RolloutBudgets(
            max_turns=config.agent.turns,
            max_tokens_per_turn=config.agent.max_tokens_per_turn,
            response_length=rollout.response_length,
            max_images=config.agent.max_images,
        ),
        train_params=SamplingParams(rollout.temperature, rollout.top_p, rollout.top_k),
        val_params=SamplingParams(rollout.val_temperature, rollout.top_p, rollout.top_k),
        executor=ThreadPoolExecutor(max_workers=threads),
        async_episodes=GENERATION_BACKENDS.async_episodes(config.actor_rollout_ref.rollout, config.agent.backend),
        retries=rollout.retries,
        max_infra_failure_rate=rollout.max_infra_failure_rate,
    )


def make_trainer(
    config: TrainConfig,
    args: Any,
    model: Any,
    tokenizer: Any,
    codec: ChatCodec,
    train_tasks: list[dict[str, Any]],
    val_tasks: list[dict[str, Any]],
    world_size: int,
) -> Any:
    """The :class:`~agentfly_train.trainer.AgentGRPOTrainer` of a run: its rollout port (the rollout driver over a
    pool of training envs and the generation backend, :class:`~agentfly_train.trainer.port.RolloutPort`), the
    algorithm's settings, the KL controller (with ``use_kl_in_reward``), the critic
    (with an estimator that trains one, ``gae``; built now, so ``critic.model.path=null`` copies the policy as it
    is after the warm start; the port's backend is built by the trainer on its policy,
    :func:`~agentfly_train.generation.build_backend`), and the rollout schedule
    (``async_training.enable``: :func:`~agentfly_train.trainer.schedules.build_schedule`).

    Args:
        config: The validated configuration.
        args: Its ``trl.GRPOConfig`` (:func:`~agentfly_train.trl_args.grpo_config`).
        model: The policy.
        tokenizer: Its tokenizer.
        codec: The chat codec (:func:`make_codec`).
        train_tasks: Training rows.
        val_tasks: Validation rows.
        world_size: Processes in the launch.
    """
    from agentfly_train.algorithms import get_advantage_estimator, make_kl_controller
    from agentfly_train.critic import build_value_model
    from agentfly_train.generation import build_backend
    from agentfly_train.models import lora_config
    from agentfly_train.trainer import AgentGRPOTrainer
    from agentfly_train.trainer.port import RolloutPort
    from agentfly_train.trainer.schedules import build_schedule
    from agentfly_train.trl_args import critic_settings, rl_settings

    agent = agent_rollout(config, codec, env_kwargs(config))
    critic_model = critic = kl_ctrl = None
    if get_advantage_estimator(config.algorithm.adv_estimator).trains_critic:
        trust_remote_code = config.actor_rollout_ref.model.trust_remote_code
        critic_model = build_value_model(config.critic.model.path, model, trust_remote_code)
        critic = critic_settings(config, world_size)
    if config.algorithm.use_kl_in_reward:
        kl = config.algorithm.kl_ctrl
        kl_ctrl = make_kl_controller(kl.type, kl.kl_coef, kl.target_kl, kl.horizon)
    return AgentGRPOTrainer(
        port=RolloutPort(agent, functools.partial(build_backend, config)),
        rl=rl_settings(config),
        kl_ctrl=kl_ctrl,
        critic_model=critic_model,
        critic_settings=critic,
        val_rows=val_tasks,
        val_batch_size=config.data.val_batch_size,
        log_val_generations=config.trainer.log_val_generations,
        log_train_generations=config.trainer.log_train_generations,
        model=model,
        args=args,
        train_dataset=trl_dataset(
            train_tasks, lambda row: codec.render(_opening(agent.pool, row), add_generation_prompt=True)
        ),
        processing_class=tokenizer,
        peft_config=lora_config(config),
        schedule=build_schedule(config, train_tasks),
    )


def _opening(pool: Any, row: dict[str, Any]) -> list[dict[str, Any]]:
    _, info = pool.take(1)[0].reset(options={"task": row})
    return info["messages"]


@dataclass
class PreparedRun:
    """A run ready to train (:func:`prepare_run`).

    Attributes:
        trainer: Its :class:`~agentfly_train.trainer.AgentGRPOTrainer` (the caller closes it).
        settings: ``trainer.*``: the run directory, validation and checkpoint cadence of the training loop.
        checkpoint: The checkpoint to resume from (``None``: a fresh run).
        result: The run's result so far (the warm start's loss).
        lock: The run directory's lock, held by the launch's main process (the caller releases it when the run
            ends).
    """

    trainer: Any
    settings: TrainerConfig
    checkpoint: str | None
    result: RunResult
    lock: RunLock


def prepare_run(config: TrainConfig) -> PreparedRun:
    """Everything of a run before RL: the run directory claimed (locked, and holding no other run:
    :func:`~agentfly_train.run_claim.claim_run_dir`), its data (checked first: missing or malformed data fails in
    seconds, before transformers and TRL load), the launch checked against ``trainer.nnodes * n_gpus_per_node``,
    TRL's arguments (bad sizes fail before a model loads), the checkpoint to resume from, the run's ``config.json``,
    the policy and chat codec, the SFT warm start (``sft.enable``, on a fresh run), the pinned reference model
    (:func:`pin_reference`) and the trainer (:func:`make_trainer`). The directory stays locked until the caller
    releases :attr:`PreparedRun.lock`, or until this raises.

    Raises:
        ConfigError: the configuration cannot serve the run (one line naming the key).
    """
    from agentfly_train.config.loading import load_user_code

    load_user_code(config)  # loaded already where the configuration was read; not on a Ray Train worker
    lock = claim_run_dir(config.trainer, json.loads(json.dumps(asdict(config))))  # as its config.json holds it
    try:
        return _prepare_claimed_run(config, lock)
    except BaseException:
        lock.release()
        raise


def _prepare_claimed_run(config: TrainConfig, lock: RunLock) -> PreparedRun:
    """:func:`prepare_run` once the run directory is this run's."""
    from accelerate import PartialState
    from transformers import set_seed

    from agentfly_train.checkpoints import remove_leftovers, resume_checkpoint
    from agentfly_train.config.validation import ignored_settings
    from agentfly_train.devices import training_device
    from agentfly_train.generation.base import backend_of
    from agentfly_train.models import add_stop_tokens, load_policy
    from agentfly_train.trl_args import grpo_config

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # tools may fork after the tokenizer ran
    data = run_data(config)
    try:
        _quiet_libraries()
        device = training_device(config.trainer.device)
        world_size = PartialState(cpu=device == "cpu").num_processes
        _check_world(config.trainer, world_size, device)
        main_process = PartialState().is_main_process
        for note in ignored_settings(config, world_size) if main_process else []:
            print(f"note: {note}", file=sys.stderr)
        args = grpo_config(config, world_size, device)
        # With overwrite the main process has emptied the directory; the others may still see its checkpoints.
        fresh = config.trainer.overwrite and config.trainer.resume_mode == "auto"
        checkpoint, resume_line = (None, None) if fresh else resume_checkpoint(config.trainer)
        run_dir = Path(config.trainer.default_local_dir)
        if main_process:
            remove_leftovers(run_dir)
            if resume_line is not None:
                print(resume_line, file=sys.stderr)
            (run_dir / RUN_CONFIG_FILE).write_text(json.dumps(asdict(config), indent=2))
        set_seed(config.trainer.seed)
        run_dir.mkdir(parents=True, exist_ok=True)  # the other processes may get here before the main one made it
        backend_of(config).preflight(config)
        model, tokenizer = load_policy(config)
        codec = make_codec(config, tokenizer, data.env, data.train[0])
        add_stop_tokens(model, codec.stop_token_ids)
        if codec.note and main_process:
            print(f"note: {codec.note}", file=sys.stderr)
        result = RunResult(run_dir=str(run_dir))
        if config.sft.enable and checkpoint is None:
            model, result.sft_loss = _warm_start(config, model, tokenizer, codec, data, device == "cpu", args.bf16)
    finally:
        data.env.close()  # the rollouts make their own envs; a web env's browser goes with this one, also on error
    if args.beta and config.actor_rollout_ref.model.lora_rank == 0:
        pin_reference(model, run_dir, copy=config.sft.enable or config.model_path in TINY_POLICIES)
    trainer = make_trainer(config, args, model, tokenizer, codec, data.train, data.val, world_size)
    return PreparedRun(trainer, config.trainer, checkpoint, result, lock)


def _quiet_libraries() -> None:
    """No per-file progress bars from transformers (loading and saving shards) and datasets: the run's own
    progress bar and log lines are the output."""
    import datasets
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    datasets.disable_progress_bars()


def _check_world(trainer: TrainerConfig, world_size: int, device: str) -> None:
    expected = trainer.nnodes * max(trainer.n_gpus_per_node, 1)
    if device == "cuda" and expected != world_size:
        raise ConfigError(
            f"trainer.nnodes * trainer.n_gpus_per_node = {expected} but the launch has {world_size} processes; "
            "launch with accelerate launch --num_processes / --num_machines to match"
        )


def _warm_start(
    config: TrainConfig, model: Any, tokenizer: Any, codec: ChatCodec, data: RunData, use_cpu: bool, bf16: bool
) -> tuple[Any, float]:
    """The SFT warm start on the demonstrations of the first ``sft.num_demos`` training rows: (model, mean loss)."""
    from agentfly_train.sft import warm_start_on_demonstrations

    with tempfile.TemporaryDirectory() as scratch:
        return warm_start_on_demonstrations(
            model,
            tokenizer,
            data.env,
            codec,
            data.train[: config.sft.num_demos],
            config.sft,
            output_dir=scratch,
            use_cpu=use_cpu,
            seed=config.trainer.seed,
            bf16=bf16,
            max_images=config.agent.max_images,
        )


def pin_reference(model: Any, run_dir: Path, copy: bool) -> None:
    """Makes the reference model of the KL terms the policy as RL starts.

    TRL builds the reference from the path in the policy's config, which holds the weights before the SFT
    warm start (and no path at all for ``agentfly:tiny``). When either applies (``copy``), or a first run made
    one, the policy is saved once to ``<run dir>/reference`` (a resumed run keeps the first run's) and its config
    points there. With LoRA, TRL's reference is the base model with the adapter off, which needs no copy.
    """
    from accelerate import PartialState

    path = run_dir / REFERENCE_DIR
    if not (copy or path.is_dir()):
        return
    state = PartialState()
    if state.is_main_process and not (path / "config.json").is_file():
        model.save_pretrained(path)
    state.wait_for_everyone()
    model.config._name_or_path = str(path)
