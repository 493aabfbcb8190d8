"""PPO's critic: a value model, its values on a rollout batch, its clipped-value-loss update, its checkpoint.

The value model is a causal-LM backbone with a scalar head (``AutoModelForTokenClassification`` with one
label, as in verl). ``V_t`` of completion token ``t`` is the head's output at the position before it, the
position whose logits sample token ``t``: the value of the state the token was sampled in.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from agentfly_train.algorithms import value_loss
from agentfly_train.batch import row_slices, step_denominator
from agentfly_train.config.schema import TINY_MODEL, CriticConfig
from agentfly_train.sharding import whole

OPTIMIZER_FILE = "optimizer.pt"
"""The critic optimiser's state, next to the value model's weights in a checkpoint's ``critic/`` directory."""
WHOLE_STATE = StateDictOptions(full_state_dict=True, cpu_offload=True)
"""Unsharded state dicts keyed by parameter name, on the CPU (the same file for any number of processes)."""


def build_value_model(source: str | None, policy: Any, trust_remote_code: bool = False) -> Any:
    """A value model with a freshly initialised scalar head (no dropout), in float32.

    Args:
        source: ``critic.model.path``. ``None``: the policy's architecture and current backbone weights (a
            copy, e.g. after the SFT warm start). ``agentfly:tiny``: the policy's (tiny) configuration with
            random weights. Anything else: ``from_pretrained`` on that causal-LM checkpoint (its LM head is
            dropped).
        policy: The policy model (a ``transformers`` causal LM, before PEFT or Accelerate wrap it).
        trust_remote_code: Passed to ``from_pretrained``.

    Returns:
        A ``transformers`` ``*ForTokenClassification`` model with ``num_labels=1``.
    """
    from transformers import AutoModelForTokenClassification

    if source is None or source == TINY_MODEL:
        config = copy.deepcopy(policy.config)
        config.num_labels, config.classifier_dropout = 1, 0.0
        model = AutoModelForTokenClassification.from_config(config, dtype=torch.float32)
        if source is None:
            model.base_model.load_state_dict(policy.base_model.state_dict())
        return model
    return AutoModelForTokenClassification.from_pretrained(
        source, num_labels=1, classifier_dropout=0.0, dtype=torch.float32, trust_remote_code=trust_remote_code
    )


@dataclass(frozen=True)
class CriticSettings:
    """How the critic is trained: the ``critic`` section as configured, and its batch layout on one process.

    Attributes:
        critic: ``critic.*``: its AdamW optimiser (constant rate, weight decay, gradient clip) and
            ``cliprange_value`` (ε of the clipped value loss: how far V may move from the rollout's V_old).
        mini_batch: Episodes per optimiser step on one process.
        micro_batch: Episodes per forward/backward pass.
        loss_agg_mode: Aggregation of the value loss (a name in ``algorithms.LOSS_AGG_MODES``), the actor's.
        epochs: Passes over each rollout batch (the actor's ``ppo_epochs``).
        completion_width: The completion token budget (``seq-mean-token-sum-norm``'s constant).
    """

    critic: CriticConfig
    mini_batch: int = 16
    micro_batch: int = 16
    loss_agg_mode: str = "token-mean"
    epochs: int = 1
    completion_width: int = 256


