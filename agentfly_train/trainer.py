"""``AgentGRPOTrainer``: TRL's ``GRPOTrainer`` trained on multi-turn agent rollouts over agentfly envs.

TRL keeps the loss, optimisation, group-normalised advantages, distributed setup, logging and
checkpointing. We plug in through TRL's ``rollout_func`` hook (our token-in/token-out engine returns
``prompt_ids``, ``completion_ids``, sampled ``logprobs``, ``env_mask`` and the env's reward) and override
one method, ``_generate_and_score_completions``, only to hand the batch's task rows to the rollout and to
record rollout statistics. ``tests/train/test_trl_contract.py`` pins the TRL behaviour we rely on.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch
from trl import GRPOTrainer

from agentfly_train.generation import HFGenerationBackend, SamplingParams
from agentfly_train.rollout import ChatCodec, RolloutBudgets, Trajectory, run_rollouts, summarize

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is marked experimental in TRL 1.16


def env_reward(prompts: list[Any], completions: list[Any], env_reward: list[float], **kwargs: Any) -> list[float]:
    """The TRL reward function: the env's score of each episode, passed through from the rollout."""
    return [float(reward) for reward in env_reward]


class EnvPool:
    """Reusable env instances of one id, created on demand.

    Args:
        env_id: Registered id.
        env_kwargs: ``gymnasium.make`` keyword arguments.
    """

    def __init__(self, env_id: str, env_kwargs: Mapping[str, Any]) -> None:
        self.env_id = env_id
        self.env_kwargs = dict(env_kwargs)
        self.envs: list[gym.Env] = []

    def take(self, count: int) -> list[gym.Env]:
        """``count`` envs (the same instances on every call, grown as needed)."""
        while len(self.envs) < count:
            self.envs.append(gym.make(self.env_id, disable_env_checker=True, **self.env_kwargs))
        return self.envs[:count]

    def close(self) -> None:
        """Closes every env."""
        for env in self.envs:
            env.close()
        self.envs.clear()


@dataclass
class AgentRollout:
    """Everything the rollout engine needs besides the model.

    Attributes:
        pool: Environments.
        codec: Chat-template token ids.
        budgets: Turn and token limits.
        train_params: Sampling for training rollouts.
        val_params: Sampling for validation rollouts.
        executor: Threads that step the envs of a turn concurrently.
    """

    pool: EnvPool
    codec: ChatCodec
    budgets: RolloutBudgets
    train_params: SamplingParams
    val_params: SamplingParams
    executor: ThreadPoolExecutor

    def run(self, backend: Any, tasks: Sequence[Mapping[str, Any]], params: SamplingParams) -> list[Trajectory]:
        """Episodes for ``tasks`` (one env each), run to the end."""
        envs = self.pool.take(len(tasks))
        return run_rollouts(envs, tasks, backend, self.codec, self.budgets, params, self.executor)

    def evaluate(
        self, backend: Any, rows: Sequence[Mapping[str, Any]], batch_size: int
    ) -> tuple[dict[str, float], list[Trajectory]]:
        """Validation: every row once with ``val_params``, in batches.

        Returns:
            :func:`~agentfly_train.rollout.summarize` statistics of all episodes, and the trajectories.
        """
        trajectories: list[Trajectory] = []
        for start in range(0, len(rows), batch_size):
            trajectories += self.run(backend, rows[start : start + batch_size], self.val_params)
        return summarize(trajectories), trajectories


def trajectory_record(trajectory: Trajectory) -> dict[str, Any]:
    """A JSON-ready summary of an episode (messages, reward, finish reason, counts)."""
    return {
        "reward": trajectory.reward,
        "correct": trajectory.correct,
        "finish_reason": trajectory.finish_reason,
        "turns": trajectory.num_turns,
        "tool_calls": trajectory.num_tool_calls,
        "messages": trajectory.messages,
    }


