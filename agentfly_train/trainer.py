"""``AgentGRPOTrainer``: TRL's ``GRPOTrainer`` trained on multi-turn agent rollouts, with verl's algorithms.

TRL keeps generation scheduling (``steps_per_generation``, ``num_iterations`` = PPO epochs), the reference
model, old and reference log-probs, the optimiser, distributed setup, logging and checkpointing. Our
rollout engine plugs in through TRL's ``rollout_func`` hook (token-in/token-out episodes with ``prompt_ids``,
``completion_ids``, sampled ``logprobs``, ``env_mask`` and the env's reward). The algorithm is ours
(:mod:`agentfly_train.algorithms`); we override four TRL methods:

- ``_generate_and_score_completions``: hands the batch's task rows to the rollout, lets TRL build the batch,
  then replaces TRL's (B,) group-normalised advantages by (B, T) token-level ones: each episode's reward on
  its last sampled token, minus β·KL when ``use_kl_in_reward`` (controller updated with the KL of the batch
  gathered from all processes), through the configured estimator over the whole gathered batch (groups are
  the ``num_generations`` rollouts of one prompt). With ``gae`` the critic computes values first and is
  updated on the returns afterwards. Tool tokens (``env_mask = 0``) and padding get 0.
- ``_compute_loss``: the PPO clipped (dual-clip) policy loss, minus the entropy bonus, plus the KL loss, each
  aggregated with ``loss_agg_mode`` so that the micro-batches of an optimiser step add up to the step's loss.
  The exact (``full``) KL needs whole (b, T, V) logits, which TRL's fused LM head never forms: with it, the
  policy and the reference run their own forward (:meth:`AgentGRPOTrainer._completion_logits`). When a rollout
  batch makes a single optimiser step, TRL skips old log-probs (the policy has not moved), and the loss's own
  forward gives π_train for the engine/trainer gap and the ``rollout_is`` weights: no extra pass over the batch.
- ``_save_checkpoint`` / ``_load_optimizer_and_scheduler``: the KL controller's state and the critic (weights
  and optimiser) go into, and come back from, the ``checkpoint-N`` directory TRL writes, which is written
  atomically with a manifest (:mod:`agentfly_train.checkpoints`).

``tests/train/test_trl_contract.py`` pins the TRL behaviour we rely on.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import dataclasses
import json
import os
import shutil
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from trl import GRPOTrainer

from agentfly_envs.runtime import EnvPool
from agentfly_train.algorithms import (
    ROLLOUT_IS_METRICS,
    AdvantageEstimator,
    KLController,
    agg_loss,
    compute_advantage,
    full_kl,
    get_advantage_estimator,
    kl_penalty,
    policy_loss,
    rollout_is_weights,
    subtract_kl,
)
from agentfly_train.batch import (
    explained_variance,
    gather_rows,
    loss_mask,
    masked_stats,
    outcome_rewards,
    row_slices,
    sequences,
    step_denominator,
)
from agentfly_train.checkpoints import (
    PREFIX,
    CheckpointDiskFullError,
    disk_full,
    newest_complete,
    publish,
    staging_dir,
)
from agentfly_train.critic import Critic, CriticSettings
from agentfly_train.generation import GenerationBackend, HFGenerationBackend, SamplingParams
from agentfly_train.rollout import (
    ChatCodec,
    EngineTime,
    RolloutBudgets,
    Trajectory,
    reward_error_notes,
    run_rollouts,
    run_rollouts_async,
    summarize,
)
from agentfly_train.sharding import engine_weights, unsharded

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is marked experimental in TRL 1.16

ALGORITHM_STATE_FILE = "algorithm_state.json"
"""The KL controller's state in a checkpoint directory."""
CRITIC_DIR = "critic"
"""The critic's weights and optimiser state in a checkpoint directory."""
UNSUPPORTED_TRL_OPTIONS = {
    "use_vllm": False,
    "top_entropy_quantile": 1.0,
    "off_policy_mask_threshold": None,
    "delta": None,
    "importance_sampling_level": "token",
    "use_adaptive_entropy": False,
}
"""``GRPOConfig`` fields whose effect lives in TRL's loss, which ours replaces, with the only value we accept."""


