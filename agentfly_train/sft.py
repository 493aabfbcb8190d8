"""Supervised warm start: fine-tuning the policy on tokenised demonstrations
(:mod:`~agentfly_train.demonstrations`) in phases, through TRL's ``SFTTrainer`` on the pre-tokenised rows
(``input_ids`` + ``assistant_masks``); a vision-language policy's batches also get their rows' pixel inputs
(:class:`PixelCollator`).
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentfly_train.vision import ImageInputs


@dataclass(frozen=True)
class WarmStartPhase:
    """One phase of a warm start: its rows, trained for ``steps`` optimiser steps on one learning-rate schedule.

    Attributes:
        rows: Tokenised demonstrations (:func:`~agentfly_train.demonstrations.golden_token_rows`).
        steps: Optimiser steps.
        lr_scheduler_type: The rate after the phase's warm-up: ``linear`` (to 0), ``cosine``, ``constant`` or
            ``constant_with_warmup`` (transformers' schedule names).
    """

    rows: Sequence[Mapping[str, list[Any]]]
    steps: int
    lr_scheduler_type: str = "linear"


@dataclass(frozen=True)
class PixelCollator:
    """TRL's collator of pre-tokenised rows (``DataCollatorForLanguageModeling``: padding, labels from the
    assistant masks), plus the pixel inputs of the batch's rows' images and their image token types
    (``mm_token_type_ids``), as the RL loss forward passes them. The dataset's rows hold their index (``row``) into
    ``images``, whose PIL images stay in memory, as the rollout's do, instead of a dataset column (which would make
    ``SFTTrainer`` take the rows for raw vision data, to render and tokenise itself).

    Attributes:
        collate: TRL's collator.
        images: Per dataset row, its images in the order of their placeholder tokens.
        inputs: The policy's image inputs.
    """

    collate: Any
    images: Sequence[Sequence[Any]]
    inputs: ImageInputs

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        """The batch of ``examples`` (rows with ``input_ids``, ``labels`` and ``row``): TRL's padded ``input_ids``,
        ``attention_mask`` and ``labels``, plus, where a row has images, ``pixel_values``, ``image_grid_thw`` and
        ``mm_token_type_ids`` ((B, L) int, 1 on image tokens)."""
        batch = self.collate(examples)
        pixels = self.inputs.pixel_inputs([self.images[example["row"]] for example in examples])
        if pixels:
            pixels.pop("num_images")  # the model takes the batch's images in row order
            batch |= pixels | {"mm_token_type_ids": self.inputs.token_types(batch["input_ids"])}
        return batch


def warm_start(
    model: Any,
    tokenizer: Any,
    phases: Sequence[WarmStartPhase],
    *,
    lr: float,
    batch_size: int,
    use_cpu: bool,
    seed: int,
    output_dir: str | None = None,
    bf16: bool = False,
    warmup_ratio: float = 0.05,
    images: ImageInputs | None = None,
    show_progress: bool = False,
) -> tuple[Any, float]:
    """Fine-tunes ``model`` on each phase's rows in turn, each phase a trainer of its own that warms up to ``lr``.

    Args:
        model: The policy.
        tokenizer: Its tokenizer (for padding).
        phases: The phases (:func:`~agentfly_train.demonstrations.warm_start_phases`).
        lr: Peak learning rate.
        batch_size: Rows per step.
        use_cpu: Train on CPU.
        seed: Data order and dropout seed.
        output_dir: Scratch directory for TRL (nothing is saved; ``None``: a temporary one).
        bf16: bfloat16 mixed precision (must match the RL trainer's: Accelerate's state is per process).
        warmup_ratio: Share of each phase's steps over which the rate rises linearly to ``lr``.
        images: A vision-language policy's image inputs: the loss forward gets the pixel inputs of the rows'
            ``images`` (:class:`PixelCollator`).
        show_progress: Draw a console bar over all the steps (on the main process), the loss beside it.

    Returns:
        ``(model, loss)``: the fine-tuned policy, whole (a copy where FSDP2 sharded it: each phase's trainer
        prepares a whole model anew), and the mean training loss over all steps (nats per assistant token).
    """
    from accelerate import PartialState
    from datasets import Dataset
    from transformers.trainer_callback import PrinterCallback
    from trl import SFTConfig, SFTTrainer
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    from agentfly_train.progress import StepBar, console_bar
    from agentfly_train.sharding import unsharded_copy
    from agentfly_train.trl_args import checkpointing_argument

    steps = sum(phase.steps for phase in phases)
    scratch = tempfile.TemporaryDirectory() if output_dir is None else contextlib.nullcontext(output_dir)
    bar = console_bar(steps, "warm start") if show_progress and PartialState().is_main_process else None
    total = 0.0
    with scratch as scratch_dir, bar if bar is not None else contextlib.nullcontext():
        for phase in phases:
            args = SFTConfig(
                output_dir=scratch_dir,
                max_steps=phase.steps,
                learning_rate=lr,
                lr_scheduler_type=phase.lr_scheduler_type,
                warmup_steps=round(warmup_ratio * phase.steps),
                per_device_train_batch_size=batch_size,
                **checkpointing_argument(SFTConfig, False),
                report_to=[],
                save_strategy="no",
                logging_steps=max(phase.steps // 5, 1),
                disable_tqdm=True,
                use_cpu=use_cpu,
                bf16=bf16,
                seed=seed,
                max_length=None,
                remove_unused_columns=images is None,  # the rows' ``row``, for the collator
            )
            dataset = [{"input_ids": row["input_ids"], "assistant_masks": row["assistant_masks"]} for row in phase.rows]
            collator = None
            if images is not None:
                dataset = [row | {"row": n} for n, row in enumerate(dataset)]
                pad = tokenizer.eos_token_id if tokenizer.pad_token_id is None else tokenizer.pad_token_id
                collator = PixelCollator(
                    DataCollatorForLanguageModeling(pad), [row["images"] for row in phase.rows], images
                )
            trainer = SFTTrainer(
                model=model,
                args=args,
                data_collator=collator,
                train_dataset=Dataset.from_list(dataset),
                processing_class=tokenizer,
                callbacks=[StepBar(bar, {"loss": "loss"})] if bar is not None else None,
            )
            trainer.remove_callback(PrinterCallback)  # its raw log dicts on stdout; the run reports the mean loss
            total += trainer.train().training_loss * phase.steps
            tokenizer.padding_side = "left"
            model = unsharded_copy(model)  # collective under FSDP2: every process runs the same phases
    return model, total / steps
