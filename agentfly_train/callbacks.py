"""Trainer callbacks: validation schedule, console progress bar, ``metrics.jsonl`` and checkpoint pruning."""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from transformers import TrainerCallback

from agentfly_train.checkpoints import prune
from agentfly_train.progress import console_bar, show_latest
from agentfly_train.run_dir import METRICS_FILE, SUMMARY_FILE, parse_jsonl

if TYPE_CHECKING:
    from agentfly_train.trainer import AgentGRPOTrainer

SUMMARY_KEYS = ("train_runtime", "train_samples_per_second", "train_steps_per_second", "train_loss")
"""Keys of the end-of-training summary HF logs once; written to ``summary.json``, not ``metrics.jsonl``."""


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class MetricsFile:
    """``metrics.jsonl``: one JSON object per logged step, with a ``step`` field.

    A line that is not such a record (the last line of a run killed mid-write or of a full disk) is skipped with
    one ``warning:`` line on stderr naming the file and the line.

    Args:
        path: The file; created with its directory if missing.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def truncate_after(self, step: int) -> None:
        """Drops lines of steps after ``step`` (logged by a run that was killed before its next checkpoint)."""
        self.keep(lambda record: record["step"] <= step)

    def keep(self, predicate: Callable[[dict[str, Any]], bool]) -> None:
        """Drops the records for which ``predicate`` is false, and unreadable lines; the file is replaced in one
        step, so a kill meanwhile leaves the old file or the new one."""
        if not self.path.exists():
            return
        kept = [record for record in self.read() if predicate(record)]
        temporary = self.path.with_name(f"{self.path.name}.tmp")
        with temporary.open("w") as file:
            file.writelines(json.dumps(record) + "\n" for record in kept)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, self.path)

    def append(self, step: int, metrics: dict[str, Any]) -> None:
        """Writes one line ``{"step": step, **metrics}``."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        record = {"step": step, **{key: _jsonable(value) for key, value in metrics.items()}}
        with self.path.open("a") as file:
            file.write(json.dumps(record) + "\n")

    def read(self) -> list[dict[str, Any]]:
        """All records, in order; a line that is not one is skipped with a warning."""
        if not self.path.exists():
            return []
        problems: list[str] = []
        records = parse_jsonl(self.path.read_text(errors="replace"), self.path, problems, key="step")
        for problem in problems:
            print(f"warning: {problem}", file=sys.stderr)
        return records


class AgentCallback(TrainerCallback):
    """Runs validation (before training and every ``test_freq`` steps), shows a progress bar with the
    step, reward and ETA, writes every log line to ``metrics.jsonl``, and deletes the checkpoints beyond
    ``max_ckpt_to_keep`` after each save.

    Args:
        trainer: The trainer whose :meth:`~AgentGRPOTrainer.validate` is called.
        test_freq: Validate every this many steps (``<= 0``: never; the last step is always validated
            when validation is on).
        val_before_train: Validate before the first step of a fresh run.
        show_progress: Draw the console progress bar.
        max_ckpt_to_keep: Complete checkpoints to keep in the run directory (``None``: all).
    """

    def __init__(
        self,
        trainer: AgentGRPOTrainer,
        test_freq: int,
        val_before_train: bool,
        show_progress: bool = True,
        max_ckpt_to_keep: int | None = None,
    ) -> None:
        self.trainer = trainer
        self.max_ckpt_to_keep = max_ckpt_to_keep
        self.test_freq = test_freq
        self.val_before_train = val_before_train
        self.show_progress = show_progress
        self.metrics = MetricsFile(Path(trainer.args.output_dir) / METRICS_FILE)
        self.summary: dict[str, Any] = {}
        self._bar: Any = None

    def replace_console_callbacks(self) -> None:
        """Takes the place of the trainer's console output (TRL's printer and progress bar) among its callbacks."""
        from transformers.trainer_callback import PrinterCallback, ProgressCallback

        for console in (PrinterCallback, ProgressCallback):
            self.trainer.remove_callback(console)
        self.trainer.add_callback(self)

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.is_world_process_zero:
            if state.global_step == 0:  # a fresh start redoes everything an earlier attempt logged, step 0 too
                self.metrics.keep(lambda record: False)
            else:
                self.metrics.truncate_after(state.global_step)
            if self.show_progress:
                self._bar = console_bar(state.max_steps, "train", initial=state.global_step)
        if self.val_before_train and state.global_step == 0:
            self.trainer.log(self.trainer.validate(progress=self.show_progress))

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        last = state.global_step >= state.max_steps
        if self.test_freq > 0 and (state.global_step % self.test_freq == 0 or last):
            self.trainer.record_metrics(self.trainer.validate(progress=self.show_progress))
        if self._bar is not None:
            self._bar.update(state.global_step - self._bar.n)

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.is_world_process_zero:
            prune(args.output_dir, self.max_ckpt_to_keep)

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if not state.is_world_process_zero or not logs:
            return
        if any(key in logs for key in SUMMARY_KEYS):
            self.summary.update(logs)
            return
        logs = dict(logs)
        if "step_time" in logs and "timing/rollout_s" in logs:  # the rollout's time holds its weight sync
            logs["timing/update_s"] = logs["step_time"] - logs["timing/rollout_s"]
        self.metrics.append(state.global_step, logs)
        if self._bar is not None:
            show_latest(self._bar, logs, {"reward": "reward", "accuracy": "acc", "val/accuracy": "val_acc"})

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        if state.is_world_process_zero and self.summary:
            path = Path(args.output_dir) / SUMMARY_FILE
            path.write_text(json.dumps(self.summary, indent=2))
