"""The mapping of our configuration onto TRL's ``GRPOConfig`` (the README's table mirrors it)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from agentfly_train.config import ConfigError, TrainConfig
from agentfly_train.models import policy_dtype

LOSS_TYPES = {"token-mean": "dapo", "seq-mean-token-mean": "grpo", "seq-mean-token-sum-norm": "dr_grpo"}
"""``actor_rollout_ref.actor.loss_agg_mode`` -> TRL ``loss_type`` with the same token averaging."""


@dataclass(frozen=True)
class BatchLayout:
    """How a rollout batch splits into optimiser steps and micro-batches.

    Attributes:
        completions_per_rollout: ``data.train_batch_size * agent.num_chains`` episodes per rollout step.
        micro_batch: Sequences per forward/backward on one device (``per_device_train_batch_size``).
        grad_accum: Micro-batches per optimiser step on one device.
        steps_per_rollout: Optimiser steps fed by one rollout batch.
    """

    completions_per_rollout: int
    micro_batch: int
    grad_accum: int
    steps_per_rollout: int

    @property
    def steps_per_generation(self) -> int:
        """TRL's ``steps_per_generation``: micro-batches per device drawn from one rollout batch."""
        return self.grad_accum * self.steps_per_rollout


def batch_layout(config: TrainConfig, world_size: int) -> BatchLayout:
    """Splits the verl-style prompt counts into TRL's per-device batch sizes.

    Raises:
        ConfigError: the sizes do not divide evenly across devices and micro-batches.
    """
    actor, chains = config.actor_rollout_ref.actor, config.agent.num_chains
    prompts = config.data.train_batch_size
    mini = actor.ppo_mini_batch_size or prompts
    mini_completions = mini * chains
    if mini_completions % world_size:
        raise ConfigError(
            f"ppo_mini_batch_size * agent.num_chains = {mini_completions} episodes "
            f"do not split over {world_size} devices"
        )
    micro = min(actor.ppo_micro_batch_size_per_gpu, mini_completions // world_size)
    if (mini_completions // world_size) % micro:
        raise ConfigError(
            f"{mini_completions // world_size} episodes per device per optimiser step are not a multiple of "
            f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro}"
        )
    return BatchLayout(
        completions_per_rollout=prompts * chains,
        micro_batch=micro,
        grad_accum=mini_completions // world_size // micro,
        steps_per_rollout=prompts // mini,
    )


def report_to(config: TrainConfig) -> list[str]:
    """TRL/HF ``report_to`` from ``trainer.logger``; wandb runs offline when no API key is configured."""
    targets = [name for name in config.trainer.logger if name != "console"]
    if "wandb" in targets:
        os.environ.setdefault("WANDB_PROJECT", config.trainer.project_name)
        if not os.environ.get("WANDB_API_KEY"):
            os.environ.setdefault("WANDB_MODE", "offline")
    return targets


def grpo_config(config: TrainConfig, world_size: int, device: str) -> Any:
    """The ``trl.GRPOConfig`` for a run.

    Args:
        config: The validated configuration.
        world_size: Processes in the Accelerate launch.
        device: ``cpu`` or ``cuda``.
    """
    from trl import GRPOConfig

    actor, rollout, trainer = config.actor_rollout_ref.actor, config.actor_rollout_ref.rollout, config.trainer
    layout = batch_layout(config, world_size)
    if actor.loss_agg_mode not in LOSS_TYPES:
        raise ConfigError(
            f"actor_rollout_ref.actor.loss_agg_mode={actor.loss_agg_mode!r} is not available; "
            f"use one of {list(LOSS_TYPES)}"
        )
    dtype = policy_dtype(config.actor_rollout_ref.model.dtype, device)
    steps = trainer.total_training_steps
    save = trainer.save_freq > 0
    return GRPOConfig(
        output_dir=trainer.default_local_dir,
        run_name=trainer.experiment_name,
        report_to=report_to(config),
        seed=trainer.seed,
        data_seed=trainer.seed,
        use_cpu=device == "cpu",
        bf16=str(dtype) == "torch.bfloat16",
        fp16=str(dtype) == "torch.float16",
        learning_rate=actor.optim.lr,
        weight_decay=actor.optim.weight_decay,
        warmup_steps=actor.optim.lr_warmup_steps_ratio,
        lr_scheduler_type=actor.optim.lr_scheduler_type,
        max_grad_norm=actor.optim.grad_clip,
        per_device_train_batch_size=layout.micro_batch,
        gradient_accumulation_steps=layout.grad_accum,
        steps_per_generation=layout.steps_per_generation,
        num_generations=config.agent.num_chains,
        num_iterations=actor.ppo_epochs,
        max_steps=steps * layout.steps_per_rollout if steps else -1,
        num_train_epochs=trainer.total_epochs,
        max_completion_length=rollout.response_length,
        temperature=max(rollout.temperature, 1e-6),
        top_p=rollout.top_p,
        top_k=max(rollout.top_k, 0),
        beta=actor.kl_loss_coef if actor.use_kl_loss else 0.0,
        epsilon=actor.clip_ratio_low if actor.clip_ratio_low is not None else actor.clip_ratio,
        epsilon_high=actor.clip_ratio_high if actor.clip_ratio_high is not None else actor.clip_ratio,
        loss_type=LOSS_TYPES[actor.loss_agg_mode],
        scale_rewards="group" if config.algorithm.norm_adv_by_std_in_grpo else "none",
        entropy_coef=actor.entropy_coeff,
        gradient_checkpointing=config.actor_rollout_ref.model.enable_gradient_checkpointing,
        shuffle_dataset=config.data.shuffle,
        logging_steps=1,
        save_strategy="steps" if save else "no",
        save_steps=trainer.save_freq * layout.steps_per_rollout if save else 500,
        disable_tqdm=True,
        log_completions=False,
        remove_unused_columns=False,
        vllm_gpu_memory_utilization=rollout.gpu_memory_utilization,
        vllm_tensor_parallel_size=rollout.tensor_model_parallel_size,
    )
