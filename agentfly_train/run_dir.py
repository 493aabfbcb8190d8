"""The layout of a run directory (``trainer.default_local_dir``), and what a run reports.

Every module that writes or reads a run's files names them from here, so the trainer, ``eval`` and ``report`` agree
on the layout without importing each other::

    <run dir>/
      config.json              RUN_CONFIG_FILE: the resolved configuration, written at start
      result.json              RESULT_FILE: the run's :class:`RunResult`
      metrics.jsonl            METRICS_FILE: one record per logged step
      summary.json             SUMMARY_FILE: the end-of-training summary
      train_samples/ val_samples/   SAMPLE_DIRS: step_<N>.jsonl episodes (STEP_FILE)
      eval.jsonl               EVAL_FILE: ``eval``'s scored episodes
      eval_pass_at_k.json      KSCORES_FILE: ``eval``'s pass@k and mean@k
      reference/               REFERENCE_DIR: the reference model of the KL terms
      checkpoint-<N>/ final/   the models (RUN_MODEL_DIR matches their names; FINAL_DIR the last)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

RUN_CONFIG_FILE = "config.json"
"""The run's resolved configuration, written at start (``eval`` of the run's models reads it)."""
RESULT_FILE = "result.json"
"""The run's :class:`RunResult`."""
METRICS_FILE = "metrics.jsonl"
"""One JSON object per logged step, with a ``step`` field."""
SUMMARY_FILE = "summary.json"
"""The end-of-training summary Hugging Face logs once."""
SAMPLE_DIRS = {"val": "val_samples", "train": "train_samples"}
"""Saved episodes by phase, one file per step (:data:`STEP_FILE`)."""
STEP_FILE = "step_{step:06d}.jsonl"
"""A step's saved episodes in a sample directory."""
STEP_FILE_PATTERN = re.compile(r"step_(\d+)\.jsonl")
"""Matches :data:`STEP_FILE`'s names; group 1 is the step."""
EVAL_FILE = "eval.jsonl"
"""``eval``'s scored episodes."""
KSCORES_FILE = "eval_pass_at_k.json"
"""``eval``'s pass@k and mean@k, overall and per task."""
REFERENCE_DIR = "reference"
"""The reference model of the KL terms: the policy as RL starts (after the warm start)."""
FINAL_DIR = "final"
"""The model at the end of training."""
RUN_MODEL_DIR = re.compile(r"final|checkpoint-\d+")
"""The names of a run's model directories: the final model and the checkpoints."""


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