class AgentGRPOTrainer(GRPOTrainer):
    """GRPO over multi-turn agent episodes.

    The train dataset has a ``prompt`` column (the rendered opening, for TRL's logs) and a ``task`` column
    (the row as JSON, reset into the env). Rewards come from the envs' scoring; rollouts of one prompt form
    a group of ``args.num_generations``.

    Args:
        agent: The rollout engine's settings and envs.
        val_rows: Validation task rows (``None``: no validation).
        val_batch_size: Episodes per validation generation call.
        log_val_generations: Validation trajectories written to ``<output_dir>/val_samples/step_<N>.jsonl``.
        **kwargs: ``GRPOTrainer`` arguments (``model``, ``args``, ``train_dataset``, ``processing_class``,
            ``callbacks``, ``peft_config``); ``reward_funcs`` and ``rollout_func`` are set here.
    """

    def __init__(
        self,
        *,
        agent: AgentRollout,
        val_rows: Sequence[Mapping[str, Any]] | None = None,
        val_batch_size: int = 64,
        log_val_generations: int = 8,
        **kwargs: Any,
    ) -> None:
        self.agent = agent
        self.val_rows = list(val_rows or [])
        self.val_batch_size = val_batch_size
        self.log_val_generations = log_val_generations
        self._batch_tasks: list[dict[str, Any]] = []
        super().__init__(reward_funcs=[env_reward], rollout_func=self._rollout, **kwargs)
        self.backend = HFGenerationBackend(
            self._generation_model, self._tokenizer.pad_token_id, self.eos_token_ids, self.accelerator.device
        )

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

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        """TRL's method; we only hand the rows' tasks to :meth:`_rollout` first."""
        self._batch_tasks = [json.loads(row["task"]) for row in inputs]
        return super()._generate_and_score_completions(inputs)

    def _rollout(self, prompts: list[Any], trainer: GRPOTrainer) -> dict[str, list[Any]]:
        """TRL's ``rollout_func``: multi-turn episodes for the batch's tasks."""
        mode = "train" if self.model.training else "eval"
        params = self.agent.train_params if mode == "train" else self.agent.val_params
        start = time.perf_counter()
        trajectories = self.agent.run(self.backend, self._batch_tasks, params)
        self._record_rollout(mode, trajectories, time.perf_counter() - start)
        return {
            "prompt_ids": [t.prompt_ids for t in trajectories],
            "completion_ids": [t.completion_ids for t in trajectories],
            "logprobs": [t.logprobs for t in trajectories],
            "env_mask": [t.env_mask for t in trajectories],
            "env_reward": [t.reward for t in trajectories],
        }

    def _record_rollout(self, mode: str, trajectories: Sequence[Trajectory], seconds: float) -> None:
        stats = summarize(trajectories)
        env_seconds = stats.pop("env_seconds")
        metrics = self._metrics[mode]
        for name, value in stats.items():
            metrics[name].append(value)
        sampled = sum(sum(t.env_mask) for t in trajectories)
        metrics["timing/rollout_s"].append(seconds)
        metrics["timing/env_s"].append(env_seconds)
        metrics["throughput/gen_tokens_per_s"].append(sampled / max(seconds - env_seconds, 1e-9))

    def validate(self) -> dict[str, float]:
        """Runs the validation rows through the envs; returns ``val/*`` metrics and writes sample trajectories.

        Returns:
            ``val/accuracy``, ``val/reward/mean`` and the other :func:`summarize` statistics, prefixed ``val/``.
        """
        if not self.val_rows:
            return {}
        start = time.perf_counter()
        stats, trajectories = self.agent.evaluate(self.backend, self.val_rows, self.val_batch_size)
        stats.pop("env_seconds")
        stats["timing/s"] = time.perf_counter() - start
        if self.accelerator.is_main_process and self.log_val_generations:
            path = Path(self.args.output_dir) / "val_samples" / f"step_{self.state.global_step:06d}.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("w") as file:
                for trajectory in trajectories[: self.log_val_generations]:
                    file.write(json.dumps(trajectory_record(trajectory)) + "\n")
        return {f"val/{name}": value for name, value in stats.items()}

    def record_metrics(self, metrics: Mapping[str, float]) -> None:
        """Adds metrics to the current step's log line."""
        for name, value in metrics.items():
            self._metrics["train"][name].append(value)


def generation_backend_for(model: Any, tokenizer: Any) -> HFGenerationBackend:
    """A backend over a plain model (for evaluation outside a trainer)."""
    eos = model.generation_config.eos_token_id
    eos_ids = eos if isinstance(eos, list) else [tokenizer.eos_token_id if eos is None else eos]
    return HFGenerationBackend.for_model(model, tokenizer.pad_token_id, eos_ids)
