"""The trainer's extra forward passes: log-probs of the current policy, and whole logits where TRL's fused
LM head never forms them (the exact KL)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch import Tensor

from agentfly_train.algorithms import (
    full_kl,
)
from agentfly_train.batch import (
    pixel_inputs,
    row_slices,
    sequences,
)


class ForwardsMixin:
    """The trainer's extra forward passes; mixed into :class:`~agentfly_train.trainer.AgentGRPOTrainer`."""

    @torch.no_grad()
    def _policy_logps(self, output: Mapping[str, Any]) -> Tensor:
        """(B, T) log-probs of the completion tokens under the current policy, as TRL computes old log-probs."""
        from trl.models.utils import disable_gradient_checkpointing

        input_ids, attention_mask = sequences(output)
        with disable_gradient_checkpointing(self.model, self.args.gradient_checkpointing_kwargs):
            logps, _, _ = self._get_per_token_logps_and_entropies(
                self.model,
                input_ids,
                attention_mask,
                output["completion_ids"].shape[1],
                batch_size=self.args.per_device_train_batch_size,
                **pixel_inputs(output),
            )
        return logps

    @torch.no_grad()
    def _full_kl(self, output: Mapping[str, Any]) -> Tensor:
        """(B, T) exact KL(π ‖ π_ref) at each completion position of this process's rows, in chunks of
        ``per_device_train_batch_size`` rows (two (b, T, V) logits tensors at a time)."""
        from trl.models.utils import disable_gradient_checkpointing

        input_ids, attention_mask = sequences(output)
        length = output["completion_ids"].shape[1]
        kl = []
        with disable_gradient_checkpointing(self.model, self.args.gradient_checkpointing_kwargs):
            for rows in row_slices(input_ids.shape[0], self.args.per_device_train_batch_size):
                logits, _ = self._completion_logits(self.model, input_ids[rows], attention_mask[rows], length)
                with self._reference_model() as reference:
                    ref_logits, _ = self._completion_logits(reference, input_ids[rows], attention_mask[rows], length)
                kl.append(full_kl(logits, ref_logits))
        return torch.cat(kl)

    def _completion_logits(
        self, model: Any, input_ids: Tensor, attention_mask: Tensor, logits_to_keep: int, aux_loss: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        """The logits TRL's fused LM head scores the completion with, materialised, through the model's own forward.

        Args:
            model: The policy (wrapped or not) or the reference model.
            input_ids: (b, L) prompt and completion ids.
            attention_mask: (b, L).
            logits_to_keep: T, the completion length (the last T positions of ``input_ids``).
            aux_loss: Also return an MoE model's load-balancing loss.

        Returns:
            ((b, T, V) logits predicting the completion tokens divided by the sampling temperature, the aux loss
            or ``None``).
        """
        extra = {"output_router_logits": True} if aux_loss else {}
        with self.accelerator.autocast():
            outputs = model(
                input_ids=input_ids,
                attention_mask=attention_mask,
                logits_to_keep=logits_to_keep + 1,
                use_cache=False,
                **extra,
            )
        return outputs.logits[:, :-1] / self.temperature, outputs.get("aux_loss")

    @contextlib.contextmanager
    def _reference_model(self) -> Iterator[Any]:
        """The KL reference as TRL scores it: ``ref_model``, or with PEFT the policy with its adapter switched."""
        if self.ref_model is not None:
            yield self.ref_model
            return
        from trl.trainer.utils import use_adapter

        model = self.accelerator.unwrap_model(self.model)
        with use_adapter(model, adapter_name="ref" if "ref" in model.peft_config else None):
            yield self.model
