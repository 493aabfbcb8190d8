"""Validating a configuration: the values its types cannot check, before anything is loaded.

Each field's constraint is declared on the schema (:mod:`agentfly_train.config.constraints`) and checked by
:func:`check_fields`; a chosen registry entry (generation backend, advantage estimator, KL controller, env runtime)
checks its own keys (``check``), so no entry's name is compared here. The registries are named by entry point
(``"module:attribute"``) and imported when a configuration is checked: they sit above this package, which imports
nothing of ``agentfly_train`` outside it.
"""

from __future__ import annotations

import importlib.util
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any

from agentfly_envs.registry import load_entry_point
from agentfly_train.config.actor_rollout_ref import RolloutConfig
from agentfly_train.config.agent import CONTEXT_POLICIES, ContextConfig
from agentfly_train.config.constraints import Registered, constraint_of
from agentfly_train.config.errors import ConfigError, check_choice, check_non_negative
from agentfly_train.config.judge import judge_of
from agentfly_train.config.schema import TINY_MODEL, TrainConfig, TrainerConfig

GENERATION_BACKENDS = "agentfly_train.generation.base:GENERATION_BACKENDS"
"""The generation backends' registry (:class:`~agentfly_train.generation.base.BackendRegistry`), by entry point."""
TINY_POLICIES = "agentfly_train.tiny_policies:TINY_POLICIES"
"""The ``agentfly:tiny*`` model names, by entry point."""
ROLLOUT_CORRECTION_CHECK = "agentfly_train.algorithms.rollout_correction:check_rollout_correction"
"""The check of ``algorithm.rollout_correction``, by entry point."""


def validate(config: TrainConfig) -> None:
    """Checks values the types cannot (names, ranges, consistency), before anything is loaded: every field's declared
    constraint (:func:`check_fields`), then each chosen entry (backend, estimator, KL controller, env runtime)
    checks its own keys, then what spans sections.

    Raises:
        ConfigError: naming the key, the bad value and what would be valid.
    """
    backends = load_entry_point(GENERATION_BACKENDS)
    agent, data, actor = config.agent, config.data, config.actor_rollout_ref.actor
    rollout, trainer = config.actor_rollout_ref.rollout, config.trainer
    _validate_env(config)
    _validate_data_files(config)
    _validate_model_path(config)
    backend = backends.check_choice(rollout, agent.backend)
    name = backends.chosen(rollout, agent.backend)
    if agent.sees_images and not backend.supports_images:
        raise ConfigError(
            f"agent.env_kwargs.obs=screenshot: the {name} backend does not sample from prompts with images "
            "here (vLLM is handed token ids only); set actor_rollout_ref.rollout.name=hf"
        )
    if backends.async_episodes(rollout, agent.backend) and not backend.streams:
        raise ConfigError(
            f"actor_rollout_ref.rollout.async_episodes=true needs a backend that streams requests (vllm); "
            f"{name} runs turn by turn"
        )
    check_fields(config)
    _validate_context(config)
    if agent.reward_name is not None and config.custom_reward_function.path is not None:
        raise ConfigError(
            "agent.reward_name and custom_reward_function.path both replace the env's scoring: set one of them"
        )
    judge_of(config)
    unused = sorted(set(agent.tool_options) - set(agent.tools or ()))
    if agent.tools is not None and unused:
        raise ConfigError(f"agent.tool_options has options for {unused}, which agent.tools={agent.tools} does not use")
    mini = actor.ppo_mini_batch_size or data.train_batch_size
    if data.train_batch_size % mini:
        raise ConfigError(
            f"data.train_batch_size={data.train_batch_size} must be a multiple of "
            f"actor_rollout_ref.actor.ppo_mini_batch_size={mini}"
        )
    if trainer.resume_mode == "resume_path" and not trainer.resume_from_path:
        raise ConfigError("trainer.resume_mode=resume_path needs trainer.resume_from_path")
    if config.eval.samples < config.eval.k:
        raise ConfigError(
            f"eval.n={config.eval.n} samples per task cannot estimate pass@{config.eval.k}: set eval.n >= eval.k"
        )
    backend.check(config)
    _validate_env_runtime(rollout)
    _validate_algorithm(config)
    _validate_async_training(config, backend, name)
    _validate_program(config)


def _validate_program(config: TrainConfig) -> None:
    """``agent.program``: a function that imports (the estimator's check asks for one that trains a row per turn:
    :attr:`~agentfly_train.config.agent.AgentConfig.trains_turn_rows`)."""
    from agentfly_envs.user_code import UserCodeError, load_function

    if config.agent.program is None:
        return
    if importlib.util.find_spec("aiohttp") is None:
        raise ConfigError('agent.program: its endpoint needs aiohttp: pip install -e ".[programs]"')
    try:
        load_function(config.agent.program)
    except UserCodeError as error:
        raise ConfigError(f"agent.program: {error}") from None


