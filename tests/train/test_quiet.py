"""agentfly_train.quiet: each filter drops the line it names, from the source it names, and nothing else."""

from __future__ import annotations

import logging
import warnings

import pytest
import torch.distributed
from transformers import TrainingArguments

from agentfly_train import quiet
from tests.helpers.processes import free_port


@pytest.mark.parametrize(
    ("message", "category", "source"),
    [
        (
            "TRL currently supports vLLM versions from 0.22.0 to 0.31.0. You have version 0.32.0 installed. We "
            "recommend installing a supported version to avoid compatibility issues.",
            UserWarning,
            "trl.generation.vllm_client",
        ),
        (
            "`is_gradient_checkpointing` is deprecated and will be removed in v6. Use `is_activation_checkpointing` "
            "instead.",
            FutureWarning,
            "transformers.modeling_utils",
        ),
    ],
)
def test_a_warning_is_dropped_from_its_source_only(message, category, source):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet.install()
        warnings.warn_explicit(message, category, f"{source.replace('.', '/')}.py", 1, module=source)
        warnings.warn_explicit(message, category, "agentfly_train/train.py", 1, module="agentfly_train.train")
    assert [(str(w.message), w.filename) for w in caught] == [(message, "agentfly_train/train.py")]


class Records(logging.Handler):
    """Keeps the messages of the records it handles."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_the_ddp_hint_is_dropped_beside_a_one_process_group(tmp_path):
    """vLLM's in-process engine leaves a one-process gloo group; ``TrainingArguments`` built after it hint at DDP
    (checked here with the filter off), which a world of one does not need."""
    logger, records = logging.getLogger("transformers.training_args"), Records()
    logger.addHandler(records)
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    try:
        quiet.install()
        logger.removeFilter(quiet._not_a_one_process_group_warning)
        _ = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to=[]).device
        quiet.install()
        _ = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to=[]).device
    finally:
        torch.distributed.destroy_process_group()
        logger.removeHandler(records)
    hints = [m for m in records.messages if m.startswith("torch.distributed process group is initialized")]
    assert len(hints) == 1  # the run with the filter off
