"""The layout of a run directory (``trainer.default_local_dir``), and what a run reports.

Every module that writes or reads a run's files names them from here, so the trainer, ``eval`` and ``report`` agree
on the layout without importing each other, and read the JSON-lines files (:func:`parse_jsonl`) alike::

    <run dir>/
      config.json              RUN_CONFIG_FILE: the resolved configuration, written at start
      result.json              RESULT_FILE: the run's :class:`RunResult`
      metrics.jsonl            METRICS_FILE: one record per logged step
      summary.json             SUMMARY_FILE: the end-of-training summary
      train_samples/ val_samples/   SAMPLE_DIRS: step_<N>.jsonl episodes (STEP_FILE)
      eval.jsonl               EVAL_FILE: ``eval``'s scored episodes
      eval_pass_at_k.json      KSCORES_FILE: ``eval``'s pass@k and mean@k
      reference/               REFERENCE_DIR: the reference model of the KL terms (and of a reference judge)
      judge_server.json .log   JUDGE_SERVER_FILE, JUDGE_SERVER_LOG: the judge server the run started, its output
      checkpoint-<N>/ final/   the models (RUN_MODEL_DIR matches their names; FINAL_DIR the last)
      .lock                    LOCK_FILE: held by the run using the directory (:mod:`~agentfly_train.run_claim`)
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
JUDGE_SERVER_FILE = "judge_server.json"
"""The URL of the judge server the run started (``reward.judge.url=reference``), for every process of the launch."""
JUDGE_SERVER_LOG = "judge_server.log"
"""The output of the judge server the run started."""
FINAL_DIR = "final"
"""The model at the end of training."""
RUN_MODEL_DIR = re.compile(r"final|checkpoint-\d+")
"""The names of a run's model directories: the final model and the checkpoints."""
LOCK_FILE = ".lock"
"""Locked (``fcntl.flock``) by the run using the directory, which writes its pid, host and start time into it."""


def _no_constant(name: str) -> None:
    """``NaN``/``Infinity`` (Python's JSON extension) become null."""
    return None


def parse_json(text: str) -> Any:
    """``text`` as JSON, with ``NaN``/``Infinity`` as null, as strict JSON (the report page's) has no such values.

    Raises:
        json.JSONDecodeError: ``text`` is not JSON.
    """
    return json.loads(text, parse_constant=_no_constant)


def _parse_line(line: str) -> Any:
    """``line`` as JSON, or ``None`` if it is not JSON (cut short, garbled, or nested deeper than the stack)."""
    try:
        return parse_json(line)
    except (json.JSONDecodeError, RecursionError):
        return None


def parse_jsonl(text: str, path: Path, problems: list[str], key: str | None = None) -> list[dict[str, Any]]:
    """The JSON objects of ``text``, the contents of the JSON-lines file ``path``, in order; never raises.

    A line that is not a JSON object, or (with ``key``) has no integer ``key``, is skipped and named with ``path``
    and its line number in ``problems``: a cut last line is a run killed mid-write or a full disk.
    """
    lines = text.splitlines()
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        record = _parse_line(line)
        if not isinstance(record, dict):
            problem = "is not a JSON object"
        elif key is not None and not isinstance(record.get(key), int):
            problem = f"has no integer {key!r}"
        else:
            records.append(record)
            continue
        last = " (the last line: still being written, or the run was killed mid-write)" if number == len(lines) else ""
        problems.append(f"{path} line {number} {problem}{last}; skipped")
    return records


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