def check_fields(section: Any, prefix: str = "") -> None:
    """Checks every field of ``section`` (a config dataclass, recursively) against the constraint it declares
    (:mod:`agentfly_train.config.constraints`).

    Raises:
        ConfigError: the first value that breaks its constraint (one line naming the key).
    """
    for item in fields(section):
        key, value = f"{prefix}{item.name}", getattr(section, item.name)
        if is_dataclass(value):
            check_fields(value, f"{key}.")
        elif (constraint := constraint_of(item)) is not None:
            constraint.check(key, value)


def chosen(section: Any, key: str) -> Any:
    """The registry entry that ``section``'s field ``key`` names, from the registry its :class:`Registered`
    constraint names (imported by entry point: this package imports no registry above it)."""
    constraint = next(constraint_of(item) for item in fields(section) if item.name == key)
    assert isinstance(constraint, Registered), f"{key} declares no registry"
    return constraint.entries().get(getattr(section, key))


def _validate_env(config: TrainConfig) -> None:
    """``agent.env``: a registered env id, or a source prefix (``openenv:``, ``verifiers:``) that resolves to one."""
    import gymnasium as gym

    import agentfly_envs  # noqa: F401  (registers the env ids)

    if config.agent.env is None:
        return
    try:
        env_id = config.env_id
    except ValueError as error:
        raise ConfigError(f"agent.env={config.agent.env}: {error}") from None
    if env_id not in gym.registry:
        known = sorted(name for name in gym.registry if name.startswith("agentfly/"))
        check_choice("agent.env", config.agent.env, known)


def _validate_async_training(config: TrainConfig, backend: Any, name: str) -> None:
    """``async_training.*``: the ranges, and the settings off-policy training refuses (one line each); what the
    estimator needs of it, its ``check`` says (:func:`_validate_algorithm`)."""
    settings, correction = config.async_training, config.algorithm.rollout_correction
    if not settings.enable:
        return
    key = "async_training"
    mini = config.actor_rollout_ref.actor.ppo_mini_batch_size or config.data.train_batch_size
    per_step = config.data.train_batch_size // mini
    if settings.require_batches is not None and settings.require_batches != per_step:
        raise ConfigError(
            f"{key}.require_batches={settings.require_batches}: the trainer takes one rollout step's groups at once, "
            f"data.train_batch_size / ppo_mini_batch_size = {per_step}; set it to {per_step} or null"
        )
    if settings.trigger_parameter_sync_step - 1 > settings.max_staleness:
        raise ConfigError(
            f"{key}.trigger_parameter_sync_step={settings.trigger_parameter_sync_step} leaves the generator "
            f"{settings.trigger_parameter_sync_step - 1} versions behind, beyond {key}.max_staleness="
            f"{settings.max_staleness}: every group would be dropped; raise max_staleness or sync more often"
        )
    if backend.has_own_weights and settings.trigger_parameter_sync_step > 1 + settings.staleness_threshold:
        raise ConfigError(
            f"{key}.trigger_parameter_sync_step={settings.trigger_parameter_sync_step} needs "
            f"{key}.staleness_threshold >= {settings.trigger_parameter_sync_step - 1}: the trainer takes that many "
            "steps' groups between two weight syncs, and the generator holds at most (1 + staleness_threshold) "
            "steps' groups not yet trained"
        )
    if not settings.partial_rollout and not backend.has_own_weights:
        raise ConfigError(
            f"{key}.partial_rollout=false holds a weight sync until the episodes in flight end, but "
            f"{name} samples from the policy itself, which each update changes; use partial_rollout=true "
            "or actor_rollout_ref.rollout.name=vllm"
        )
    if settings.use_rollout_log_probs and correction.rollout_is is not None:
        raise ConfigError(
            f"{key}.use_rollout_log_probs=true makes the sampler's log-probs PPO's old log-probs, so "
            "algorithm.rollout_correction.rollout_is has nothing left to correct: set one of them "
            "(use_rollout_log_probs=false with rollout_is=token is AReaL's decoupled PPO)"
        )
    if not settings.use_rollout_log_probs and correction.rollout_is is None:
        raise ConfigError(
            f"{key}.use_rollout_log_probs=false with algorithm.rollout_correction.rollout_is=null trains on stale "
            "episodes without correcting for the policy that sampled them: set rollout_is=token (or sequence), or "
            "use_rollout_log_probs=true"
        )