class Critic:
    """A value model prepared by Accelerate (like the policy: one process, DDP or FSDP2), with its own AdamW.

    The model and its optimiser are prepared together (FSDP2 shards both), but the critic steps the ``torch``
    optimiser that Accelerate's wrapper holds, not the wrapper: the critic is updated in the middle of the
    policy's gradient-accumulation window, where the wrapper would skip the step.

    Args:
        model: From :func:`build_value_model`.
        settings: How to train it.
        accelerator: The trainer's ``accelerate.Accelerator``.
    """

    def __init__(self, model: Any, settings: CriticSettings, accelerator: Any) -> None:
        self.settings = settings
        self.accelerator = accelerator
        optimizer = torch.optim.AdamW(
            model.parameters(), lr=settings.critic.optim.lr, weight_decay=settings.critic.optim.weight_decay
        )
        self.model, prepared = accelerator.prepare(model, optimizer)
        self.optimizer = prepared.optimizer

    def _values(self, input_ids: Tensor, attention_mask: Tensor, completion_length: int) -> Tensor:
        with self.accelerator.autocast():
            logits = self.model(input_ids=input_ids, attention_mask=attention_mask).logits  # (b, P + T, 1)
        return logits[:, -completion_length - 1 : -1, 0].float()  # (b, T): the position before each token

    @torch.no_grad()
    def values(self, input_ids: Tensor, attention_mask: Tensor, completion_length: int) -> Tensor:
        """V_t of every completion token, in micro-batches, in eval mode.

        Args:
            input_ids: (B, P + T) prompt and completion ids.
            attention_mask: (B, P + T).
            completion_length: T.

        Returns:
            (B, T) float32 values (also on masked tokens; mask them yourself).
        """
        self.model.eval()
        return torch.cat(
            [
                self._values(input_ids[rows], attention_mask[rows], completion_length)
                for rows in row_slices(input_ids.shape[0], self.settings.micro_batch)
            ]
        )

    def update(
        self, input_ids: Tensor, attention_mask: Tensor, mask: Tensor, returns: Tensor, old_values: Tensor
    ) -> dict[str, float]:
        """Fits V to the returns: ``epochs`` passes of mini-batch steps on PPO's clipped value loss.

        Args:
            input_ids: (B, P + T) this process's rollout batch.
            attention_mask: (B, P + T).
            mask: (B, T) loss mask (1 = sampled token).
            returns: (B, T) targets R_t.
            old_values: (B, T) V_old, the values computed on this batch before the update.

        Returns:
            Means over optimiser steps and processes: ``critic/vf_loss``, ``critic/vf_clipfrac`` (fraction of
            valid tokens where the clipped term was larger), ``critic/vpred_mean`` (mean V over valid tokens),
            ``critic/grad_norm``.
        """
        settings, batch, length = self.settings, input_ids.shape[0], mask.shape[1]
        self.model.train()
        totals = torch.zeros(4, device=mask.device)  # vf_loss, vf_clipfrac, vpred_mean, grad_norm
        steps = 0
        for _ in range(settings.epochs):
            for start in range(0, batch, settings.mini_batch):
                micro = row_slices(min(start + settings.mini_batch, batch), settings.micro_batch, start)
                denominator = step_denominator(
                    [mask[rows] for rows in micro], settings.loss_agg_mode, settings.completion_width, self.accelerator
                )
                self.optimizer.zero_grad(set_to_none=True)
                for rows in micro:
                    vpreds = self._values(input_ids[rows], attention_mask[rows], length)
                    loss, clipfrac = value_loss(
                        vpreds,
                        returns[rows],
                        old_values[rows],
                        mask[rows],
                        settings.critic.cliprange_value,
                        settings.loss_agg_mode,
                        denominator=denominator,
                    )
                    loss.backward()
                    valid = mask[rows].float()
                    vpred_mean = (vpreds.detach() * valid).sum() / valid.sum().clamp(min=1)
                    totals[:3] += torch.stack([loss.detach(), clipfrac / len(micro), vpred_mean / len(micro)])
                grad_norm = self.accelerator.clip_grad_norm_(self.model.parameters(), settings.critic.optim.grad_clip)
                totals[3] += whole(grad_norm).float()  # a DTensor under FSDP2
                self.optimizer.step()
                steps += 1
        self.optimizer.zero_grad(set_to_none=True)  # no gradients held through the policy's update and the rollout
        means = self.accelerator.reduce(totals / max(steps, 1), reduction="mean")
        names = ("critic/vf_loss", "critic/vf_clipfrac", "critic/vpred_mean", "critic/grad_norm")
        return dict(zip(names, means.tolist(), strict=True))

    def save(self, directory: str) -> None:
        """Writes the value model (``save_pretrained``) and the optimiser state, both whole (gathered from the
        shards under FSDP), to ``directory``, from the main process (all processes must call this).

        Args:
            directory: The checkpoint's ``critic/`` directory (created).
        """
        model_state = get_model_state_dict(self.model, options=WHOLE_STATE)
        optimizer_state = get_optimizer_state_dict(self.model, self.optimizer, options=WHOLE_STATE)
        if self.accelerator.is_main_process:  # the only one WHOLE_STATE gathers onto
            os.makedirs(directory, exist_ok=True)
            self.accelerator.unwrap_model(self.model).save_pretrained(directory, state_dict=model_state)
            torch.save(optimizer_state, os.path.join(directory, OPTIMIZER_FILE))

    def load(self, directory: str) -> None:
        """Restores what :meth:`save` wrote (every process reads it and keeps its own shard)."""
        model = self.accelerator.unwrap_model(self.model)
        saved = type(model).from_pretrained(directory, dtype=torch.float32)
        set_model_state_dict(self.model, saved.state_dict(), options=WHOLE_STATE)
        state = torch.load(os.path.join(directory, OPTIMIZER_FILE), map_location="cpu", weights_only=True)
        set_optimizer_state_dict(self.model, self.optimizer, state, options=WHOLE_STATE)
