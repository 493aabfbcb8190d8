"""Our configuration as the trainer's arguments: TRL's ``GRPOConfig`` (the README's table mirrors it), and the
:class:`RLSettings` and :class:`~agentfly_train.critic.CriticSettings` our objective reads.

The objective is not TRL's (``AgentGRPOTrainer`` replaces TRL's advantages and loss), so ``GRPOConfig`` keeps
TRL's defaults for its loss fields (``loss_type``, ``epsilon``, ``scale_rewards``, ``entropy_coef``, ...). Its
``beta`` only decides whether TRL loads the reference model and computes its log-probs (it does when
``beta != 0``); the KL coefficients we use are in ``RLSettings`` and the KL controller.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from agentfly_train.config.actor_rollout_ref import ActorConfig
from agentfly_train.config.errors import ConfigError
from agentfly_train.config.schema import AlgorithmConfig, TrainConfig

if TYPE_CHECKING:
    from agentfly_train.algorithms import AdvantageEstimator, KLController
    from agentfly_train.critic import CriticSettings


@dataclass(frozen=True)
class RLSettings:
    """The algorithm the trainer's objective reads: the configuration's own sections, not a copy of their fields.

    Attributes:
        algorithm: ``algorithm.*``: the advantage estimator, discounting, the KL in the reward, rollout correction.
        actor: ``actor_rollout_ref.actor.*``: the policy loss (clip ratios, dual clip, aggregation), the KL loss
            and the entropy bonus.
        critic_warmup: ``trainer.critic_warmup``: rollout steps that train only the critic.
    """

    algorithm: AlgorithmConfig
    actor: ActorConfig
    critic_warmup: int = 0


@dataclass(frozen=True)
class BatchLayout:
    """How a rollout batch splits into optimiser steps and micro-batches.

    Attributes:
        completions_per_rollout: ``data.train_batch_size * agent.num_chains`` episodes per rollout step.
        micro_batch: Sequences per forward/backward on one device (``per_device_train_batch_size``).
        grad_accum: Micro-batches per optimiser step on one device.
        steps_per_rollout: Mini-batches (optimiser steps per PPO epoch) in one rollout batch.
        ppo_epochs: Passes over each rollout batch.
    """

    completions_per_rollout: int
    micro_batch: int
    grad_accum: int
    steps_per_rollout: int
    ppo_epochs: int

    @property
    def steps_per_generation(self) -> int:
        """TRL's ``steps_per_generation``: micro-batches per device drawn from one rollout batch."""
        return self.grad_accum * self.steps_per_rollout

    @property
    def optimizer_steps_per_rollout(self) -> int:
        """Optimiser steps fed by one rollout batch: its mini-batches, in each PPO epoch."""
        return self.steps_per_rollout * self.ppo_epochs


def _micro_batches(
    prompts_per_step: int, micro_batch: int, chains: int, world_size: int, keys: tuple[str, str]
) -> tuple[int, int]:
    """(micro-batch, micro-batches per optimiser step) on one device, for steps of ``prompts_per_step`` prompts.

    Raises:
        ConfigError: the episodes of a step do not split evenly over the devices and micro-batches (``keys``
            name the mini- and micro-batch settings).
    """
    episodes = prompts_per_step * chains
    if episodes % world_size:
        raise ConfigError(f"{keys[0]} * agent.num_chains = {episodes} episodes do not split over {world_size} devices")
    per_device = episodes // world_size
    micro = min(micro_batch, per_device)
    if per_device % micro:
        raise ConfigError(
            f"{per_device} episodes per device per optimiser step are not a multiple of {keys[1]}={micro}"
        )
    return micro, per_device // micro