def _validate_env_runtime(rollout: RolloutConfig) -> None:
    """``actor_rollout_ref.rollout.env_*``: where the envs run."""
    runtime = chosen(rollout, "env_runtime")
    for name, amount in rollout.env_worker_resources.items():
        check_non_negative(f"actor_rollout_ref.rollout.env_worker_resources.{name}", amount)
    problem = runtime.unavailable()
    if problem is not None:
        raise ConfigError(f"actor_rollout_ref.rollout.env_runtime={rollout.env_runtime} {problem}")


def _file_list(key: str, value: Any) -> list[str] | None:
    if value is None:
        return None
    files = [value] if isinstance(value, str) else value
    if not isinstance(files, list) or not files or not all(isinstance(f, str) and f for f in files):
        raise ConfigError(f"{key} must be a file path or a list of them, got {value!r}")
    return files


def _validate_data_files(config: TrainConfig) -> None:
    """``data.train_files``/``val_files``: a path or a list (stored as a list); each file exists with a known
    format; an env built from files has training files."""
    from agentfly_envs.tasks.files import FILE_FORMATS

    data = config.data
    data.train_files = _file_list("data.train_files", data.train_files)
    data.val_files = _file_list("data.val_files", data.val_files)
    for key, files in (("data.train_files", data.train_files), ("data.val_files", data.val_files)):
        for name in files or ():
            path = Path(name)
            if not path.is_file():
                raise ConfigError(f"{key}: file {name!r} does not exist")
            if path.suffix.lower() not in FILE_FORMATS:
                raise ConfigError(f"{key}: cannot read {name!r}: use a .json (a list of rows), .jsonl or .parquet file")
    if config.agent.env is None and not (data.train_files or data.val_files):
        raise ConfigError(
            "no tasks: set data.train_files (a JSON list of {question, answer} rows, JSONL or parquet) to build the "
            "env from agent.tools and agent.reward_name, or agent.env to a registered env (e.g. agentfly/Arith-Calc); "
            "overrides without --config replace the embedded quickstart (they start from the training guide's "
            "defaults): `python -m agentfly_train --config quickstart KEY=VALUE` applies them on top of it"
        )


def _validate_model_path(config: TrainConfig) -> None:
    """The policy (and a critic checkpoint) is a tiny model, a Hub id (``org/name``) or an existing directory."""
    import re

    if config.model_path is None:
        raise ConfigError(
            "no model: set actor_rollout_ref.model.path (or agent.model_name_or_path) to a Hub id, a local "
            "directory, or agentfly:tiny"
        )
    tiny = load_entry_point(TINY_POLICIES)
    for key, path in (
        ("actor_rollout_ref.model.path", config.model_path),
        ("critic.model.path", config.critic.model.path),
    ):
        if path is None or path in tiny or Path(path).expanduser().exists():
            continue
        if path.startswith((".", "/", "~")) or not re.fullmatch(r"[\w.-]+(/[\w.-]+)?", path):
            raise ConfigError(f"{key}={path!r}: no such directory (and not a Hub id like Qwen/Qwen2.5-3B-Instruct)")


def _validate_context(config: TrainConfig) -> None:
    """What the chosen context policy (``agent.context.policy``) cannot serve: settings of other policies, screenshots,
    which its rebuilt contexts do not keep apart, and warm-start demonstrations of a policy that writes summaries."""
    agent, policy = config.agent, chosen(config.agent.context, "policy")
    context, default = agent.context, ContextConfig()
    unused = [
        item.name
        for item in fields(context)
        if item.name not in ("policy", "step_wise", *policy.settings)
        and getattr(context, item.name) != getattr(default, item.name)
    ]
    if unused:
        readers = [name for name, other in load_entry_point(CONTEXT_POLICIES).items() if unused[0] in other.settings]
        raise ConfigError(
            f"agent.context.{unused[0]} has no effect under agent.context.policy={context.policy}; the policies that "
            f"read it: {', '.join(readers)}"
        )
    if policy.rewrites_context and agent.sees_images:
        raise ConfigError(
            f"agent.context.policy={agent.context.policy} rebuilds contexts from text turns, not screenshots "
            "(agent.env_kwargs.obs=screenshot); use agent.max_images to bound a vision-language episode's context"
        )
    if policy.writes_summaries and config.sft.enable:
        raise ConfigError(
            f"agent.context.policy={agent.context.policy}: the sft.* warm start's demonstrations have no policy to "
            "write their summaries; set sft.enable=false or another context policy"
        )