def env_reward(prompts: list[Any], completions: list[Any], env_reward: list[float], **kwargs: Any) -> list[float]:
    """The TRL reward function: the env's score of each episode, passed through from the rollout."""
    return [float(reward) for reward in env_reward]


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
            on a backend that streams requests (vLLM); else turn by turn.
    """

    pool: EnvPool
    codec: ChatCodec
    budgets: RolloutBudgets
    train_params: SamplingParams
    val_params: SamplingParams
    executor: ThreadPoolExecutor
    async_episodes: bool = False

    def run(
        self,
        backend: Any,
        tasks: Sequence[Mapping[str, Any]],
        params: SamplingParams,
        timing: EngineTime | None = None,
    ) -> list[Trajectory]:
        """Episodes for ``tasks`` (one env each), run to the end; ``timing`` accumulates the engine's busy and
        idle time."""
        envs = self.pool.take(len(tasks))
        loop = run_rollouts_async if self.async_episodes and hasattr(backend, "submit") else run_rollouts
        return loop(envs, tasks, backend, self.codec, self.budgets, params, self.executor, timing)

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
    """A JSON-ready summary of an episode (messages, reward and its components, finish reason, counts, and the
    tool calls parsed from each assistant turn); the lines of ``val_samples/`` and ``train_samples/``."""
    return {
        "reward": trajectory.reward,
        "correct": trajectory.correct,
        "finish_reason": trajectory.finish_reason,
        "turns": trajectory.num_turns,
        "tool_calls": trajectory.num_tool_calls,
        "messages": trajectory.messages,
        "reward_components": trajectory.reward_components,
        "error_counts": {kind: count for kind, count in trajectory.error_counts.items() if count},
        "turn_calls": trajectory.turn_calls,
        "prompt_tokens": len(trajectory.prompt_ids),
        "completion_tokens": len(trajectory.completion_ids),
        "sampled_tokens": sum(trajectory.env_mask),
    }


@dataclass(frozen=True)
class RLSettings:
    """The algorithm: how episode rewards become token advantages, and the policy loss.

    Built from ``algorithm.*``, ``actor_rollout_ref.actor.*`` and ``trainer.critic_warmup`` by
    :func:`agentfly_train.trl_args.rl_settings`. The defaults are GRPO with TRL's default objective (token-mean
    PPO clip at 0.2, no KL, no entropy bonus).

    Attributes:
        adv_estimator: A key of ``algorithms.ADVANTAGE_ESTIMATORS``.
        gamma: Discount per sampled token (``gae``, ``reinforce_plus_plus``).
        lam: GAE's λ.
        norm_adv_by_std_in_grpo: Divide by the group std in ``grpo`` (False: Dr. GRPO).
        use_kl_in_reward: Subtract β·KL(π_old ‖ π_ref) from the token rewards (β from the KL controller).
        kl_penalty: The KL estimator in the reward (a key of ``algorithms.KL_PENALTIES``).
        use_kl_loss: Add ``kl_loss_coef`` · KL(π ‖ π_ref) to the loss.
        kl_loss_coef: Its coefficient.
        kl_loss_type: Its estimator.
        entropy_coeff: Entropy bonus coefficient (subtracted from the loss).
        clip_ratio_low: ε_low; the ratio's lower clip is 1 − ε_low.
        clip_ratio_high: ε_high; the ratio's upper clip is 1 + ε_high.
        clip_ratio_c: Dual-clip bound (> 1) on the loss of negative-advantage tokens.
        loss_agg_mode: A key of ``algorithms.LOSS_AGG_MODES``, for the policy, entropy and KL terms.
        critic_warmup: Rollout steps that train only the critic (the policy is not updated).
        rollout_is: Importance weights π_train / π_rollout on the policy loss: ``None``, ``token`` or ``sequence``
            (:func:`~agentfly_train.algorithms.rollout_is_weights`).
        rollout_is_threshold: Their truncation (a number) or mask bounds (``"lower_upper"``).
    """

    adv_estimator: str = "grpo"
    gamma: float = 1.0
    lam: float = 1.0
    norm_adv_by_std_in_grpo: bool = True
    use_kl_in_reward: bool = False
    kl_penalty: str = "kl"
    use_kl_loss: bool = False
    kl_loss_coef: float = 0.001
    kl_loss_type: str = "low_var_kl"
    entropy_coeff: float = 0.0
    clip_ratio_low: float = 0.2
    clip_ratio_high: float = 0.2
    clip_ratio_c: float = 3.0
    loss_agg_mode: str = "token-mean"
    critic_warmup: int = 0
    rollout_is: str | None = None
    rollout_is_threshold: str = "2.0"


class AgentGRPOTrainer(GRPOTrainer):
    """PPO-family RL over multi-turn agent episodes on TRL's ``GRPOTrainer``.

    The train dataset has a ``prompt`` column (the rendered opening, for TRL's logs) and a ``task`` column
    (the row as JSON, reset into the env). Rewards come from the envs' scoring; rollouts of one prompt form
    a group of ``args.num_generations``.

    Args:
        agent: The rollout engine's settings and envs.
        rl: The algorithm.
        kl_ctrl: The KL-in-reward controller (required with ``rl.use_kl_in_reward``).
        critic_model: The value model (required with an estimator that trains a critic, ``gae``; see
            :func:`~agentfly_train.critic.build_value_model`); prepared by Accelerate here, with gradient
            checkpointing when ``args.gradient_checkpointing``.
        critic_settings: How to train it.
        val_rows: Validation task rows (``None``: no validation).
        val_batch_size: Episodes per validation generation call.
        log_val_generations: Validation trajectories written to ``<output_dir>/val_samples/step_<N>.jsonl``.
        log_train_generations: Training trajectories of each step written to
            ``<output_dir>/train_samples/step_<N>.jsonl`` (0: none).
        backend: The generation backend (``None``: Hugging Face ``generate`` on the training model). One with a
            ``load_weights(named_tensors)`` method (vLLM) is given the policy's weights after each optimiser step.
        **kwargs: ``GRPOTrainer`` arguments (``model``, ``args``, ``train_dataset``, ``processing_class``,
            ``callbacks``, ``peft_config``); ``reward_funcs`` and ``rollout_func`` are set here. ``args.beta``
            must be non-zero when a KL term needs the reference model (TRL loads it only then).

    Raises:
        ValueError: a setting the objective needs is missing, or ``args`` asks for a TRL loss option we replace.
    """

    def __init__(
        self,
        *,
        agent: AgentRollout,
        rl: RLSettings | None = None,
        kl_ctrl: KLController | None = None,
        critic_model: Any = None,
        critic_settings: CriticSettings | None = None,
        val_rows: Sequence[Mapping[str, Any]] | None = None,
        val_batch_size: int = 64,
        log_val_generations: int = 8,
        log_train_generations: int = 0,
        backend: GenerationBackend | None = None,
        **kwargs: Any,
    ) -> None:
        self.agent = agent
        self.rl = rl or RLSettings()
        self.estimator = get_advantage_estimator(self.rl.adv_estimator)
        self.kl_ctrl = kl_ctrl
        self.val_rows = list(val_rows or [])
        self.val_batch_size = val_batch_size
        self.log_val_generations = log_val_generations
        self.log_train_generations = log_train_generations
        self._batch_tasks: list[dict[str, Any]] = []
        self._batch_rewards: list[float] = []
        self._batch_baselines: list[float] = []
        self._train_samples_step, self._train_samples_written = -1, 0
        self._reward_errors_noted: set[str] = set()  # reward failures already printed, once per distinct message
        self._gap_chunks: list[Tensor] | None = None  # a rollout batch's gap, measured by its micro-batches' losses
        _check_setup(self.rl, self.estimator, kwargs.get("args"), kl_ctrl, critic_model, critic_settings)
        super().__init__(reward_funcs=[env_reward], rollout_func=self._rollout, **kwargs)
        if critic_model is not None and (
            self.is_deepspeed_enabled or (self.is_fsdp_enabled and not self.accelerator.is_fsdp2)
        ):
            raise ValueError(
                "the PPO critic runs on one process, under DDP or under FSDP2; DeepSpeed and FSDP1 are not"
            )
        self.critic = None
        if critic_model is not None:
            if self.args.gradient_checkpointing:
                critic_model.gradient_checkpointing_enable(self.args.gradient_checkpointing_kwargs)
            self.critic = Critic(critic_model, critic_settings, self.accelerator)
        self.backend = backend or HFGenerationBackend(
            self._generation_model, self._tokenizer.pad_token_id, self.eos_token_ids, self.accelerator.device
        )
        self._synced_step = -1  # the engine may hold weights from before a resumed checkpoint: sync at first use

    @contextlib.contextmanager
    def _rollout_backend(self) -> Iterator[GenerationBackend]:
        """The generation backend, holding the current policy weights, for one rollout.

        A backend with its own copy of the weights (vLLM) gets the policy's after every optimiser step, once,
        before it next samples (TRL syncs its own vLLM engine the same way, on ``global_step``). One shared by
        all processes (a vLLM server) gets them from the main process, and the others wait until it has.
        Sampling from the policy itself (HF), an FSDP2 policy is held unsharded for the rollout
        (:func:`~agentfly_train.sharding.unsharded`), since each process makes its own number of forwards.
        """
        load_weights = getattr(self.backend, "load_weights", None)
        if load_weights is None:
            with unsharded(self.model):
                yield self.backend
            return
        if self._synced_step != self.state.global_step:
            shared = getattr(self.backend, "shared_by_processes", False)
            weights = engine_weights(self.accelerator.unwrap_model(self.model))
            if self.accelerator.is_main_process or not shared:
                load_weights(weights)
            else:
                collections.deque(weights, maxlen=0)  # an FSDP2 policy's tensors are gathered by all processes
            if shared:
                self.accelerator.wait_for_everyone()
            self._synced_step = self.state.global_step
        yield self.backend

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

    # --- rollouts ------------------------------------------------------------------------------------------------

    def _rollout(self, prompts: list[Any], trainer: GRPOTrainer) -> dict[str, list[Any]]:
        """TRL's ``rollout_func``: multi-turn episodes for the batch's tasks (plus ReMax's greedy baselines)."""
        mode = "train" if self.model.training else "eval"
        params = self.agent.train_params if mode == "train" else self.agent.val_params
        synced, timing = time.perf_counter(), EngineTime()
        with self._rollout_backend() as backend:
            start = time.perf_counter()
            self._metrics[mode]["timing/weight_sync_s"].append(start - synced)
            trajectories = self.agent.run(backend, self._batch_tasks, params, timing)
        self._metrics[mode]["timing/engine_idle_frac"].append(timing.idle_fraction)
        self._batch_rewards = [t.reward for t in trajectories]
        if self.estimator.needs_greedy_baseline:
            self._batch_baselines = self._greedy_rewards(self._batch_tasks)
            self._metrics[mode]["reward/greedy_baseline/mean"].append(sum(self._batch_baselines) / len(trajectories))
        self._record_rollout(mode, trajectories, time.perf_counter() - start)
        if mode == "train":
            self._save_train_samples(trajectories)
        return {
            "prompt_ids": [t.prompt_ids for t in trajectories],
            "completion_ids": [t.completion_ids for t in trajectories],
            "logprobs": [t.logprobs for t in trajectories],
            "env_mask": [t.env_mask for t in trajectories],
            "env_reward": [t.reward for t in trajectories],
        }

    def _greedy_rewards(self, tasks: Sequence[Mapping[str, Any]]) -> list[float]:
        """ReMax's baseline of each row: the reward of one greedy episode per distinct task."""
        keys = [json.dumps(task, sort_keys=True, default=str) for task in tasks]
        distinct = list(dict.fromkeys(keys))
        greedy = dataclasses.replace(self.agent.val_params, temperature=0.0)
        with self._rollout_backend() as backend:
            episodes = self.agent.run(backend, [json.loads(key) for key in distinct], greedy)
        reward = {key: episode.reward for key, episode in zip(distinct, episodes, strict=True)}
        return [reward[key] for key in keys]

    def _record_rollout(self, mode: str, trajectories: Sequence[Trajectory], seconds: float) -> None:
        self._note_reward_errors(trajectories)
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

    def _note_reward_errors(self, trajectories: Sequence[Trajectory]) -> None:
        """Prints, on the main process, one line on stderr per reward failure message not printed before."""
        notes = reward_error_notes(trajectories, self._reward_errors_noted)
        if self.accelerator.is_main_process:
            for note in notes:
                print(note, file=sys.stderr)

    def _remote_failures(self) -> dict[str, float]:
        """``env/remote_failures``: env resets and steps lost to a timeout (any runtime) or a dead Ray actor since
        the last call."""
        return {"env/remote_failures": sum(self.agent.pool.pop_failures().values())}

    def _save_train_samples(self, trajectories: Sequence[Trajectory]) -> None:
        """Appends up to ``log_train_generations`` episodes of the coming step to ``train_samples/step_<N>.jsonl``
        (the file is started afresh by the step's first rollout, so a resumed run does not duplicate lines)."""
        if not self.log_train_generations or not self.accelerator.is_main_process:
            return
        step = self.state.global_step + 1
        path = Path(self.args.output_dir) / "train_samples" / f"step_{step:06d}.jsonl"
        written = self._train_samples_written if self._train_samples_step == step else 0
        self._train_samples_step = step
        kept = trajectories[: max(self.log_train_generations - written, 0)]
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a" if written else "w") as file:
            for trajectory in kept:
                file.write(json.dumps(trajectory_record(trajectory)) + "\n")
        self._train_samples_written = written + len(kept)

    # --- advantages ----------------------------------------------------------------------------------------------

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        """TRL's method with our advantages: the output's ``advantages`` become (B, T), 0 on tool tokens."""
        self._batch_tasks = [json.loads(row["task"]) for row in inputs]
        output = super()._generate_and_score_completions(inputs)
        mode = "train" if self.model.training else "eval"
        output["advantages"] = self._advantages(output, mode)
        if mode == "train" and (self.rl.rollout_is is not None or self._engine_has_own_weights()):
            self._gap_chunks = None
            if "old_per_token_logps" in output or self._in_critic_warmup():
                if "old_per_token_logps" not in output:  # TRL skips them when the ratio is 1
                    output["old_per_token_logps"] = self._policy_logps(output)
                weights, chunk = self._rollout_gap(output["old_per_token_logps"], output)
                if weights is not None:
                    output["rollout_is_weights"] = weights
                self._log_rollout_gap([chunk])
            else:  # the batch makes one optimiser step: the loss's forward passes are π_train, measured there
                self._gap_chunks = []
        return output

    def _engine_has_own_weights(self) -> bool:
        """Whether the rollout engine samples from its own copy of the weights (vLLM), whose log-probs can drift
        from the trainer's (another dtype, other kernels)."""
        return getattr(self.backend, "load_weights", None) is not None

    def _rollout_gap(self, train_logps: Tensor, inputs: Mapping[str, Any]) -> tuple[Tensor | None, Tensor]:
        """The gap between the trainer's and the engine's log-probs of the sampled tokens of some rows.

        Args:
            train_logps: (b, T) log π_train, the policy before this step's update (no gradient).
            inputs: The rows' ``completion_mask``, ``tool_mask`` and ``sampling_per_token_logps`` (b, T).

        Returns:
            (the (b, T) importance weights of ``rl.rollout_is``, or ``None`` without it; a (k,) vector of the rows'
            statistics for :meth:`_log_rollout_gap`: |log-ratio| sum, token count and max, then
            :func:`~agentfly_train.algorithms.rollout_is_weights`' metrics).
        """
        mask = loss_mask(inputs)
        log_ratio = torch.nan_to_num(train_logps.detach() - inputs["sampling_per_token_logps"]) * mask
        gap = log_ratio.abs()
        stats = [gap.sum(), mask.sum().float(), gap.max()]
        weights = None
        if self.rl.rollout_is is not None:
            weights, metrics = rollout_is_weights(log_ratio, mask, self.rl.rollout_is, self.rl.rollout_is_threshold)
            stats += metrics.values()
        return weights, torch.stack([stat.float() for stat in stats])

    def _log_rollout_gap(self, chunks: Sequence[Tensor]) -> None:
        """Logs a rollout batch's gap, over its chunks (micro-batches) on all processes: ``rollout/logprob_diff_mean``
        and ``_max`` of |log π_train − log π_rollout|, and with ``rl.rollout_is`` the weights' ``rollout_corr/*``
        (means of the chunks' means; min and max of the raw ratios)."""
        gathered = self.accelerator.gather(torch.stack(list(chunks)))  # (processes * chunks, k)
        metrics = self._metrics["train"]
        metrics["rollout/logprob_diff_mean"].append((gathered[:, 0].sum() / gathered[:, 1].sum().clamp(min=1)).item())
        metrics["rollout/logprob_diff_max"].append(gathered[:, 2].max().item())
        if self.rl.rollout_is is None:
            return
        reduce = {"rollout_is_raw_min": torch.min, "rollout_is_raw_max": torch.max}
        for column, name in enumerate(ROLLOUT_IS_METRICS, start=3):
            metrics[f"rollout_corr/{name}"].append(reduce.get(name, torch.mean)(gathered[:, column]).item())

    def _advantages(self, output: dict[str, Any], mode: str) -> Tensor:
        """(B, T) advantages of this process's rows, computed over the batch gathered from all processes.

        With a critic, its values go into ``gae`` and it is then trained on the returns (in train mode).
        """
        mask = loss_mask(output)  # (B, T)
        batch, length = mask.shape
        rows = slice(self.accelerator.process_index * batch, (self.accelerator.process_index + 1) * batch)
        input_ids, attention_mask = sequences(output)
        values = None if self.critic is None else self.critic.values(input_ids, attention_mask, length)
        all_values = None if values is None else gather_rows(self.accelerator, values)
        all_mask = gather_rows(self.accelerator, mask)  # (B * processes, T_max)
        rewards, metrics = self._token_rewards(output, all_mask, mode)
        group_size = self.num_generations if mode == "train" else self.num_generations_eval
        advantages, returns = compute_advantage(
            self.rl.adv_estimator,
            rewards,
            all_mask,
            index=torch.arange(all_mask.shape[0], device=all_mask.device) // group_size,
            values=all_values,
            reward_baselines=self._gathered(self._batch_baselines) if self.estimator.needs_greedy_baseline else None,
            gamma=self.rl.gamma,
            lam=self.rl.lam,
            norm_adv_by_std_in_grpo=self.rl.norm_adv_by_std_in_grpo,
        )
        for name, tensor in (("advantages", advantages), ("returns", returns)):
            metrics.update({f"critic/{name}/{k}": v for k, v in masked_stats(tensor, all_mask).items()})
        if values is not None:
            metrics.update({f"critic/values/{k}": v for k, v in masked_stats(all_values, all_mask).items()})
            metrics["critic/vf_explained_var"] = explained_variance(returns, all_values, all_mask)
            if mode == "train":
                local_returns = returns[rows, :length]
                metrics.update(self.critic.update(input_ids, attention_mask, mask, local_returns, values))
        for name, value in metrics.items():
            self._metrics[mode][name].append(value)
        return advantages[rows, :length]

    def _token_rewards(self, output: dict[str, Any], all_mask: Tensor, mode: str) -> tuple[Tensor, dict[str, float]]:
        """(B * processes, T_max) token rewards: each episode's reward on its last sampled token, minus β·KL
        on every sampled token with ``use_kl_in_reward`` (the controller is updated in train mode only)."""
        rewards = outcome_rewards(self._gathered(self._batch_rewards), all_mask)
        if not self.rl.use_kl_in_reward:
            return rewards, {}
        if self.rl.kl_penalty == "full":
            kl = self._full_kl(output)
        else:
            if "old_per_token_logps" not in output:  # TRL skips them when the ratio is 1; the KL needs them
                output["old_per_token_logps"] = self._policy_logps(output)
            kl = kl_penalty(output["old_per_token_logps"], output["ref_per_token_logps"], self.rl.kl_penalty)
        controller = self.kl_ctrl if mode == "train" else copy.deepcopy(self.kl_ctrl)
        rewards, stats = subtract_kl(rewards, gather_rows(self.accelerator, kl), all_mask, controller)
        return rewards, {"actor/reward_kl_penalty": stats["kl"], "actor/reward_kl_penalty_coeff": stats["kl_coef"]}

    def _gathered(self, per_row: Sequence[float]) -> Tensor:
        """(B * processes,) float32: a per-row list of this process, gathered from all processes."""
        return gather_rows(self.accelerator, torch.tensor(per_row, dtype=torch.float32, device=self.accelerator.device))

    @torch.no_grad()
    def _policy_logps(self, output: Mapping[str, Any]) -> Tensor:
        """(B, T) log-probs of the completion tokens under the current policy, as TRL computes old log-probs."""
        from trl.models.utils import disable_gradient_checkpointing

        input_ids, attention_mask = sequences(output)
        with disable_gradient_checkpointing(self.model, self.args.gradient_checkpointing_kwargs):
            logps, _, _ = self._get_per_token_logps_and_entropies(
                self.model,
                input_ids,
                attention_mask,
                output["completion_ids"].shape[1],
                batch_size=self.args.per_device_train_batch_size,
            )
        return logps

    @torch.no_grad()
    def _full_kl(self, output: Mapping[str, Any]) -> Tensor:
        """(B, T) exact KL(π ‖ π_ref) at each completion position of this process's rows, in chunks of
        ``per_device_train_batch_size`` rows (two (b, T, V) logits tensors at a time)."""
        from trl.models.utils import disable_gradient_checkpointing

        input_ids, attention_mask = sequences(output)
        length = output["completion_ids"].shape[1]
        kl = []
        with disable_gradient_checkpointing(self.model, self.args.gradient_checkpointing_kwargs):
            for rows in row_slices(input_ids.shape[0], self.args.per_device_train_batch_size):
                logits, _ = self._completion_logits(self.model, input_ids[rows], attention_mask[rows], length)
                with self._reference_model() as reference:
                    ref_logits, _ = self._completion_logits(reference, input_ids[rows], attention_mask[rows], length)
                kl.append(full_kl(logits, ref_logits))
        return torch.cat(kl)

    def _completion_logits(
        self, model: Any, input_ids: Tensor, attention_mask: Tensor, logits_to_keep: int, aux_loss: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        """The logits TRL's fused LM head scores the completion with, materialised, through the model's own forward.

        Args:
            model: The policy (wrapped or not) or the reference model.
            input_ids: (b, L) prompt and completion ids.
            attention_mask: (b, L).
            logits_to_keep: T, the completion length (the last T positions of ``input_ids``).
            aux_loss: Also return an MoE model's load-balancing loss.

        Returns:
            ((b, T, V) logits predicting the completion tokens divided by the sampling temperature, the aux loss
            or ``None``).
        """
        extra = {"output_router_logits": True} if aux_loss else {}
        with self.accelerator.autocast():
            outputs = model(
                input_ids=input_ids,
                attention_mask=attention_mask,
                logits_to_keep=logits_to_keep + 1,
                use_cache=False,
                **extra,
            )
        return outputs.logits[:, :-1] / self.temperature, outputs.get("aux_loss")

    @contextlib.contextmanager
    def _reference_model(self) -> Iterator[Any]:
        """The KL reference as TRL scores it: ``ref_model``, or with PEFT the policy with its adapter switched."""
        if self.ref_model is not None:
            yield self.ref_model
            return
        from trl.trainer.utils import use_adapter

        model = self.accelerator.unwrap_model(self.model)
        with use_adapter(model, adapter_name="ref" if "ref" in model.peft_config else None):
            yield self.model

    # --- loss ----------------------------------------------------------------------------------------------------

    def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> Tensor:
        """The policy objective on one micro-batch, on tokens where ``loss_mask`` is 1:

        L = policy_loss(clip ε_low/ε_high, dual clip c) − entropy_coeff · H + kl_loss_coef · KL(π ‖ π_ref),
        each term aggregated with ``loss_agg_mode`` over the whole optimiser step (all micro-batches, all
        processes), so the micro-batch losses add up to the step's. During ``critic_warmup`` it is a constant
        0 (no forward pass; the policy does not move).
        """
        mode = "train" if self.model.training else "eval"
        if mode == "train" and self._in_critic_warmup():
            return torch.zeros((), device=self.accelerator.device, requires_grad=True)
        rl, mask = self.rl, loss_mask(inputs)
        logps, entropies, aux_loss, kl = self._policy_terms(model, inputs)
        old_logps = inputs.get("old_per_token_logps")
        old_logps = logps.detach() if old_logps is None else old_logps
        weights = inputs.get("rollout_is_weights")
        if mode == "train" and self._gap_chunks is not None:  # π_train is this forward's policy (no update yet)
            weights, chunk = self._rollout_gap(logps, inputs)
            self._gap_chunks.append(chunk)
            if len(self._gap_chunks) == self.args.steps_per_generation:
                self._log_rollout_gap(self._gap_chunks)
                self._gap_chunks = None
        denominator = self._step_denominator() if mode == "train" else None
        pg_loss, pg_metrics = policy_loss(
            old_logps,
            logps,
            inputs["advantages"],
            mask,
            rl.clip_ratio_low,
            rl.clip_ratio_high,
            rl.clip_ratio_c,
            rl.loss_agg_mode,
            denominator=denominator,
            weights=weights,
        )
        entropy = agg_loss(entropies, mask, rl.loss_agg_mode, denominator=denominator)
        loss = pg_loss - rl.entropy_coeff * entropy
        terms = {"actor/pg_loss": pg_loss, "actor/entropy": entropy}
        if kl is not None:
            terms["actor/kl_loss"] = agg_loss(kl, mask, rl.loss_agg_mode, denominator=denominator)
            loss = loss + rl.kl_loss_coef * terms["actor/kl_loss"]
        accumulation = self.current_gradient_accumulation_steps if mode == "train" else 1
        if self.aux_loss_enabled:
            loss = loss + self.router_aux_loss_coef * aux_loss / accumulation
        # The logger averages a step's micro-batches; a term's share times their number is the step's value.
        metrics = {**{name: term.detach() * accumulation for name, term in terms.items()}, **pg_metrics}
        means = self.accelerator.reduce(torch.stack(list(metrics.values())).float(), reduction="mean")
        for name, value in zip(metrics, means.tolist(), strict=True):
            self._metrics[mode][name if name.startswith("actor/") else f"actor/{name}"].append(value)
        return loss

    def _policy_terms(
        self, model: Any, inputs: Mapping[str, Any]
    ) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
        """(b, T) log-probs and entropies of the completion tokens under ``model`` (with gradient), the MoE aux loss
        (or ``None``), and the (b, T) KL(π ‖ π_ref) of the KL loss (``None`` without ``use_kl_loss``).

        TRL's fused head computes the first two unless the KL is ``full``, which needs the whole logits.
        """
        rl, (input_ids, attention_mask) = self.rl, sequences(inputs)
        length = inputs["completion_ids"].shape[1]
        if rl.use_kl_loss and rl.kl_loss_type == "full":
            from trl.trainer.utils import selective_log_softmax_and_entropy

            logits, aux_loss = self._completion_logits(model, input_ids, attention_mask, length, self.aux_loss_enabled)
            logps, entropies = selective_log_softmax_and_entropy(logits, inputs["completion_ids"])
            with torch.no_grad(), self._reference_model() as reference:
                ref_logits, _ = self._completion_logits(reference, input_ids, attention_mask, length)
            return logps, entropies, aux_loss, full_kl(logits, ref_logits)
        logps, entropies, aux_loss = self._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, length, compute_entropy=True, compute_aux_loss=self.aux_loss_enabled
        )
        kl = kl_penalty(logps, inputs["ref_per_token_logps"], rl.kl_loss_type) if rl.use_kl_loss else None
        return logps, entropies, aux_loss, kl

    def _in_critic_warmup(self) -> bool:
        """Whether the current rollout step is one of the first ``critic_warmup``."""
        optimizer_steps_per_rollout = (
            self.args.steps_per_generation * self.num_iterations // self.args.gradient_accumulation_steps
        )
        return self.state.global_step // optimizer_steps_per_rollout < self.rl.critic_warmup

    def _step_denominator(self) -> Tensor:
        """The loss denominator of the current optimiser step, from the micro-batches TRL buffered for it."""
        accumulation = self.args.gradient_accumulation_steps
        first = (self._step % self.args.steps_per_generation) // accumulation * accumulation
        window = self._buffered_inputs[first : first + accumulation]
        return step_denominator(
            [loss_mask(batch) for batch in window],
            self.rl.loss_agg_mode,
            self.args.max_completion_length,
            self.accelerator,
        )

    # --- checkpoints ---------------------------------------------------------------------------------------------

    _staging: Path | None = None
    """While a checkpoint is saved, the directory the ``Trainer`` writes it into (:meth:`_get_output_dir`)."""

    def _get_output_dir(self, trial: Any) -> str:
        """The run directory, or while a checkpoint is saved its staging directory (``checkpoint-K.tmp``)."""
        return str(self._staging) if self._staging is not None else super()._get_output_dir(trial)

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        """TRL's checkpoint plus the KL controller and the critic, written atomically
        (:mod:`agentfly_train.checkpoints`): every process writes its part into ``checkpoint-K.tmp/``, then the
        main process adds the manifest and renames it to ``checkpoint-K``. A failed or interrupted save leaves no
        staging directory behind.

        Raises:
            CheckpointDiskFullError: the disk filled up (one line naming the intact previous checkpoint).
        """
        run_dir = Path(super()._get_output_dir(trial))
        staging = staging_dir(run_dir, self.state.global_step)
        final = run_dir / f"{PREFIX}-{self.state.global_step}"
        staged = staging / final.name
        if self.args.should_save:
            shutil.rmtree(staging, ignore_errors=True)  # left by a kill during an earlier save of this step
        self.accelerator.wait_for_everyone()
        self._staging = staging
        try:
            if self.kl_ctrl is not None and self.args.should_save:
                staged.mkdir(parents=True, exist_ok=True)
                (staged / ALGORITHM_STATE_FILE).write_text(json.dumps({"kl_ctrl": self.kl_ctrl.state_dict()}))
            if self.critic is not None:
                self.critic.save(str(staged / CRITIC_DIR))
            super()._save_checkpoint(model, trial)
            self.accelerator.wait_for_everyone()
            if self.args.should_save:
                publish(staged, final)
        except BaseException as error:
            if not self.args.should_save:
                raise
            full = isinstance(error, Exception) and disk_full(error, run_dir)  # before the staging frees space
            shutil.rmtree(staging, ignore_errors=True)
            if not full:
                raise
            previous, _ = newest_complete(run_dir, check_contents=False)
            state, action = (
                (f"the previous checkpoint {previous.name} is intact", "resume")
                if previous is not None
                else ("there is no earlier checkpoint", "start over")
            )
            raise CheckpointDiskFullError(
                f"no space left on device while writing {final.name} in {run_dir}; {state}; free space and rerun "
                f"the same command to {action}"
            ) from None
        finally:
            self._staging = None

    def _issue_warnings_after_load(self, load_result: Any) -> None:
        """The ``Trainer``'s warnings about a loaded checkpoint's missing and unexpected keys, without the tied
        weights (``lm_head.weight`` = the input embeddings): ``save_pretrained`` leaves them out, and loading the
        weight they are tied to restores them."""
        tied = getattr(self.accelerator.unwrap_model(self.model), "all_tied_weights_keys", None) or {}
        missing = [key for key in load_result.missing_keys if key not in tied or tied[key] in load_result.missing_keys]
        super()._issue_warnings_after_load(load_result._replace(missing_keys=missing))

    def _load_optimizer_and_scheduler(self, checkpoint: str | None) -> None:
        """TRL's resume, plus the KL controller and the critic of the checkpoint."""
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is None:
            return
        if self.kl_ctrl is not None:
            state = json.loads((Path(checkpoint) / ALGORITHM_STATE_FILE).read_text())
            self.kl_ctrl.load_state_dict(state["kl_ctrl"])
        if self.critic is not None:
            self.critic.load(str(Path(checkpoint) / CRITIC_DIR))

    # --- validation and logging ----------------------------------------------------------------------------------

    def validate(self) -> dict[str, float]:
        """Runs the validation rows through the envs; returns ``val/*`` metrics and writes sample trajectories.

        Returns:
            ``val/accuracy``, ``val/reward/mean`` and the other :func:`summarize` statistics, prefixed ``val/``.
        """
        if not self.val_rows:
            return {}
        start = time.perf_counter()
        with self._rollout_backend() as backend:
            stats, trajectories = self.agent.evaluate(backend, self.val_rows, self.val_batch_size)
        self._note_reward_errors(trajectories)
        stats.pop("env_seconds")
        stats["timing/s"] = time.perf_counter() - start
        stats.update(self._remote_failures())
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


def _check_setup(
    rl: RLSettings,
    estimator: AdvantageEstimator,
    args: Any,
    kl_ctrl: KLController | None,
    critic_model: Any,
    critic_settings: CriticSettings | None,
) -> None:
    """Raises ``ValueError`` when the trainer's arguments cannot run ``rl`` (whose estimator is ``estimator``)."""
    if estimator.trains_critic and (critic_model is None or critic_settings is None):
        raise ValueError(f"adv_estimator={rl.adv_estimator!r} trains a critic: pass critic_model and critic_settings")
    if rl.use_kl_in_reward and kl_ctrl is None:
        raise ValueError("use_kl_in_reward needs kl_ctrl (algorithms.make_kl_controller)")
    if args is None:
        return
    if (rl.use_kl_in_reward or rl.use_kl_loss) and args.beta == 0.0:
        raise ValueError("a KL term needs the reference model, which TRL loads only when GRPOConfig.beta != 0")
    for name, accepted in UNSUPPORTED_TRL_OPTIONS.items():
        if getattr(args, name) != accepted:
            raise ValueError(
                f"GRPOConfig.{name}={getattr(args, name)!r} acts in TRL's loss, which AgentGRPOTrainer replaces; "
                f"leave it at {accepted!r}"
            )


def generation_backend_for(model: Any, tokenizer: Any) -> HFGenerationBackend:
    """A backend over a plain model (for evaluation outside a trainer)."""
    eos = model.generation_config.eos_token_id
    eos_ids = eos if isinstance(eos, list) else [tokenizer.eos_token_id if eos is None else eos]
    return HFGenerationBackend.for_model(model, tokenizer.pad_token_id, eos_ids)