def batch_layout(config: TrainConfig, world_size: int) -> BatchLayout:
    """Splits the verl-style prompt counts into TRL's per-device batch sizes.

    Raises:
        ConfigError: the sizes do not divide evenly across devices and micro-batches.
    """
    actor, prompts, chains = config.actor_rollout_ref.actor, config.data.train_batch_size, config.agent.num_chains
    mini = actor.ppo_mini_batch_size or prompts
    keys = ("actor_rollout_ref.actor.ppo_mini_batch_size", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu")
    micro, grad_accum = _micro_batches(mini, actor.ppo_micro_batch_size_per_gpu, chains, world_size, keys)
    return BatchLayout(
        completions_per_rollout=prompts * chains,
        micro_batch=micro,
        grad_accum=grad_accum,
        steps_per_rollout=prompts // mini,
        ppo_epochs=actor.ppo_epochs,
    )


def rl_settings(config: TrainConfig) -> RLSettings:
    """The trainer's :class:`RLSettings` of ``config``."""
    return RLSettings(config.algorithm, config.actor_rollout_ref.actor, config.trainer.critic_warmup)


def critic_settings(config: TrainConfig, world_size: int) -> CriticSettings:
    """The :class:`~agentfly_train.critic.CriticSettings` of ``critic.*``: mini-batches of
    ``critic.ppo_mini_batch_size`` prompts (default ``data.train_batch_size``), ``ppo_epochs`` passes and the
    loss aggregation of the actor.

    Raises:
        ConfigError: the critic's batch sizes do not divide evenly across devices and micro-batches.
    """
    from agentfly_train.critic import CriticSettings

    critic, actor, chains = config.critic, config.actor_rollout_ref.actor, config.agent.num_chains
    mini = critic.ppo_mini_batch_size or config.data.train_batch_size
    keys = ("critic.ppo_mini_batch_size", "critic.ppo_micro_batch_size_per_gpu")
    micro, count = _micro_batches(mini, critic.ppo_micro_batch_size_per_gpu, chains, world_size, keys)
    return CriticSettings(
        critic,
        mini_batch=micro * count,
        micro_batch=micro,
        loss_agg_mode=actor.loss_agg_mode,
        epochs=actor.ppo_epochs,
        completion_width=config.actor_rollout_ref.rollout.response_length,
    )


def reference_beta(config: TrainConfig) -> float:
    """``GRPOConfig.beta``: non-zero (the KL loss's, else the controller's, initial coefficient) exactly when a
    KL term needs the reference model; TRL then loads it and computes its log-probs."""
    actor, algorithm = config.actor_rollout_ref.actor, config.algorithm
    if actor.use_kl_loss:
        return actor.kl_loss_coef
    return algorithm.kl_ctrl.kl_coef if algorithm.use_kl_in_reward else 0.0


def report_to(config: TrainConfig) -> list[str]:
    """TRL/HF ``report_to`` from ``trainer.logger``; wandb runs offline when no API key is configured, and the
    main process says so in a ``note:`` line on stderr with what to do about it."""
    targets = [name for name in config.trainer.logger if name != "console"]
    if "wandb" in targets:
        os.environ.setdefault("WANDB_PROJECT", config.trainer.project_name)
        os.environ.setdefault("WANDB_DIR", config.trainer.default_local_dir)  # not the working directory
        if not os.environ.get("WANDB_API_KEY") and "WANDB_MODE" not in os.environ:
            # imported with WANDB_MODE set, transformers prints "[INFO] Running in WANDB offline mode"; imported
            # first, it does not, and the note says what to do instead
            import transformers.integrations.integration_utils  # noqa: F401
            from accelerate import PartialState

            os.environ["WANDB_MODE"] = "offline"
            if PartialState().is_main_process:
                runs = Path(os.environ["WANDB_DIR"]) / "wandb"
                print(
                    f"note: wandb logs offline to {runs} (no WANDB_API_KEY): set WANDB_API_KEY (or WANDB_MODE=online"
                    f" after `wandb login`) to log online, or upload this run afterwards with `wandb sync "
                    f"{runs}/offline-run-*`",
                    file=sys.stderr,
                )
    return targets


def grpo_config(config: TrainConfig, world_size: int, device: str, dtype: torch.dtype) -> Any:
    """The ``trl.GRPOConfig`` for a run.

    Args:
        config: The validated configuration.
        world_size: Processes in the Accelerate launch.
        device: ``cpu`` or ``cuda``.
        dtype: The policy's training precision (:func:`~agentfly_train.devices.policy_dtype`): bfloat16 or float16
            turn on TRL's mixed precision.
    """
    from trl import GRPOConfig

    actor, rollout, trainer = config.actor_rollout_ref.actor, config.actor_rollout_ref.rollout, config.trainer
    layout = batch_layout(config, world_size)
    steps = trainer.total_training_steps
    save = trainer.save_freq > 0
    if actor.fsdp_config.param_offload or actor.fsdp_config.optimizer_offload or _ref_offload(config):
        os.environ["FSDP_OFFLOAD_PARAMS"] = "true"  # read by Accelerate's FSDP plugin when the trainer builds it
    targets = report_to(config)
    group = _checked_group_size(config, layout.micro_batch * world_size * layout.steps_per_generation)
    beta = reference_beta(config)
    checkpointing = checkpointing_argument(GRPOConfig, config.actor_rollout_ref.model.enable_gradient_checkpointing)
    args = GRPOConfig(
        output_dir=trainer.default_local_dir,
        run_name=trainer.experiment_name,
        report_to=targets,
        seed=trainer.seed,
        data_seed=trainer.seed,
        use_cpu=device == "cpu",
        bf16=dtype == torch.bfloat16,
        fp16=dtype == torch.float16,
        learning_rate=actor.optim.lr,
        weight_decay=actor.optim.weight_decay,
        warmup_steps=actor.optim.lr_warmup_steps_ratio,
        lr_scheduler_type=actor.optim.lr_scheduler_type,
        max_grad_norm=actor.optim.grad_clip,
        per_device_train_batch_size=layout.micro_batch,
        gradient_accumulation_steps=layout.grad_accum,
        steps_per_generation=layout.steps_per_generation,
        num_generations=group,
        num_iterations=actor.ppo_epochs,
        max_steps=steps * layout.optimizer_steps_per_rollout if steps else -1,
        num_train_epochs=trainer.total_epochs,
        max_completion_length=rollout.response_length,
        temperature=max(rollout.temperature, 1e-6),
        top_p=rollout.top_p,
        top_k=max(rollout.top_k, 0),
        beta=beta,
        **checkpointing,
        shuffle_dataset=config.data.shuffle,
        logging_steps=1,
        save_strategy="steps" if save else "no",
        save_steps=trainer.save_freq * layout.optimizer_steps_per_rollout if save else 500,
        disable_tqdm=True,
        log_completions=False,
        remove_unused_columns=False,
        vllm_gpu_memory_utilization=rollout.gpu_memory_utilization,
        vllm_tensor_parallel_size=rollout.tensor_model_parallel_size,
    )
    args.num_generations = config.agent.num_chains
    return args


def checkpointing_argument(config_class: type, enable: bool) -> dict[str, bool]:
    """Activation checkpointing under its current name: transformers 5.23 renamed ``gradient_checkpointing`` to
    ``activation_checkpointing`` and warns on every run given the old one; older releases know only the old one."""
    names = {item.name for item in dataclasses.fields(config_class)}
    return {"activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing": enable}


def _checked_group_size(config: TrainConfig, generation_batch: int) -> int:
    """The ``num_generations`` GRPOConfig is built with.

    GRPOConfig refuses groups of one, which verl trains with the estimators that need no group
    (reinforce_plus_plus, remax, gae; ``config.validate`` refuses one chain for the others). It is built with a
    group of the whole generation batch, which passes its checks, and :func:`grpo_config` then sets the real
    group size: the trainer reads ``num_generations`` after ``__post_init__``, and a group of one divides every
    batch.
    """
    if config.agent.num_chains > 1:
        return config.agent.num_chains
    if generation_batch < 2:
        raise ConfigError("agent.num_chains=1 needs at least 2 episodes per rollout step: raise data.train_batch_size")
    return generation_batch


def _ref_offload(config: TrainConfig) -> bool:
    ref = config.actor_rollout_ref.ref.fsdp_config
    return ref.param_offload or ref.optimizer_offload


UNSUPPORTED_TRL_OPTIONS = {
    "use_vllm": False,
    "top_entropy_quantile": 1.0,
    "off_policy_mask_threshold": None,
    "delta": None,
    "importance_sampling_level": "token",
    "use_adaptive_entropy": False,
}
"""``GRPOConfig`` fields whose effect lives in TRL's loss, which ours replaces, with the only value we accept."""


def check_trainer_setup(
    rl: RLSettings,
    estimator: AdvantageEstimator,
    args: Any,
    kl_ctrl: KLController | None,
    critic_model: Any,
    critic_settings: CriticSettings | None,
) -> None:
    """Raises ``ValueError`` when the trainer's arguments cannot run ``rl`` (whose estimator is ``estimator``)."""
    if estimator.trains_critic and (critic_model is None or critic_settings is None):
        raise ValueError(
            f"adv_estimator={rl.algorithm.adv_estimator!r} trains a critic: pass critic_model and critic_settings"
        )
    if rl.algorithm.use_kl_in_reward and kl_ctrl is None:
        raise ValueError("use_kl_in_reward needs kl_ctrl (algorithms.make_kl_controller)")
    if args is None:
        return
    if (rl.algorithm.use_kl_in_reward or rl.actor.use_kl_loss) and args.beta == 0.0:
        raise ValueError("a KL term needs the reference model, which TRL loads only when GRPOConfig.beta != 0")
    for name, accepted in UNSUPPORTED_TRL_OPTIONS.items():
        if getattr(args, name) != accepted:
            raise ValueError(
                f"GRPOConfig.{name}={getattr(args, name)!r} acts in TRL's loss, which AgentGRPOTrainer replaces; "
                f"leave it at {accepted!r}"
            )