def _validate_images(config: TrainConfig) -> None:
    """What a vision-language run cannot combine: the passes that run the model without its images (a critic's is
    refused by the estimator's ``check``)."""
    if not config.agent.sees_images:
        return
    actor, algorithm = config.actor_rollout_ref.actor, config.algorithm
    if (actor.use_kl_loss and actor.kl_loss_type == "full") or (
        algorithm.use_kl_in_reward and algorithm.kl_penalty == "full"
    ):
        raise ConfigError(
            "the exact (full) KL runs the model without the screenshots (agent.env_kwargs.obs=screenshot); use "
            "kl_loss_type / kl_penalty low_var_kl, kl or mse"
        )


def _validate_algorithm(config: TrainConfig) -> None:
    """The checks of ``algorithm.*`` and the actor's loss settings; the chosen KL controller checks
    ``algorithm.kl_ctrl`` and the chosen estimator what it needs (groups, per-turn rows, ``critic.*``), each with its
    own ``check``."""
    algorithm, actor, critic = config.algorithm, config.actor_rollout_ref.actor, config.critic
    load_entry_point(ROLLOUT_CORRECTION_CHECK)(algorithm.rollout_correction)
    if actor.clip_ratio_c <= 1:
        raise ConfigError(f"actor_rollout_ref.actor.clip_ratio_c (dual clip) must be > 1, got {actor.clip_ratio_c}")
    if algorithm.use_kl_in_reward:
        chosen(algorithm.kl_ctrl, "type").check(algorithm.kl_ctrl)
    if actor.use_kl_loss and actor.kl_loss_coef <= 0:
        raise ConfigError(
            f"actor_rollout_ref.actor.kl_loss_coef={actor.kl_loss_coef} with use_kl_loss=true; "
            "set use_kl_loss=false to train without the KL loss"
        )
    _validate_images(config)
    estimator = chosen(algorithm, "adv_estimator")
    estimator.check(config)
    if not estimator.trains_critic:
        return
    if critic.model.path == TINY_MODEL and config.model_path != TINY_MODEL:
        raise ConfigError(
            "critic.model.path=agentfly:tiny shares the tiny policy's vocabulary; with another policy set "
            "critic.model.path to a checkpoint of the same tokenizer, or null to copy the policy"
        )
    if config.actor_rollout_ref.model.dtype == "float16":
        raise ConfigError("the critic trains without fp16 loss scaling; use actor_rollout_ref.model.dtype=bfloat16")


def ignored_settings(config: TrainConfig, world_size: int = 1) -> list[str]:
    """One line per key this run sets that is accepted (verl's commands use it) but has no effect here.

    Args:
        config: The run's configuration.
        world_size: Training processes of the run (FSDP offloading needs a sharded, multi-process run).
    """
    rollout, ref = config.actor_rollout_ref.rollout, config.actor_rollout_ref.ref
    notes = []
    if world_size == 1:
        offload = [
            f"actor_rollout_ref.{section}.fsdp_config.{key}"
            for section, fsdp in (("actor", config.actor_rollout_ref.actor.fsdp_config), ("ref", ref.fsdp_config))
            for key in ("param_offload", "optimizer_offload")
            if getattr(fsdp, key)
        ]
        if offload:
            notes.append(
                f"{', '.join(offload)}=true is ignored: offloading applies to FSDP-sharded runs (accelerate launch "
                "--config_file configs/accelerate/fsdp.yaml with 2+ processes); this run has one process"
            )
    if config.trainer.total_training_steps is not None and config.trainer.total_epochs != TrainerConfig.total_epochs:
        notes.append(
            f"trainer.total_epochs={config.trainer.total_epochs} is ignored: trainer.total_training_steps="
            f"{config.trainer.total_training_steps} sets the run's length (set it to null to run whole epochs)"
        )
    if rollout.free_cache_engine:
        notes.append(
            "actor_rollout_ref.rollout.free_cache_engine=true is ignored: vLLM's sleep mode is not wired in "
            "(it runs on CUDA only and is untested here); the engine keeps its KV cache during updates"
        )
    if rollout.log_prob_micro_batch_size_per_gpu is not None:
        notes.append(
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu is ignored: log-probabilities are "
            "recomputed in chunks of actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"
        )
    return notes


def check_launch(trainer: TrainerConfig, world_size: int, device: str) -> None:
    """Checks that a GPU launch has ``trainer.nnodes * trainer.n_gpus_per_node`` processes.

    Raises:
        ConfigError: the launch has another number of processes (says how to launch instead).
    """
    expected = trainer.nnodes * max(trainer.n_gpus_per_node, 1)
    if device == "cuda" and expected != world_size:
        raise ConfigError(
            f"trainer.nnodes * trainer.n_gpus_per_node = {expected} but the launch has {world_size} processes; "
            "launch with accelerate launch --num_processes / --num_machines to match"
        )
