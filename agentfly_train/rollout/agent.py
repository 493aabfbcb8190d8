"""The rollout driver of a run: envs, codec, budgets and sampling, and the records of its episodes."""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from agentfly_envs.runtime import EnvPool
from agentfly_train.generation.base import GenerationBackend, SamplingParams
from agentfly_train.rollout.asynchronous import run_rollouts_async
from agentfly_train.rollout.codec import ChatCodec
from agentfly_train.rollout.episode import EngineTime, RolloutBudgets, Trajectory, summarize
from agentfly_train.rollout.judging import JudgeRewards, judged_as_they_end
from agentfly_train.rollout.stream import Episodes, EpisodeStream, streaming
from agentfly_train.rollout.sync import run_rollouts


class EpisodePlayer(Protocol):
    """Plays whole episodes its own way instead of the turn loop (an agent program,
    :class:`~agentfly_train.programs.ProgramSettings`)."""

    def play(
        self,
        envs: Sequence[Any],
        tasks: Sequence[Mapping[str, Any]],
        backend: GenerationBackend,
        codec: ChatCodec,
        budgets: RolloutBudgets,
        params: SamplingParams,
        timing: EngineTime | None = None,
    ) -> list[Trajectory]:
        """One finished trajectory per ``(env, task)``, in order."""
        ...

    def stream(
        self, backend: GenerationBackend, codec: ChatCodec, budgets: RolloutBudgets, timing: EngineTime | None = None
    ) -> Episodes:
        """Its episodes as a stream over ``backend`` (the off-policy schedule's)."""
        ...


@dataclass
class AgentRollout:
    """Everything the rollout engine needs besides the model.

    Attributes:
        pool: Environments (in this process, or on Ray actors).
        codec: Chat-template token ids.
        budgets: Turn and token limits.
        train_params: Sampling for training rollouts.
        val_params: Sampling for validation rollouts.
        executor: Threads that step the envs concurrently.
        async_episodes: Run each episode at its own pace (:func:`~agentfly_train.rollout.run_rollouts_async`)
            on a backend that :attr:`~agentfly_train.generation.GenerationBackend.streams`; else turn by turn.
        retries: Replays of an episode that ends on an infrastructure failure (``rollout.retries``).
        max_infra_failure_rate: The share of a training step's episodes that may be excluded for infrastructure
            failures before the run stops (``rollout.max_infra_failure_rate``).
        judge: The LLM judge that scores the episodes once they end (``agent.reward_name=judge``, ``rubric``,
            ``group_rank``), or ``None`` (the env's reward scores them).
        health: The pool's health-check counts summed over the batches run since the trainer last took them
            (``restarted`` hosts, ``servers_down``; see :meth:`run`).
        program: The user's agent program, played instead of the turn loop (``agent.program``,
            :meth:`~agentfly_train.programs.ProgramSettings.play`), or ``None``.
    """

    pool: EnvPool
    codec: ChatCodec
    budgets: RolloutBudgets
    train_params: SamplingParams
    val_params: SamplingParams
    executor: ThreadPoolExecutor
    async_episodes: bool = False
    retries: int = 0
    max_infra_failure_rate: float = 1.0
    judge: JudgeRewards | None = None
    health: Counter[str] = field(default_factory=Counter)
    program: EpisodePlayer | None = None

    @property
    def turn_rows(self) -> int | None:
        """Rows per episode when each turn trains in its own context (the turn budget), or ``None`` for one row per
        episode (:attr:`~agentfly_train.rollout.RolloutBudgets.step_wise`, which an agent program's episodes also
        are: an episode whose requests extended each other is its one growing row,
        :attr:`~agentfly_train.rollout.Trajectory.grows`; :func:`~agentfly_train.rollout.training_rows`)."""
        return self.budgets.max_turns if self.budgets.step_wise else None

    def run(
        self,
        backend: GenerationBackend,
        tasks: Sequence[Mapping[str, Any]],
        params: SamplingParams,
        timing: EngineTime | None = None,
    ) -> list[Trajectory]:
        """Episodes for ``tasks`` (one env each), run to the end, after the pool's health check (:meth:`check_health`),
        and judged when a :attr:`judge` scores them; ``timing`` accumulates the engine's busy and idle time."""
        self.check_health()
        envs = self.pool.take(len(tasks))
        if self.program is not None:
            return self.program.play(envs, tasks, backend, self.codec, self.budgets, params, timing)
        loop = run_rollouts_async if self.async_episodes and backend.streams else run_rollouts
        # the loop's one argument left is ``ended``
        play = functools.partial(loop, envs, tasks, backend, self.codec, self.budgets, params, self.executor, timing,
                                 self.retries)  # fmt: skip
        return judged_as_they_end(self.judge, tasks, play)

    def open_stream(self, backend: GenerationBackend) -> Episodes:
        """A stream of this rollout's episodes over ``backend``, for the off-policy schedule: the agent program's, or
        the turn loop's (:class:`~agentfly_train.rollout.stream.EpisodeStream`). Close it when done."""
        if self.program is not None:
            return self.program.stream(backend, self.codec, self.budgets)
        return EpisodeStream(streaming(backend), self.codec, self.budgets, self.executor, retries=self.retries)

    def check_health(self) -> None:
        """The pool's health check: dead hosts replaced before an episode meets them, its counts added to
        :attr:`health`."""
        self.health.update(self.pool.check_health())

    def evaluate(
        self, backend: GenerationBackend, rows: Sequence[Mapping[str, Any]], batch_size: int
    ) -> tuple[dict[str, float], list[Trajectory]]:
        """Validation: every row once with ``val_params``, in batches.

        Returns:
            :func:`~agentfly_train.rollout.summarize` statistics of all episodes, and the trajectories.
        """
        trajectories: list[Trajectory] = []
        for start in range(0, len(rows), batch_size):
            trajectories += self.run(backend, rows[start : start + batch_size], self.val_params)
        return summarize(trajectories), trajectories

    def close(self) -> None:
        """Stops the env-stepping threads, closes the envs and the judge's client."""
        self.executor.shutdown()
        self.pool.close()
        if self.judge is not None:
            self.judge.close()


