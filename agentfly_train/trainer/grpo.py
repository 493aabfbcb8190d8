"""``AgentGRPOTrainer``: TRL's ``GRPOTrainer`` trained on multi-turn agent rollouts, with verl's algorithms.

TRL keeps generation scheduling (``steps_per_generation``, ``num_iterations`` = PPO epochs), the reference
model, old and reference log-probs, the optimiser, distributed setup, logging and checkpointing. Our
rollout engine plugs in through TRL's ``rollout_func`` hook (token-in/token-out episodes with ``prompt_ids``,
``completion_ids``, sampled ``logprobs``, ``env_mask`` and the env's reward). The algorithm is ours
(:mod:`agentfly_train.algorithms`); we override five TRL methods:

- ``_generate_and_score_completions``: hands the batch's task rows to the rollout, lets TRL build the batch,
  then replaces TRL's (B,) group-normalised advantages by (B, T) token-level ones: each turn's reward (the
  env's reward of its step) on its last sampled token, minus β·KL when ``use_kl_in_reward`` (controller updated
  with the KL of the batch gathered from all processes), through the configured estimator over the whole
  gathered batch (groups are the ``num_generations`` rollouts of one prompt; the estimators that credit turns get
  each turn's tokens and reward, ``gigpo`` also its anchor context). With a critic (``gae``, ``gae_turns``) it
  computes values first and is updated on the returns afterwards. Tool tokens (``env_mask = 0``) and padding get
  0. The batch's first ``log_train_generations`` episodes are then saved with each turn's advantage.
- ``_compute_loss``: the PPO clipped (dual-clip) policy loss, minus the entropy bonus, plus the KL loss, each
  aggregated with ``loss_agg_mode`` so that the micro-batches of an optimiser step add up to the step's loss.
  The exact (``full``) KL needs whole (b, T, V) logits, which TRL's fused LM head never forms: with it, the
  policy and the reference run their own forward (:meth:`AgentGRPOTrainer._completion_logits`). When a rollout
  batch makes a single optimiser step, TRL skips old log-probs (the policy has not moved), and the loss's own
  forward gives π_train for the engine/trainer gap and the ``rollout_is`` weights: no extra pass over the batch.
- ``_get_per_token_logps_and_entropies``: TRL's, given the rows' images in a vision-language run: TRL computes the
  old and reference log-probs of a rollout batch without knowing its images (they come with the episodes, from
  ``rollout_func``), so the batch's pixel inputs are added where a call has none, and every call gets the image
  token types (``mm_token_type_ids``) from which Qwen2.5-VL computes its M-RoPE positions.
- ``_save_checkpoint`` / ``_load_optimizer_and_scheduler``: the KL controller's state and the critic (weights
  and optimiser) go into, and come back from, the ``checkpoint-N`` directory TRL writes, which is written
  atomically with a manifest (:mod:`~agentfly_train.trainer.checkpointing`).

The rollouts (TRL's ``rollout_func``, the backend's weight sync, validation) are in
:mod:`~agentfly_train.trainer.rollouts`.

``tests/train/trainer/test_trl_contract.py`` pins the TRL behaviour we rely on.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor
from trl import GRPOTrainer

from agentfly_train.algorithms import (
    KLController,
    Turns,
    agg_loss,
    compute_advantage,
    full_kl,
    get_advantage_estimator,
    kl_penalty,
    policy_loss,
    rollout_gap,
    rollout_gap_metrics,
    subtract_kl,
)
from agentfly_train.batch import (
    episode_mask,
    explained_variance,
    gather_rows,
    left_out_episodes,
    loss_mask,
    masked_stats,
    on_turn_rows,
    pixel_inputs,
    sequences,
    step_denominator,
)
from agentfly_train.critic import Critic, CriticSettings
from agentfly_train.generation import Policy
from agentfly_train.rollout import AgentRollout, Trajectory, TurnTable
from agentfly_train.trainer.checkpointing import CheckpointMixin
from agentfly_train.trainer.forwards import ForwardsMixin
from agentfly_train.trainer.port import RolloutPort
from agentfly_train.trainer.rollouts import RolloutMixin
from agentfly_train.trainer.schedules import RolloutSchedule, SyncSchedule
from agentfly_train.trl_args import RLSettings, check_trainer_setup

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is marked experimental in TRL 1.16


def env_reward(prompts: list[Any], completions: list[Any], env_reward: list[float], **kwargs: Any) -> list[float]:
    """The TRL reward function: the env's score of each episode, passed through from the rollout."""
    return [float(reward) for reward in env_reward]


