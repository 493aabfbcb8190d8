"""Rollout schedules: how a rollout step's training episodes reach the trainer, chosen once from the configuration
(:data:`ROLLOUT_SCHEDULES`, ``async_training.enable``).

- ``sync`` (:class:`SyncSchedule`): each rollout step plays its batch's tasks with the current weights, then the
  trainer updates; generation waits for the update and the update for the batch's slowest episode.
- ``async`` (:class:`AsyncSchedule`): a stream of episodes (:meth:`~agentfly_train.rollout.AgentRollout.open_stream`:
  the turn loop's :class:`~agentfly_train.rollout.stream.EpisodeStream`, or an agent program's) keeps producing
  episodes with the newest weights the generator holds, up to ``async_training.staleness_threshold`` batches ahead;
  the trainer takes a batch of finished groups (each the ``agent.num_chains`` episodes of one prompt) as soon as
  enough are ready. A backend with its own weights (vLLM) is pumped by a background thread, so generation goes on
  while the trainer updates; one that samples from the policy itself (HF) is pumped by the trainer while it waits for
  groups, so episodes still run ahead and across updates, without the overlap in time.

The trainer asks its schedule for episodes (:meth:`RolloutSchedule.episodes`), for episodes played now with the
current weights (:meth:`RolloutSchedule.run`: validation, greedy baselines), whether the sampler's log-probs are
PPO's old log-probs (:attr:`RolloutSchedule.behaviour_is_old`), for its metrics, and for its state to checkpoint.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from agentfly_envs.registry import Registry
from agentfly_train.generation import SamplingParams
from agentfly_train.rollout import EngineTime, Trajectory
from agentfly_train.rollout.judging import judged_as_they_end
from agentfly_train.rollout.stream import Episodes, run_to_end

if TYPE_CHECKING:
    from agentfly_train.config.schema import AsyncTrainingConfig, TrainConfig


class RolloutSchedule(ABC):
    """How training episodes reach the trainer (see the module's docstring).

    A new schedule subclasses this, registers itself with ``@ROLLOUT_SCHEDULES.register(name)`` and is built from
    the configuration by :meth:`build`.
    """

    behaviour_is_old: bool = False
    """The sampler's log-probabilities are PPO's old log-probabilities (``async_training.use_rollout_log_probs``)."""

    def __init__(self) -> None:
        self._interval_start: float | None = None
        self._engine_busy_s = 0.0
        self._trainer_wait_s = 0.0

    @classmethod
    @abstractmethod
    def build(cls, config: TrainConfig, rows: Sequence[Mapping[str, Any]]) -> RolloutSchedule:
        """The schedule of a run over its training ``rows``."""

    @abstractmethod
    def episodes(self, trainer: Any, tasks: Sequence[Mapping[str, Any]], params: SamplingParams) -> list[Trajectory]:
        """A rollout step's training episodes, ``len(tasks)`` of them in groups of ``trainer.num_generations``.

        Args:
            trainer: The :class:`~agentfly_train.trainer.AgentGRPOTrainer`.
            tasks: The rows TRL's sampler drew for this step (the synchronous schedule plays them).
            params: Training sampling.
        """

    def run(self, trainer: Any, tasks: Sequence[Mapping[str, Any]], params: SamplingParams) -> list[Trajectory]:
        """Episodes of ``tasks`` played now, with the policy's current weights (validation, greedy baselines)."""
        with trainer.port.sampling() as backend:
            return trainer.port.agent.run(backend, tasks, params)

    def timing_metrics(self) -> dict[str, float]:
        """``timing/generator_idle_frac`` (share of the wall time since the last step in which the engine had no
        request) and ``timing/trainer_idle_frac`` (share spent by the trainer waiting for episodes)."""
        now = time.perf_counter()
        start, self._interval_start = self._interval_start, now
        wall = max(now - (start if start is not None else now - self._trainer_wait_s), 1e-9)
        metrics = {
            "timing/generator_idle_frac": max(0.0, 1.0 - self._engine_busy_s / wall),
            "timing/trainer_idle_frac": min(1.0, self._trainer_wait_s / wall),
        }
        self._engine_busy_s = self._trainer_wait_s = 0.0
        return metrics

    def metrics(self) -> dict[str, float]:
        """The schedule's metrics of the last rollout step (:meth:`timing_metrics` and the schedule's own)."""
        return self.timing_metrics()

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps of the schedule (empty: nothing)."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores :meth:`state_dict` (a resumed run)."""
        return

    def close(self) -> None:
        """Stops what the schedule runs (threads)."""
        return


ROLLOUT_SCHEDULES: Registry[type[RolloutSchedule]] = Registry(
    "rollout schedule", where="agentfly_train/trainer/schedules.py", how="@ROLLOUT_SCHEDULES.register(name)"
)
"""Schedules by name: ``sync``, and ``async`` with ``async_training.enable=true``."""


def build_schedule(config: TrainConfig, rows: Sequence[Mapping[str, Any]]) -> RolloutSchedule:
    """The schedule ``async_training.enable`` picks, over the training ``rows``."""
    return ROLLOUT_SCHEDULES.get("async" if config.async_training.enable else "sync").build(config, rows)


@ROLLOUT_SCHEDULES.register("sync")
class SyncSchedule(RolloutSchedule):
    """Rollout, then update: each step plays the tasks TRL's sampler drew, with the current weights."""

    @classmethod
    def build(cls, config: TrainConfig, rows: Sequence[Mapping[str, Any]]) -> SyncSchedule:
        """See :meth:`RolloutSchedule.build`."""
        return cls()

    def episodes(self, trainer: Any, tasks: Sequence[Mapping[str, Any]], params: SamplingParams) -> list[Trajectory]:
        """See :meth:`RolloutSchedule.episodes`; logs ``timing/weight_sync_s`` and ``timing/engine_idle_frac``."""
        timing, synced = EngineTime(), time.perf_counter()
        with trainer.port.sampling() as backend:
            start = time.perf_counter()
            trainer.record_metrics({"timing/weight_sync_s": start - synced})
            trajectories = trainer.port.agent.run(backend, tasks, params, timing)
        trainer.record_metrics({"timing/engine_idle_frac": timing.idle_fraction})
        self._engine_busy_s += timing.busy_s
        self._trainer_wait_s += time.perf_counter() - synced
        return trajectories


@dataclass
class PromptSource:
    """The training prompts in epoch order (shuffled each epoch with the run's seed, or in file order), this
    process's share of them: prompt ``order[j]`` goes to process ``j % num_processes``.

    Prompts handed out but not trained are kept (:attr:`pending`): a resumed run hands them out first.

    Attributes:
        num_rows: Training rows.
        seed: The run's seed.
        shuffle: Shuffle each epoch.
        process_index: This process.
        num_processes: Training processes.
        epoch: The epoch being handed out.
        position: The next position in the epoch's order.
        pending: Row indices handed out and not yet trained, oldest first.
        replay: Row indices to hand out before new ones (a resumed run's pending prompts).
    """

    num_rows: int
    seed: int
    shuffle: bool
    process_index: int = 0
    num_processes: int = 1
    epoch: int = 0
    position: int = 0
    pending: list[int] = field(default_factory=list)
    replay: list[int] = field(default_factory=list)

    def next(self) -> int:
        """The next row index for this process (now pending)."""
        if self.replay:
            row = self.replay.pop(0)
        else:
            order = self._order()
            while self.position % self.num_processes != self.process_index or self.position >= len(order):
                if self.position >= len(order):
                    self.epoch, self.position, order = self.epoch + 1, 0, None
                    order = self._order()
                else:
                    self.position += 1
            row = order[self.position]
            self.position += 1
        self.pending.append(row)
        return row

    def done(self, row: int) -> None:
        """``row``'s group was trained (or dropped): it is no longer pending."""
        self.pending.remove(row)

    def state_dict(self) -> dict[str, Any]:
        """Epoch, position and the pending prompts (replayed first after a resume)."""
        return {"epoch": self.epoch, "position": self.position, "pending": self.replay + self.pending}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores :meth:`state_dict`; its pending prompts are handed out again first (their episodes were lost)."""
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
        self.replay, self.pending = [int(row) for row in state["pending"]], []

    def _order(self) -> list[int]:
        if not self.shuffle:
            return list(range(self.num_rows))
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        return torch.randperm(self.num_rows, generator=generator).tolist()


@dataclass
class _Group:
    row: int
    keys: list[int]
    slots: list[int]
    judged: Future[None] | None = None
    """The LLM judge's scoring of the group, started when its episodes ended (``None``: no judge)."""


@ROLLOUT_SCHEDULES.register("async")
class AsyncSchedule(RolloutSchedule):
    """Off-policy asynchronous training (see the module's docstring and
    :class:`~agentfly_train.config.AsyncTrainingConfig` for the settings).

    Args:
        settings: ``async_training.*``.
        rows: The training rows.
        prompts_per_step: ``data.train_batch_size`` (all processes together).
        seed: The run's seed (the prompts' order).
        shuffle: Shuffle the prompts each epoch.
    """

    @classmethod
    def build(cls, config: TrainConfig, rows: Sequence[Mapping[str, Any]]) -> AsyncSchedule:
        """See :meth:`RolloutSchedule.build`."""
        return cls(config.async_training, rows, config.data.train_batch_size, config.trainer.seed, config.data.shuffle)

    def __init__(
        self,
        settings: AsyncTrainingConfig,
        rows: Sequence[Mapping[str, Any]],
        prompts_per_step: int,
        seed: int = 0,
        shuffle: bool = True,
    ) -> None:
        super().__init__()
        self.settings = settings
        self.rows = list(rows)
        self.prompts_per_step = prompts_per_step
        self.behaviour_is_old = settings.use_rollout_log_probs
        self.source = PromptSource(len(self.rows), seed, shuffle)
        self.trainer: Any = None
        self.stream: Episodes | None = None
        self.lock = threading.RLock()
        self.ready = threading.Condition(self.lock)
        self.groups: dict[int, _Group] = {}
        self.finished_groups: list[int] = []
        self.start_budget = 0
        self.draining = False
        self.dropped = 0
        self.synced_version = 0
        self._next_group = 0
        self._next_key = -1  # episodes played now (validation) count down, training episodes' keys up
        self._free_slots: list[int] = []
        self._envs: list[Any] = []
        self._thread: threading.Thread | None = None
        self._stop = False
        self._error: BaseException | None = None
        self._loaded_state: Mapping[str, Any] | None = None

    # --- binding to the trainer ---------------------------------------------------------------------------------

    def _bind(self, trainer: Any) -> None:
        """Builds the stream over the trainer's backend, envs and settings, at the first rollout step."""
        if self.stream is not None:
            return
        self.trainer = trainer
        accelerator, chains = trainer.accelerator, trainer.num_generations
        processes = accelerator.num_processes
        if self.prompts_per_step % processes:
            raise ValueError(
                f"async_training: data.train_batch_size={self.prompts_per_step} prompts do not split over "
                f"{processes} processes (each takes whole groups)"
            )
        self.source.process_index, self.source.num_processes = accelerator.process_index, processes
        if self._loaded_state is not None:
            self.source.load_state_dict(self._loaded_state["source"])
        self.groups_per_step = self.prompts_per_step // processes
        self.capacity = math.ceil((1 + self.settings.staleness_threshold) * self.groups_per_step)
        self.start_budget = self.capacity
        reserved = max(trainer.val_batch_size, self.groups_per_step * chains)  # slots run() and the sync loop use
        self._envs = trainer.port.agent.pool.take(reserved + self.capacity * chains)[reserved:]
        self._free_slots = list(range(len(self._envs)))
        self.chains = chains
        self.synced_version = self.version()
        self.stream = trainer.port.agent.open_stream(trainer.port.backend)
        self.stream.version = self.synced_version
        if trainer.port.backend.has_own_weights:
            trainer.port.sync_weights()  # the engine may hold weights from before a resumed checkpoint
            self._thread = threading.Thread(target=self._generate, name="agentfly-generator", daemon=True)
            self._thread.start()

    def version(self) -> int:
        """The trainer's policy version: rollout steps it has been updated on."""
        return self.trainer.state.global_step // self.trainer.optimizer_steps_per_rollout

    # --- the generator --------------------------------------------------------------------------------------------

    def _start_groups(self) -> None:
        """Starts new groups while the budget allows (``staleness_threshold``) and no sync is draining."""
        while not self.draining and self.start_budget > 0 and len(self._free_slots) >= self.chains:
            row = self.source.next()
            group_id, self._next_group = self._next_group, self._next_group + 1
            slots = [self._free_slots.pop(0) for _ in range(self.chains)]
            keys = [group_id * self.chains + chain for chain in range(self.chains)]
            self.groups[group_id] = _Group(row, keys, slots)
            for key, slot in zip(keys, slots, strict=True):
                self.stream.start(key, self._envs[slot], self.rows[row], self.trainer.port.agent.train_params)
            self.start_budget -= 1

    def _pump(self, wait_for_env: bool) -> bool:
        """Starts what the budget allows, pumps the stream once, notes completed groups; whether the engine
        stepped (the caller holds the lock)."""
        self._start_groups()
        start = time.perf_counter()
        stepped = self.stream.pump(wait_for_env)
        if stepped:
            self._engine_busy_s += time.perf_counter() - start
        finished = set(self.stream.finished)
        for group_id, group in self.groups.items():
            if group_id not in self.finished_groups and all(key in finished for key in group.keys):
                self.finished_groups.append(group_id)
                self._judge(group)
                self.ready.notify_all()
        return stepped

    def _judge(self, group: _Group) -> None:
        """Hands a finished group to the LLM judge, if one scores the episodes: it works while the generator goes on."""
        judge = self.trainer.port.agent.judge
        if judge is not None:
            episodes = [self.stream.peek(key) for key in group.keys]
            group.judged = judge.submit(episodes, [self.rows[group.row]] * len(episodes))

    def _generate(self) -> None:
        """The background generator: pumps the stream whenever it has work, else waits for an env step or for the
        trainer (a sync, a taken group)."""
        try:
            while not self._stop:
                with self.lock:
                    stepped = self._pump(wait_for_env=False)
                    futures = [] if stepped else self.stream.env_futures()
                if stepped:
                    continue
                if futures:
                    wait(futures, timeout=0.05, return_when=FIRST_COMPLETED)
                else:
                    with self.lock:
                        self.ready.wait(timeout=0.05)
        except BaseException as error:  # re-raised in the trainer's thread, which waits on this one
            self._error = error
            with self.lock:
                self.ready.notify_all()

    # --- the trainer's side ---------------------------------------------------------------------------------------

    def episodes(self, trainer: Any, tasks: Sequence[Mapping[str, Any]], params: SamplingParams) -> list[Trajectory]:
        """See :meth:`RolloutSchedule.episodes`: syncs the weights when due, then takes the next
        ``len(tasks) / num_chains`` finished groups (returned in the order they were started), dropping and counting
        those whose oldest token is more than ``max_staleness`` versions old. ``tasks`` are not played: the generator
        draws its own prompts (:class:`PromptSource`)."""
        self._bind(trainer)
        trainer.port.agent.check_health()  # the generator's envs too: a dead host replaced before its next reset
        self._sync_if_due()
        version, wanted = self.version(), len(tasks) // self.chains
        waited, taken, staleness = time.perf_counter(), {}, []
        if not trainer.port.backend.has_own_weights:
            self.stream.version = version  # it samples from the policy as it is now
        with self.lock:
            self.in_flight_at_take = self.stream.in_flight
            while len(taken) < wanted:
                self._raise_generator_error()
                if not self.finished_groups:
                    if self._thread is None:
                        with trainer.port.sampling():  # the policy itself samples (unsharded under FSDP2)
                            self._pump(wait_for_env=True)
                    else:
                        self.ready.wait(timeout=0.5)
                    continue
                group_id = min(self.finished_groups)
                group = self._retire(group_id)
                lag = version - min(self.stream.oldest_version(key) for key in group.keys)
                episodes = [self.stream.take(key) for key in group.keys]
                if group.judged is not None:
                    group.judged.result()
                if lag > self.settings.max_staleness:
                    self.dropped += len(episodes)
                    continue
                staleness += [lag] * len(episodes)
                taken[group_id] = episodes
            self.ready.notify_all()
        self._trainer_wait_s += time.perf_counter() - waited
        self._staleness = staleness
        return [episode for group_id in sorted(taken) for episode in taken[group_id]]

    def _retire(self, group_id: int) -> _Group:
        """Takes a finished group out of the budget and frees its env slots and its prompt."""
        self.finished_groups.remove(group_id)
        group = self.groups.pop(group_id)
        self._free_slots += group.slots
        self.source.done(group.row)
        return group

    def _raise_generator_error(self) -> None:
        if self._error is not None:
            raise self._error

    def _sync_if_due(self) -> None:
        """Hands the generator the policy's weights every ``trigger_parameter_sync_step`` updates (a backend that
        samples from the policy itself has them after every update); without ``partial_rollout`` it first lets the
        episodes in flight end (starting none). The generator may then start the groups that bring those not yet
        trained back up to ``(1 + staleness_threshold)`` steps' (no more until the next sync)."""
        version, own_weights = self.version(), self.trainer.port.backend.has_own_weights
        if version - self.synced_version < (self.settings.trigger_parameter_sync_step if own_weights else 1):
            return
        with self.lock:
            if not self.settings.partial_rollout and self._thread is not None:
                self.draining = True
                while self.stream.in_flight and self._error is None:
                    self.ready.wait(timeout=0.5)
                self.draining = False
                self._raise_generator_error()
            start = time.perf_counter()
            if own_weights:
                self.trainer.port.sync_weights()
            self.trainer.record_metrics({"timing/weight_sync_s": time.perf_counter() - start})
            self.stream.version = self.synced_version = version
            self.start_budget = self.capacity - len(self.groups)
            self.ready.notify_all()

    def run(self, trainer: Any, tasks: Sequence[Mapping[str, Any]], params: SamplingParams) -> list[Trajectory]:
        """See :meth:`RolloutSchedule.run`: the episodes go through the generator's stream (its engine may hold
        training requests), with the current weights, while the background generator waits."""
        self._bind(trainer)

        def play(ended: Callable[[int, Trajectory], None] | None) -> list[Trajectory]:
            with self.lock:  # released before the last verdicts are waited for
                if trainer.port.backend.has_own_weights and self.synced_version != self.version():
                    trainer.port.sync_weights()
                    self.stream.version = self.synced_version = self.version()
                keys = range(self._next_key, self._next_key - len(tasks), -1)
                self._next_key -= len(tasks)
                envs = trainer.port.agent.pool.take(len(tasks))
                with contextlib.nullcontext() if trainer.port.backend.has_own_weights else trainer.port.sampling():
                    return run_to_end(self.stream, envs, tasks, params, keys, ended)

        return judged_as_they_end(trainer.port.agent.judge, tasks, play)

    def metrics(self) -> dict[str, float]:
        """:meth:`RolloutSchedule.timing_metrics` and ``async/staleness_mean``, ``async/staleness_max`` (versions
        between the trainer's policy and each trained episode's oldest token), ``async/dropped`` (episodes dropped
        for staleness so far), ``async/in_flight`` (episodes in flight when the step's groups were taken)."""
        staleness = getattr(self, "_staleness", []) or [0]
        return {
            **self.timing_metrics(),
            "async/staleness_mean": sum(staleness) / len(staleness),
            "async/staleness_max": float(max(staleness)),
            "async/dropped": float(self.dropped),
            "async/in_flight": float(getattr(self, "in_flight_at_take", 0)),
        }

    def state_dict(self) -> dict[str, Any]:
        """The prompt source (the prompts of the groups not yet trained are replayed after a resume: their episodes,
        in flight or waiting, are regenerated) and the dropped count."""
        with self.lock:
            return {"source": self.source.state_dict(), "dropped": self.dropped}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """See :meth:`state_dict`."""
        self._loaded_state = state
        self.dropped = int(state["dropped"])
        self.source.load_state_dict(state["source"])

    def close(self) -> None:
        """Stops the background generator, then the stream (an agent program's endpoint)."""
        self._stop = True
        if self._thread is not None:
            self._thread.join(timeout=30)
        if self.stream is not None:
            self.stream.close()