def trajectory_record(trajectory: Trajectory) -> dict[str, Any]:
    """A JSON-ready summary of an episode (messages, reward and its components, finish reason, counts, and the
    tool calls parsed from each assistant turn and its reward); the lines of ``val_samples/`` and ``train_samples/``."""
    return {
        "reward": trajectory.reward,
        "correct": trajectory.correct,
        "finish_reason": trajectory.finish_reason,
        "turns": trajectory.num_turns,
        "tool_calls": trajectory.num_tool_calls,
        "messages": [_json_message(message) for message in trajectory.messages],
        "reward_components": trajectory.reward_components,
        **({"infra_failure": trajectory.infra_failure, "excluded": True} if trajectory.excluded else {}),
        **({"failed_attempts": trajectory.failed_attempts} if trajectory.failed_attempts else {}),
        **({"judge_reasoning": trajectory.judge_reasoning} if trajectory.judge_reasoning is not None else {}),
        "error_counts": {kind: count for kind, count in trajectory.error_counts.items() if count},
        "turn_calls": trajectory.turn_calls,
        "turn_rewards": trajectory.turn_rewards,
        "prompt_tokens": len(trajectory.prompt_ids),
        "completion_tokens": len(trajectory.completion_ids),
        "sampled_tokens": sum(trajectory.env_mask),
        **({"context_summaries": trajectory.history.summaries} if trajectory.history.summaries else {}),
    }


def _json_message(message: Mapping[str, Any]) -> Mapping[str, Any]:
    """A message whose image parts (PIL images) are written as their size, ``{"type": "image", "size": [w, h]}``."""
    content = message.get("content")
    if isinstance(content, str | None):
        return message
    parts = [{"type": "image", "size": list(p["image"].size)} if p.get("type") == "image" else p for p in content]
    return {**message, "content": parts}