class AgentGRPOTrainer(RolloutMixin, ForwardsMixin, CheckpointMixin, GRPOTrainer):
    """PPO-family RL over multi-turn agent episodes on TRL's ``GRPOTrainer``.

    The train dataset has a ``prompt`` column (the rendered opening, for TRL's logs) and a ``task`` column
    (the row as JSON, reset into the env). Rewards come from the envs' scoring; rollouts of one prompt form
    a group of ``args.num_generations``.

    Args:
        port: The rollout port (:class:`~agentfly_train.trainer.port.RolloutPort`): the rollout driver and the
            generation backend, connected here to the trainer's policy.
        rl: The algorithm.
        kl_ctrl: The KL-in-reward controller (required with ``rl.algorithm.use_kl_in_reward``).
        critic_model: The value model (required with an estimator that trains a critic, ``gae``; see
            :func:`~agentfly_train.critic.build_value_model`); prepared by Accelerate here, with gradient
            checkpointing when ``args.gradient_checkpointing``.
        critic_settings: How to train it.
        val_rows: Validation task rows (``None``: no validation).
        val_batch_size: Episodes per validation generation call.
        log_val_generations: Validation trajectories written to ``<output_dir>/val_samples/step_<N>.jsonl``.
        log_train_generations: Training trajectories of each step written to
            ``<output_dir>/train_samples/step_<N>.jsonl`` (0: none).
        schedule: How training episodes reach the trainer (:mod:`~agentfly_train.trainer.schedules`);
            ``None``: rollout, then update (:class:`~agentfly_train.trainer.schedules.SyncSchedule`).
        **kwargs: ``GRPOTrainer`` arguments (``model``, ``args``, ``train_dataset``, ``processing_class``,
            ``callbacks``, ``peft_config``); ``reward_funcs`` and ``rollout_func`` are set here. ``args.beta``
            must be non-zero when a KL term needs the reference model (TRL loads it only then).

    Raises:
        ValueError: a setting the objective needs is missing, or ``args`` asks for a TRL loss option we replace.
    """

    def __init__(
        self,
        *,
        port: RolloutPort,
        rl: RLSettings,
        kl_ctrl: KLController | None = None,
        critic_model: Any = None,
        critic_settings: CriticSettings | None = None,
        val_rows: Sequence[Mapping[str, Any]] | None = None,
        val_batch_size: int = 64,
        log_val_generations: int = 8,
        log_train_generations: int = 0,
        schedule: RolloutSchedule | None = None,
        **kwargs: Any,
    ) -> None:
        self.port = port
        self.schedule = schedule or SyncSchedule()
        self.rl = rl
        self.estimator = get_advantage_estimator(self.rl.algorithm.adv_estimator)
        self.kl_ctrl = kl_ctrl
        self.val_rows = list(val_rows or [])
        self.val_batch_size = val_batch_size
        self.log_val_generations = log_val_generations
        self.log_train_generations = log_train_generations
        self._batch_tasks: list[dict[str, Any]] = []
        self._batch_baselines: list[float] = []
        self._batch_excluded: list[float] = []  # 1.0 per episode of the batch that ended on an infrastructure failure
        self._batch_turns = TurnTable([], [], [], [])  # the batch's turns: tokens, rewards, anchor states
        self._batch_trajectories: list[Trajectory] = []  # the training batch's episodes, saved with their advantages
        self._train_samples_step, self._train_samples_written = -1, 0
        self._failures_noted: set[str] = set()  # reward and infrastructure failures printed, once per distinct message
        self._gap_chunks: list[Tensor] | None = None  # a rollout batch's gap, measured by its micro-batches' losses
        self._batch_pixels: dict[str, Any] = {}  # the rollout batch's pixel inputs while TRL scores it (VLM runs)
        check_trainer_setup(self.rl, self.estimator, kwargs.get("args"), kl_ctrl, critic_model, critic_settings)
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
        model = self.accelerator.unwrap_model(self.model)
        policy = Policy(
            model, self._tokenizer, self._generation_model, self.accelerator.device, self.agent.codec.images
        )
        port.connect(policy, self.accelerator, lambda: self.model, lambda: self.state.global_step)

    @property
    def agent(self) -> AgentRollout:
        """The rollout driver (envs, codec, budgets, sampling) of :attr:`port`."""
        return self.port.agent

    # --- advantages ----------------------------------------------------------------------------------------------

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        """TRL's method with our advantages: the output's ``advantages`` become (B, T), 0 on tool tokens. When each
        turn trains in its own context (:attr:`~agentfly_train.rollout.AgentRollout.turn_rows`), B counts turn rows:
        TRL is given each task row once per turn row, and the rollout plays each task once."""
        self._batch_tasks = [json.loads(row["task"]) for row in inputs]
        if self.agent.turn_rows is not None:
            inputs = [row for row in inputs for _ in range(self.agent.turn_rows)]
        try:
            output = super()._generate_and_score_completions(inputs)
            output.update(self._batch_pixels)  # TRL's layout: pixel_values, image_grid_thw, num_images
        finally:
            self._batch_pixels = {}
        mode = "train" if self.model.training else "eval"
        output["advantages"] = self._advantages(output, mode)
        if mode == "train" and (
            self.rl.algorithm.rollout_correction.rollout_is is not None or self.port.backend.has_own_weights
        ):
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
        if mode == "train" and self.schedule.behaviour_is_old:  # PPO's ratio against the policy that sampled
            output["old_per_token_logps"] = output["sampling_per_token_logps"]
        return output

    def _rollout_gap(self, train_logps: Tensor, inputs: Mapping[str, Any]) -> tuple[Tensor | None, Tensor]:
        """:func:`~agentfly_train.algorithms.rollout_gap` of some rows (their ``sampling_per_token_logps``)."""
        correction = self.rl.algorithm.rollout_correction
        return rollout_gap(
            train_logps,
            inputs["sampling_per_token_logps"],
            loss_mask(inputs),
            correction.rollout_is,
            correction.rollout_is_threshold,
        )

    def _log_rollout_gap(self, chunks: Sequence[Tensor]) -> None:
        """Logs a rollout batch's gap over its chunks on all processes (:func:`.algorithms.rollout_gap_metrics`)."""
        gathered = self.accelerator.gather(torch.stack(list(chunks)))  # (processes * chunks, k)
        for name, value in rollout_gap_metrics(gathered).items():
            self._metrics["train"][name].append(value)

    def _advantages(self, output: dict[str, Any], mode: str) -> Tensor:
        """(B, T) advantages of this process's rows, computed over the batch gathered from all processes.

        With a critic, its values go into ``gae`` and it is then trained on the returns (in train mode). With turn
        rows (:attr:`~agentfly_train.rollout.AgentRollout.turn_rows`), the estimator scores the episodes (each as
        long as its sampled tokens) and each turn row gets its episode's advantage.
        """
        group_size = self.num_generations if mode == "train" else self.num_generations_eval
        group = torch.arange(len(self._batch_excluded) * self.accelerator.num_processes) // group_size
        left_out = left_out_episodes(self._gathered(self._batch_excluded).bool(), group.to(self.accelerator.device))
        self._leave_out(output, left_out)
        mask = loss_mask(output)  # (B, T)
        batch, length = mask.shape
        rows = slice(self.accelerator.process_index * batch, (self.accelerator.process_index + 1) * batch)
        input_ids, attention_mask = sequences(output)
        values = None if self.critic is None else self.critic.values(input_ids, attention_mask, length)
        all_values = None if values is None else gather_rows(self.accelerator, values)
        all_mask = gather_rows(self.accelerator, mask)  # (B * processes, T_max)
        turns = self.agent.turn_rows
        scored_mask = all_mask if turns is None else episode_mask(all_mask, turns)  # (episodes, L) with turn rows
        episode_turns = self._gathered_turns()
        rewards, metrics = self._token_rewards(output, scored_mask, episode_turns, mode)
        alone = torch.arange(len(left_out), device=left_out.device) + len(left_out)  # out of every other's baseline
        advantages, returns = compute_advantage(
            self.rl.algorithm.adv_estimator,
            rewards,
            scored_mask,
            index=torch.where(left_out, alone, group.to(left_out.device)),
            values=all_values,
            reward_baselines=self._gathered(self._batch_baselines) if self.estimator.needs_greedy_baseline else None,
            turns=episode_turns,
            gamma=self.rl.algorithm.gamma,
            lam=self.rl.algorithm.lam,
            norm_adv_by_std_in_grpo=self.rl.algorithm.norm_adv_by_std_in_grpo,
            omega=self.rl.algorithm.gigpo.omega,
            turn_gamma=self.rl.algorithm.turn_gamma,
        )
        if mode == "train":
            episodes = len(self._batch_excluded)
            mine = slice(self.accelerator.process_index * episodes, (self.accelerator.process_index + 1) * episodes)
            self._save_train_samples(episode_turns.means(advantages, scored_mask)[mine].cpu())
        if turns is not None:
            advantages, returns = (on_turn_rows(x, turns, all_mask) for x in (advantages, returns))
        metrics["rollout/left_out"] = float(left_out.sum())
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

    def _leave_out(self, output: dict[str, Any], left_out: Tensor) -> None:
        """Zeroes the loss mask (``tool_mask``) of this process's rows of the ``left_out`` (E,) episodes (gathered
        from all processes; with turn rows, each episode's ``turn_rows`` rows)."""
        if not left_out.any():
            return
        episodes = len(self._batch_excluded)
        mine = left_out[self.accelerator.process_index * episodes : (self.accelerator.process_index + 1) * episodes]
        rows = mine.repeat_interleave(self.agent.turn_rows or 1)
        kept = output.get("tool_mask", torch.ones_like(output["completion_mask"]))
        output["tool_mask"] = kept * (~rows).to(kept.dtype)[:, None]

    def _token_rewards(
        self, output: dict[str, Any], all_mask: Tensor, turns: Turns, mode: str
    ) -> tuple[Tensor, dict[str, float]]:
        """(B * processes, T_max) token rewards: each turn's reward on its last sampled token (the outcome reward
        on the episode's last), minus β·KL on every sampled token with ``use_kl_in_reward`` (the controller is updated
        in train mode only)."""
        rewards = turns.token_rewards(all_mask)
        if not self.rl.algorithm.use_kl_in_reward:
            return rewards, {}
        if self.rl.algorithm.kl_penalty == "full":
            kl = self._full_kl(output)
        else:
            if "old_per_token_logps" not in output:  # TRL skips them when the ratio is 1; the KL needs them
                output["old_per_token_logps"] = self._policy_logps(output)
            kl = kl_penalty(output["old_per_token_logps"], output["ref_per_token_logps"], self.rl.algorithm.kl_penalty)
        controller = self.kl_ctrl if mode == "train" else copy.deepcopy(self.kl_ctrl)
        rewards, stats = subtract_kl(rewards, gather_rows(self.accelerator, kl), all_mask, controller)
        return rewards, {"actor/reward_kl_penalty": stats["kl"], "actor/reward_kl_penalty_coeff": stats["kl_coef"]}

    def _gathered_turns(self) -> Turns:
        """The turns of the batch's episodes, gathered from all processes (B * processes rows)."""
        table, device = self._batch_turns, self.accelerator.device
        columns = [
            gather_rows(self.accelerator, torch.tensor(column, dtype=dtype, device=device))
            for column, dtype in ((table.tokens, torch.long), (table.rewards, torch.float32),
                                  (table.anchors, torch.long), (table.taken, torch.long))
        ]  # fmt: skip
        tokens, rewards, anchors, taken = columns
        return Turns(tokens, rewards, anchors, taken.bool())

    def _gathered(self, per_row: Sequence[float]) -> Tensor:
        """(B * processes,) float32: a per-row list of this process, gathered from all processes."""
        return gather_rows(self.accelerator, torch.tensor(per_row, dtype=torch.float32, device=self.accelerator.device))

    # --- images ----------------------------------------------------------------------------------------------------

    def _get_per_token_logps_and_entropies(self, model: Any, input_ids: Tensor, *args: Any, **kwargs: Any) -> Any:
        """TRL's, with the rows' images in a vision-language run (see the module docstring): the rollout batch's
        pixel inputs where the call has none (TRL's old and reference log-probs), and the (B, L) image token types
        of ``input_ids``."""
        images = self.agent.codec.images
        if images is not None:
            if kwargs.get("pixel_values") is None and self._batch_pixels:
                kwargs.update(self._batch_pixels)
            if kwargs.get("pixel_values") is not None:
                kwargs["mm_token_type_ids"] = images.token_types(input_ids)
        return super()._get_per_token_logps_and_entropies(model, input_ids, *args, **kwargs)

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
            rl.actor.clip_low,
            rl.actor.clip_high,
            rl.actor.clip_ratio_c,
            rl.actor.loss_agg_mode,
            denominator=denominator,
            weights=weights,
        )
        entropy = agg_loss(entropies, mask, rl.actor.loss_agg_mode, denominator=denominator)
        # Without the bonus the entropy stays out of the graph: the fused head's backward then skips its gradient.
        loss = pg_loss - rl.actor.entropy_coeff * entropy if rl.actor.entropy_coeff else pg_loss
        terms = {"actor/pg_loss": pg_loss, "actor/entropy": entropy}
        if kl is not None:
            terms["actor/kl_loss"] = agg_loss(kl, mask, rl.actor.loss_agg_mode, denominator=denominator)
            loss = loss + rl.actor.kl_loss_coef * terms["actor/kl_loss"]
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
        if rl.actor.use_kl_loss and rl.actor.kl_loss_type == "full":
            from trl.trainer.utils import selective_log_softmax_and_entropy

            logits, aux_loss = self._completion_logits(model, input_ids, attention_mask, length, self.aux_loss_enabled)
            logps, entropies = selective_log_softmax_and_entropy(logits, inputs["completion_ids"])
            with torch.no_grad(), self._reference_model() as reference:
                ref_logits, _ = self._completion_logits(reference, input_ids, attention_mask, length)
            return logps, entropies, aux_loss, full_kl(logits, ref_logits)
        logps, entropies, aux_loss = self._get_per_token_logps_and_entropies(
            model,
            input_ids,
            attention_mask,
            length,
            compute_entropy=True,
            compute_aux_loss=self.aux_loss_enabled,
            **pixel_inputs(inputs),
        )
        kl = kl_penalty(logps, inputs["ref_per_token_logps"], rl.actor.kl_loss_type) if rl.actor.use_kl_loss else None
        return logps, entropies, aux_loss, kl

    @property
    def optimizer_steps_per_rollout(self) -> int:
        """Optimiser steps one rollout batch feeds (its mini-batches, in each PPO epoch)."""
        return self.args.steps_per_generation * self.num_iterations // self.args.gradient_accumulation_steps

    def _in_critic_warmup(self) -> bool:
        """Whether the current rollout step is one of the first ``critic_warmup``."""
        return self.state.global_step // self.optimizer_steps_per_rollout < self.rl.critic_warmup

    def _step_denominator(self) -> Tensor:
        """The loss denominator of the current optimiser step, from the micro-batches TRL buffered for it."""
        accumulation = self.args.gradient_accumulation_steps
        first = (self._step % self.args.steps_per_generation) // accumulation * accumulation
        window = self._buffered_inputs[first : first + accumulation]
        return step_denominator(
            [loss_mask(batch) for batch in window],
            self.rl.actor.loss_agg_mode,
            self.args.max_completion_length,
            self.accelerator,
        )
