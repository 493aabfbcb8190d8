"""A training run end to end: config -> model, envs, data -> (SFT warm start) -> RL -> validation."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym

import agentfly_envs  # noqa: F401  (registers the env ids)
from agentfly_envs.errors import AgentflyError
from agentfly_envs.runtime import EnvPool, LocalEnvPool, RayEnvPool, RemoteEnvError
from agentfly_envs.runtime.remote import MAX_CONCURRENT_STEPS
from agentfly_train.config import AGENT_TYPES, TINY_MODEL, ConfigError, TrainConfig, ignored_settings
from agentfly_train.data import env_task_rows, file_task_rows, takes_data_files, trl_dataset
from agentfly_train.generation import SamplingParams
from agentfly_train.rollout import ChatCodec, RolloutBudgets

RESULT_FILE = "result.json"
RUN_CONFIG_FILE = "config.json"
"""The run's resolved configuration in its run directory, written at start (``eval`` of the run's models reads it)."""
ENV_VAL_SIZE = 256
"""Validation rows taken from an env's own task source (which may generate thousands) when ``data.val_size`` is
``null`` and no ``data.val_files`` are given."""
REFERENCE_DIR = "reference"
"""The reference model of the KL terms in the run directory: the policy as RL starts (after the warm start)."""


def env_kwargs(config: TrainConfig, validation: bool = False) -> dict[str, Any]:
    """``gymnasium.make`` keyword arguments for the configured agent (env :attr:`TrainConfig.env_id`).

    Without ``agent.env`` the env reads ``data.train_files`` (``data.val_files`` for ``validation``).
    ``agent.agent_type`` picks the parser, ``agent.max_turns`` the turn budget, ``agent.tools`` and
    ``agent.reward_name`` replace the env's tools and reward; ``agent.use_agent=false`` allows one turn and
    no tools. ``validation`` adds ``data.val_env_kwargs`` (used when no ``data.val_files`` are given).
    """
    agent = config.agent
    kwargs: dict[str, Any] = {**agent.env_kwargs, "parser": AGENT_TYPES[agent.agent_type], "max_turns": agent.max_turns}
    files = config.data.val_files if validation else config.data.train_files
    if agent.env is None or (files and takes_data_files(agent.env, kwargs)):  # the files' rows, never the Hub's
        kwargs["data_files"] = files
    if agent.tools is not None:
        kwargs["tools"] = tuple(agent.tools)
    if agent.tool_options:
        kwargs["tool_options"] = agent.tool_options
    if agent.reward_name is not None:
        kwargs["reward"] = agent.reward_name
    if not agent.use_agent:
        kwargs.update(tools=(), max_turns=1)
    if validation and not config.data.val_files:
        kwargs.update(config.data.val_env_kwargs)
    return kwargs


def make_codec(config: TrainConfig, tokenizer: Any, env: gym.Env, sample_task: dict[str, Any]) -> ChatCodec:
    """The chat codec for the env's tools and format, checked to be prefix-preserving on a sample episode
    (the task's golden episode, or two generic turns when the task has no golden solution).

    Raises:
        TemplateError: the template rewrites earlier turns, so token-in/token-out rollouts are impossible.
    """
    _, info = env.reset(options={"task": sample_task})
    tools = info["tools"] if config.agent.agent_type == "hf" and info["tools"] else None
    codec = ChatCodec(tokenizer, tools)
    try:
        actions = env.unwrapped.golden_actions()
    except AgentflyError:
        actions = ["Let me think about it.", "The answer is 42."]
    turns = []
    for action in actions:
        observation, _, terminated, truncated, _ = env.step(action)
        turns.append(action)
        if terminated or truncated:
            break
        turns.append(observation)
    codec.check_prefix_preserving(info["messages"], turns)
    return codec


def make_env(config: TrainConfig, validation: bool = False) -> gym.Env:
    """The configured env (:func:`env_kwargs`).

    Raises:
        ConfigError: the env cannot be built from the configuration or its data (one line, naming the key).
    """
    key = "data.val_files" if validation else "data.train_files"
    try:
        return gym.make(config.env_id, **env_kwargs(config, validation))
    except AgentflyError as error:
        where = key if config.agent.env is None else f"agent.env={config.agent.env}"
        raise ConfigError(f"{where}: {_one_line(error)}") from None
    except (TypeError, ValueError) as error:
        raise ConfigError(f"cannot build {config.env_id} from agent.* / agent.env_kwargs: {_one_line(error)}") from None


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


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C during training (or the validation and saving after it).

    Args:
        step: The (optimiser) step under way, 1-based.
    """

    def __init__(self, step: int) -> None:
        super().__init__(step)
        self.step = step


@dataclass
class RunResult:
    """What a run reports (also written to ``<run dir>/result.json``).

    Attributes:
        run_dir: The run directory.
        val_before: Validation metrics before RL (after the SFT warm start), if validated.
        val_after: Validation metrics after RL.
        sft_loss: Mean SFT warm-start loss, if it ran.
        steps: Optimiser steps taken (in total, across resumes).
        resumed_from: The checkpoint this run resumed from.
    """

    run_dir: str
    val_before: dict[str, float] = field(default_factory=dict)
    val_after: dict[str, float] = field(default_factory=dict)
    sft_loss: float | None = None
    steps: int = 0
    resumed_from: str | None = None


def env_pool(config: TrainConfig, kwargs: dict[str, Any]) -> EnvPool:
    """The envs of the rollouts, made with ``kwargs``: in this process, or on ``env_workers`` Ray actors
    (``actor_rollout_ref.rollout.env_runtime=ray``).

    Raises:
        ConfigError: the Ray cluster lacks, or cannot free within a while, the CPUs or resources the actors reserve.
    """
    rollout = config.actor_rollout_ref.rollout
    if rollout.env_runtime == "local":
        return LocalEnvPool(config.env_id, kwargs, step_timeout=rollout.env_step_timeout)
    try:
        return RayEnvPool(
            config.env_id,
            kwargs,
            num_workers=rollout.env_workers,
            worker_cpus=rollout.env_worker_cpus,
            worker_resources=rollout.env_worker_resources,
            step_timeout=rollout.env_step_timeout,
        )
    except (ValueError, RemoteEnvError) as error:
        raise ConfigError(f"actor_rollout_ref.rollout.env_workers / env_worker_*: {error}") from None


def agent_rollout(config: TrainConfig, codec: ChatCodec, kwargs: dict[str, Any]) -> Any:
    """The rollout engine's settings for the configured agent: an env pool made with ``kwargs`` (:func:`env_pool`),
    the budgets, training and validation sampling, and the env-stepping threads (shut down by the caller; with Ray
    envs, enough threads to wait on every env of every actor)."""
    from agentfly_train.trainer import AgentRollout

    rollout = config.actor_rollout_ref.rollout
    threads = rollout.env_workers * (MAX_CONCURRENT_STEPS if rollout.env_runtime == "ray" else 1)
    return AgentRollout(
        pool=env_pool(config, kwargs),
        codec=codec,
        budgets=RolloutBudgets(
            max_turns=config.agent.max_turns if config.agent.use_agent else 1,
            max_tokens_per_turn=config.agent.max_tokens_per_turn,
            response_length=rollout.response_length,
        ),
        train_params=SamplingParams(rollout.temperature, rollout.top_p, rollout.top_k),
        val_params=SamplingParams(rollout.val_temperature, rollout.top_p, rollout.top_k),
        executor=ThreadPoolExecutor(max_workers=threads),
        async_episodes=config.async_episodes,
    )


def resume_checkpoint(config: TrainConfig) -> tuple[str | None, str | None]:
    """The checkpoint to resume from, per ``trainer.resume_mode`` (``auto``: the newest complete checkpoint in
    ``trainer.default_local_dir``, :func:`~agentfly_train.checkpoints.newest_complete`), and the line that says
    which one it is and which newer ones were skipped, and why (``None``: a fresh run, nothing skipped).

    Raises:
        ConfigError: ``resume_path`` names a directory that is not a complete checkpoint.
    """
    from agentfly_train.checkpoints import checkpoint_problem, newest_complete, resume_note

    trainer = config.trainer
    if trainer.resume_mode == "disable":
        return None, None
    if trainer.resume_mode == "resume_path":
        path = Path(trainer.resume_from_path)
        problem = checkpoint_problem(path)
        if problem is not None:
            raise ConfigError(
                f"trainer.resume_from_path={str(path)!r} is not a complete checkpoint ({problem}): point it at a "
                "checkpoint-N directory whose manifest.json checks, or set trainer.resume_mode=auto to resume from "
                "the newest complete checkpoint in trainer.default_local_dir"
            )
        return str(path), f"resuming from {path}"
    chosen, skipped = newest_complete(trainer.default_local_dir)
    return (str(chosen) if chosen is not None else None), resume_note(chosen, skipped)


def _check_world(config: TrainConfig, world_size: int, device: str) -> None:
    expected = config.trainer.nnodes * max(config.trainer.n_gpus_per_node, 1)
    if device == "cuda" and expected != world_size:
        raise ConfigError(
            f"trainer.nnodes * trainer.n_gpus_per_node = {expected} but the launch has {world_size} processes; "
            "launch with accelerate launch --num_processes / --num_machines to match"
        )


def run(config: TrainConfig, show_progress: bool = True) -> RunResult:
    """Runs the configured job: load, optionally warm-start, validate, train with RL, validate.

    Args:
        config: A validated configuration (:func:`~agentfly_train.config.load_config`).
        show_progress: Draw the console progress bar.

    Returns:
        The :class:`RunResult` (also saved as ``result.json`` in the run directory).
    """
    from accelerate import PartialState
    from transformers import set_seed

    from agentfly_train.callbacks import AgentCallback
    from agentfly_train.checkpoints import remove_leftovers
    from agentfly_train.models import load_policy, training_device
    from agentfly_train.sft import warm_start_on_demonstrations
    from agentfly_train.trl_args import grpo_config

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # tools may fork after the tokenizer ran
    _quiet_libraries()
    device = training_device(config)
    world_size = PartialState(cpu=device == "cpu").num_processes
    _check_world(config, world_size, device)
    if PartialState().is_main_process:
        for note in ignored_settings(config, world_size):
            print(f"note: {note}", file=sys.stderr)
    args = grpo_config(config, world_size, device)  # fails on bad sizes before any model is loaded
    checkpoint, resume_line = resume_checkpoint(config)
    if PartialState().is_main_process:
        remove_leftovers(config.trainer.default_local_dir)
        if resume_line is not None:
            print(resume_line, file=sys.stderr)
    set_seed(config.trainer.seed)
    run_dir = Path(config.trainer.default_local_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / RUN_CONFIG_FILE).write_text(json.dumps(asdict(config), indent=2))

    if config.agent.env is None and not config.data.train_files:
        raise ConfigError("no training tasks: set data.train_files, or agent.env to an env with its own tasks")
    train_env = make_env(config)
    val_env = make_env(config, validation=True) if has_validation(config) else None
    train_tasks, val_tasks = train_rows(config, train_env), val_rows(config, val_env)
    check_search_backend(config, train_tasks)
    check_rollout_server(config)
    if len(train_tasks) < config.data.train_batch_size:
        # TRL's sampler would yield no full batch and Trainer.train() would stop at step 0 without a word.
        raise ConfigError(
            f"data.train_batch_size={config.data.train_batch_size} prompts per step, but there are only "
            f"{len(train_tasks)} training rows: lower data.train_batch_size or give more rows"
        )
    model, tokenizer = load_policy(config)
    codec = make_codec(config, tokenizer, train_env, train_tasks[0])
    result = RunResult(run_dir=str(run_dir))

    if config.sft.enable and checkpoint is None:
        with tempfile.TemporaryDirectory() as scratch:
            model, result.sft_loss = warm_start_on_demonstrations(
                model,
                tokenizer,
                train_env,
                codec,
                train_tasks[: config.sft.num_demos],
                config.sft,
                output_dir=scratch,
                use_cpu=device == "cpu",
                seed=config.trainer.seed,
                bf16=args.bf16,
            )
    train_env.close()
    if val_env is not None:
        val_env.close()
    if args.beta and config.actor_rollout_ref.model.lora_rank == 0:
        pin_reference(config, model, run_dir)

    trainer = make_trainer(config, args, model, tokenizer, codec, train_tasks, val_tasks, world_size)
    callback = AgentCallback(
        trainer,
        config.trainer.test_freq,
        config.trainer.val_before_train and bool(val_tasks),
        show_progress,
        config.trainer.max_ckpt_to_keep,
    )
    _replace_console_callbacks(trainer, callback)
    try:
        saved = _trainer_state(checkpoint) if checkpoint is not None else None
        if saved is not None and saved.global_step >= args.max_steps:
            # Killed after its last step: finish, train no more (Trainer.train() would take one more step).
            trainer._load_from_checkpoint(checkpoint)
            trainer.state = saved
            callback.metrics.keep(lambda record: not record.get("final"))
        else:
            trainer.train(resume_from_checkpoint=checkpoint)
        result.resumed_from = checkpoint
        result.steps = trainer.state.global_step
        history = callback.metrics.read()
        before = [r for r in history if r["step"] == 0 and "val/accuracy" in r]
        result.val_before = _val_metrics(before[0]) if before else {}
        if val_tasks:
            result.val_after = trainer.validate()
            if trainer.accelerator.is_main_process:
                callback.metrics.append(trainer.state.global_step, {"final": True, **result.val_after})
        if trainer.is_fsdp_enabled:  # final/ holds a whole model, whatever the checkpoints' sharding
            trainer.accelerator.state.fsdp_plugin.set_state_dict_type("FULL_STATE_DICT")
        trainer.save_model(str(run_dir / "final"))
    except KeyboardInterrupt:
        step = trainer.state.global_step + 1  # after the last step: validating or saving final/
        raise RunInterrupted(min(step, trainer.state.max_steps or step)) from None
    finally:
        trainer.agent.executor.shutdown()
        trainer.agent.pool.close()
    (run_dir / RESULT_FILE).write_text(json.dumps(asdict(result), indent=2))
    if PartialState().is_main_process:
        _write_report(run_dir)
    return result


def _quiet_libraries() -> None:
    """No per-file progress bars from transformers (loading and saving shards) and datasets: the run's own
    progress bar and log lines are the output."""
    import datasets
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    datasets.disable_progress_bars()


def _write_report(run_dir: Path) -> None:
    """``<run dir>/report.html``; a failure to build it is reported in one line, never fails the finished run."""
    from agentfly_train.report import build_report

    try:
        build_report(run_dir)
    except Exception as error:  # the run's results are saved; a report bug must not turn it into a failure
        print(f"warning: could not write {run_dir / 'report.html'}: {error}")


def pin_reference(config: TrainConfig, model: Any, run_dir: Path) -> None:
    """Makes the reference model of the KL terms the policy as RL starts.

    TRL builds the reference from the path in the policy's config, which holds the weights before the SFT
    warm start (and no path at all for ``agentfly:tiny``). When either applies, the policy is saved once to
    ``<run dir>/reference`` (a resumed run keeps the first run's) and its config points there. With LoRA,
    TRL's reference is the base model with the adapter off, which needs no copy.
    """
    from accelerate import PartialState

    path = run_dir / REFERENCE_DIR
    if not (config.sft.enable or config.model_path == TINY_MODEL or path.is_dir()):
        return
    state = PartialState()
    if state.is_main_process and not (path / "config.json").is_file():
        model.save_pretrained(path)
    state.wait_for_everyone()
    model.config._name_or_path = str(path)


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
    """The :class:`~agentfly_train.trainer.AgentGRPOTrainer` of a run: the rollout engine over a pool of
    training envs, the algorithm's settings, the KL controller (with ``use_kl_in_reward``), and the critic
    (with an estimator that trains one, ``gae``; built now, so ``critic.model.path=null`` copies the policy as it
    is after the warm start).

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
    from agentfly_train.models import lora_config
    from agentfly_train.trainer import AgentGRPOTrainer
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
        agent=agent,
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
        backend=rollout_engine(config, model, tokenizer) if config.backend == "vllm" else None,
    )


def check_rollout_server(config: TrainConfig) -> None:
    """With ``rollout.mode=server``, that the vLLM server answers, before any model is loaded.

    Raises:
        ConfigError: it does not (one line: where, and how to start one).
    """
    rollout = config.actor_rollout_ref.rollout
    if config.backend != "vllm" or rollout.mode != "server":
        return
    from agentfly_train.generation.vllm_server import RolloutServerError, VLLMServerBackend

    try:
        VLLMServerBackend.connect(rollout.server_host, rollout.server_port, [], ".", timeout=10).close()
    except RolloutServerError as error:
        raise ConfigError(f"actor_rollout_ref.rollout.mode=server: {error}") from None


def rollout_engine(config: TrainConfig, model: Any, tokenizer: Any) -> Any:
    """The vLLM backend of a run (``actor_rollout_ref.rollout.name=vllm``). ``mode=colocate``: an engine in this
    process, started on the policy's config (``<run dir>/rollout_init_<process>``) and given its weights at the
    first sync; ``server``: the server at ``rollout.server_host:server_port``, loading weights from
    ``<run dir>/server_weights``. The trainer hands either the policy's weights after every optimiser step.

    Raises:
        ConfigError: no usable server answers (``mode=server``).
    """
    from accelerate import PartialState

    from agentfly_train.generation.vllm import VLLMGenerationBackend
    from agentfly_train.models import policy_dtype, training_device

    rollout = config.actor_rollout_ref.rollout
    eos = model.generation_config.eos_token_id
    eos_ids = sorted({tokenizer.eos_token_id, *(eos if isinstance(eos, list) else [] if eos is None else [eos])})
    if rollout.mode == "server":
        from agentfly_train.generation.vllm_server import RolloutServerError, VLLMServerBackend

        weights = Path(config.trainer.default_local_dir) / "server_weights"
        try:
            return VLLMServerBackend.connect(
                rollout.server_host, rollout.server_port, eos_ids, weights, rollout.server_timeout
            )
        except RolloutServerError as error:
            raise ConfigError(f"actor_rollout_ref.rollout.mode=server: {error}") from None
    # The engine starts on random weights and gets the policy's at the trainer's first sync, before it samples;
    # its directory holds the config and the tokenizer only (transformers' save_pretrained writes weights on the
    # first rank of a process group only, and every process here needs its own engine).
    directory = Path(config.trainer.default_local_dir) / f"rollout_init_{PartialState().process_index}"
    model.config.save_pretrained(directory)
    model.generation_config.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    dtype = rollout.dtype
    if dtype == "auto":
        dtype = str(policy_dtype(config.actor_rollout_ref.model.dtype, training_device(config))).removeprefix("torch.")
    try:
        return VLLMGenerationBackend.start(
            str(directory),
            eos_ids,
            dtype=dtype,
            gpu_memory_utilization=rollout.gpu_memory_utilization,
            kv_cache_memory_bytes=rollout.kv_cache_memory_bytes,
            tensor_parallel_size=rollout.tensor_model_parallel_size,
            enable_prefix_caching=rollout.enable_prefix_caching,
            max_model_len=rollout.max_model_len,
            seed=config.trainer.seed,
            load_format="dummy",
        )
    except Exception as error:  # vLLM's start-up failures (model, memory, KV cache) come as assorted types
        raise ConfigError(
            f"actor_rollout_ref.rollout.name=vllm: the engine did not start ({error_summary(error)}); check "
            "actor_rollout_ref.rollout.gpu_memory_utilization, .kv_cache_memory_bytes, .max_model_len and that vLLM "
            "supports the model"
        ) from None


def error_summary(error: BaseException, limit: int = 400) -> str:
    """``"<ErrorType>: <its message on one line>"``, cut at ``limit`` characters, for one-line error messages."""
    text = " ".join(line.strip() for line in str(error).splitlines() if line.strip())
    text = text if len(text) <= limit else text[: limit - 3] + "..."
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _trainer_state(checkpoint: str) -> Any:
    from transformers.trainer import TRAINER_STATE_NAME
    from transformers.trainer_callback import TrainerState

    return TrainerState.load_from_json(str(Path(checkpoint) / TRAINER_STATE_NAME))


def _opening(pool: Any, row: dict[str, Any]) -> list[dict[str, Any]]:
    _, info = pool.take(1)[0].reset(options={"task": row})
    return info["messages"]


def _val_metrics(record: dict[str, Any]) -> dict[str, float]:
    return {key: value for key, value in record.items() if key.startswith("val/")}


def _replace_console_callbacks(trainer: Any, callback: Any) -> None:
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    for console in (PrinterCallback, ProgressCallback):
        trainer.remove_callback(console)
    trainer.add_callback(callback)
