"""The trainer's rollouts: training and validation episodes through the rollout port, their metrics and sample
files."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import sys
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from trl import GRPOTrainer

from agentfly_train.progress import console_bar, show_latest
from agentfly_train.rollout import (
    InfrastructureFailureRate,
    Trajectory,
    failure_notes,
    row_images,
    summarize,
    training_rows,
    turn_table,
)
from agentfly_train.run_dir import SAMPLE_DIRS, STEP_FILE
from agentfly_train.samples import write_samples


class RolloutMixin:
    """The trainer's rollouts. Mixed into :class:`~agentfly_train.trainer.AgentGRPOTrainer`, whose state it uses."""

    @contextlib.contextmanager
    def _generation_model(self) -> Iterator[Any]:
        """The model to sample from, as TRL's own transformers path unwraps it."""
        from trl.models.utils import unwrap_model_for_generation

        autocast = (
            torch.autocast(self.accelerator.device.type, dtype=torch.bfloat16)
            if self.args.bf16
            else contextlib.nullcontext()
        )
        with (
            unwrap_model_for_generation(
                self.model_wrapped,
                self.accelerator,
                gather_deepspeed3_params=self.args.ds3_gather_for_generation,
                gradient_checkpointing_kwargs=self.args.gradient_checkpointing_kwargs,
            ) as model,
            self._dist.summon_full_params(self.model_wrapped, recurse=False),
            autocast,
        ):
            yield model

    def _rollout(self, prompts: list[Any], trainer: GRPOTrainer) -> dict[str, list[Any]]:
        """TRL's ``rollout_func``: multi-turn episodes for the batch's tasks (plus ReMax's greedy baselines)."""
        mode = "train" if self.model.training else "eval"
        start = time.perf_counter()
        if mode == "train":
            trajectories = self.schedule.episodes(self, self._batch_tasks, self.agent.train_params)
            self.record_metrics(self.schedule.metrics())
        else:
            trajectories = self.schedule.run(self, self._batch_tasks, self.agent.val_params)
        self._batch_excluded = [float(t.excluded) for t in trajectories]
        self._batch_turns = turn_table(trajectories, self.agent.budgets.max_turns, self.estimator.reads_anchors)
        if mode == "train":
            self._note_failures(trajectories)  # before the circuit breaker may stop the run
            self._stop_on_failing_infrastructure(trajectories)
        if self.agent.codec.images is not None:
            images = row_images(trajectories, self.agent.turn_rows)
            self._batch_pixels = self.agent.codec.images.pixel_inputs(images, self.accelerator.device)
        if self.estimator.needs_greedy_baseline:
            self._batch_baselines = self._greedy_rewards(self._batch_tasks)
            self._metrics[mode]["reward/greedy_baseline/mean"].append(sum(self._batch_baselines) / len(trajectories))
        self._record_rollout(mode, trajectories, time.perf_counter() - start)
        if mode == "train":
            self._batch_trajectories = trajectories  # saved with their turns' advantages (_save_train_samples)
        return training_rows(trajectories, self.agent.turn_rows)

    def _stop_on_failing_infrastructure(self, trajectories: Sequence[Trajectory]) -> None:
        """The circuit breaker: when more than ``rollout.max_infra_failure_rate`` of the step's episodes (on all
        processes) are excluded for infrastructure failures, saves a checkpoint of the steps trained so far and
        stops the run.

        Raises:
            InfrastructureFailureRate: one line naming the share and the most frequent failure.
        """
        excluded = torch.tensor([t.excluded for t in trajectories], dtype=torch.float32, device=self.accelerator.device)
        rate = float(self.accelerator.gather(excluded).mean())
        if rate <= self.agent.max_infra_failure_rate:
            return
        saved = Path(self.args.output_dir) / f"checkpoint-{self.state.global_step}"
        if self.state.global_step > 0 and not saved.is_dir():  # the steps trained so far (save_freq may not have)
            self._save_checkpoint(self.model, trial=None)
        failures = Counter(t.infra_failure for t in trajectories if t.infra_failure is not None)
        failure, count = failures.most_common(1)[0] if failures else ("on another process", 0)
        raise InfrastructureFailureRate(
            f"{rate:.0%} of the episodes of step {self.state.global_step + 1} met infrastructure failures after "
            f"{self.agent.retries} retries, above rollout.max_infra_failure_rate={self.agent.max_infra_failure_rate}"
            f" (most often, {count} times here: {failure})"
        )

    def _greedy_rewards(self, tasks: Sequence[Mapping[str, Any]]) -> list[float]:
        """ReMax's baseline of each row: the reward of one greedy episode per distinct task."""
        keys = [json.dumps(task, sort_keys=True, default=str) for task in tasks]
        distinct = list(dict.fromkeys(keys))
        greedy = dataclasses.replace(self.agent.val_params, temperature=0.0)
        episodes = self.schedule.run(self, [json.loads(key) for key in distinct], greedy)
        reward = {key: episode.reward for key, episode in zip(distinct, episodes, strict=True)}
        return [reward[key] for key in keys]

    def _record_rollout(self, mode: str, trajectories: Sequence[Trajectory], seconds: float) -> None:
        self._note_failures(trajectories)
        stats = summarize(trajectories)
        env_seconds = stats.pop("env_seconds")
        metrics = self._metrics[mode]
        for name, value in stats.items():
            metrics[name].append(value)
        sampled = sum(sum(t.env_mask) for t in trajectories)
        metrics["timing/rollout_s"].append(seconds)
        metrics["timing/env_s"].append(env_seconds)
        metrics["throughput/gen_tokens_per_s"].append(sampled / max(seconds - env_seconds, 1e-9))
        for name, value in self._remote_failures().items():
            metrics[name].append(value)
        for name, value in self.agent.judge.metrics().items() if self.agent.judge is not None else ():
            metrics[name].append(value)

    def _note_failures(self, trajectories: Sequence[Trajectory]) -> None:
        """Prints, on the main process, one line on stderr per reward or infrastructure failure message not printed
        before."""
        notes = failure_notes(trajectories, self._failures_noted)
        if self.accelerator.is_main_process:
            for note in notes:
                print(note, file=sys.stderr)

    def _remote_failures(self) -> dict[str, float]:
        """Since the last call: ``env/remote_failures``, env resets and steps lost to a timeout (any runtime) or a
        dead Ray actor; ``env/health_restarts``, env hosts the health checks before each batch found dead and
        replaced; ``env/servers_down``, env servers they found down (summed over the checks)."""
        health, self.agent.health = self.agent.health, Counter()
        return {
            "env/remote_failures": sum(self.agent.pool.pop_failures().values()),
            "env/health_restarts": health["restarted"],
            "env/servers_down": health["servers_down"],
        }

    def _save_train_samples(self, turn_advantages: Tensor) -> None:
        """Appends up to ``log_train_generations`` episodes of the rollout batch (:attr:`_batch_trajectories`) to
        ``train_samples/step_<N>.jsonl`` of the coming step (the file is started afresh by the step's first rollout,
        so a resumed run does not duplicate lines), their screenshots as PNG files
        (:func:`~agentfly_train.samples.write_samples`), each with the advantage of each of its turns.

        Args:
            turn_advantages: (E, K) float, for each of this process's E episodes and each turn slot, the mean
                advantage of the turn's trained tokens (the turn's advantage, for an estimator with one per turn or
                per episode); NaN for a turn that trains no token (saved as ``null``).
        """
        if not self.log_train_generations or not self.accelerator.is_main_process:
            return
        step = self.state.global_step + 1
        path = Path(self.args.output_dir) / SAMPLE_DIRS["train"] / STEP_FILE.format(step=step)
        written = self._train_samples_written if self._train_samples_step == step else 0
        self._train_samples_step = step
        kept = self._batch_trajectories[: max(self.log_train_generations - written, 0)]
        advantages = [
            [None if math.isnan(value) else value for value in row[: len(t.turn_rewards)]]
            for t, row in zip(kept, turn_advantages.tolist(), strict=False)
        ]
        write_samples(path, kept, append=bool(written), turn_advantages=advantages)
        self._train_samples_written = written + len(kept)

    def validate(self, progress: bool = False) -> dict[str, float]:
        """Runs the validation rows through the envs; returns ``val/*`` metrics and writes sample trajectories.

        Args:
            progress: Draw a console bar over the rows (on the main process), with the accuracy so far.

        Returns:
            ``val/accuracy``, ``val/reward/mean`` and the other :func:`summarize` statistics, prefixed ``val/``.
        """
        if not self.val_rows:
            return {}
        start = time.perf_counter()
        trajectories = []
        shown = progress and self.is_world_process_zero()
        bar = console_bar(len(self.val_rows), "validate", leave=False) if shown else None
        for first in range(0, len(self.val_rows), self.val_batch_size):
            rows = self.val_rows[first : first + self.val_batch_size]
            trajectories += self.schedule.run(self, rows, self.agent.val_params)
            if bar is not None:
                bar.update(len(rows))
                accuracy = sum(trajectory.correct for trajectory in trajectories) / len(trajectories)
                show_latest(bar, {"accuracy": accuracy}, {"accuracy": "acc"})
        if bar is not None:
            bar.close()
        stats = summarize(trajectories)
        self._note_failures(trajectories)
        stats.pop("env_seconds")
        stats["timing/s"] = time.perf_counter() - start
        stats.update(self._remote_failures())
        if self.accelerator.is_main_process and self.log_val_generations:
            path = Path(self.args.output_dir) / SAMPLE_DIRS["val"] / STEP_FILE.format(step=self.state.global_step)
            write_samples(path, trajectories[: self.log_val_generations])
        return {f"val/{name}": value for name, value in stats.items()}

    def record_metrics(self, metrics: Mapping[str, float]) -> None:
        """Adds metrics to the current step's log line."""
        for name, value in metrics.items():
            self._metrics["train"][name].append(value)

    def close(self) -> None:
        """Stops the generator, the env-stepping threads, closes the envs and releases the generation backend."""
        self.schedule.close()
        self.port.close()
