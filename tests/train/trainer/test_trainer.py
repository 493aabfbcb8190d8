"""``AgentGRPOTrainer`` on real multi-turn batches of the warm-started tiny policy: advantages, losses, masks.

Each test builds the trainer a run would build (``build.make_trainer``) and lets TRL generate and score one
rollout batch (``_prepare_inputs``); nothing of TRL, transformers or the tokenizer is replaced.
"""

from __future__ import annotations

import json

import pytest
import torch
from torch import Tensor
from transformers import set_seed
from trl import GRPOTrainer

from agentfly_train.batch import loss_mask, sequences
from agentfly_train.build import make_trainer
from agentfly_train.data import run_data
from agentfly_train.models import load_policy, make_codec
from agentfly_train.trl_args import grpo_config
from tests.helpers.runs import LEARNING_TASKS, quickstart_config


def _trainer(warm_policy, tmp_path, *overrides: str):
    """The run's trainer on the warm policy: 2 prompts x 4 rollouts, one optimiser step per rollout batch."""
    config = quickstart_config(
        [
            *LEARNING_TASKS,
            f"actor_rollout_ref.model.path={warm_policy}",
            "sft.enable=false",
            "agent.num_chains=4",
            "data.train_batch_size=2",
            f"trainer.default_local_dir={tmp_path}",
            *overrides,
        ]
    )
    set_seed(0)
    data = run_data(config)
    model, tokenizer = load_policy(config)
    codec = make_codec(config, tokenizer, data.env, data.train[0])
    data.env.close()
    trainer = make_trainer(config, grpo_config(config, 1, "cpu", torch.float32), model, tokenizer, codec, data, 1)
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by the training loop, which these tests do not run
    return trainer


def _generation_batch(trainer) -> list[dict]:
    """The dataset rows of a rollout step: each prompt ``num_generations`` times in a row, as TRL's sampler does."""
    dataset = trainer.train_dataset
    return [dataset[i] for i in range(len(dataset)) for _ in range(trainer.num_generations)]


def _rollout_batch(trainer) -> dict:
    """TRL's first micro-batch of a rollout step (generated, scored, shuffled and buffered by TRL)."""
    return trainer._prepare_inputs(_generation_batch(trainer))


def _shut_down(trainer) -> None:
    trainer.close()


def test_grpo_advantages_are_trls_on_sampled_tokens_and_zero_on_tool_tokens(warm_policy, tmp_path):
    trainer = _trainer(warm_policy, tmp_path)
    inputs = trainer._generate_and_score_completions(_generation_batch(trainer))  # before TRL shuffles the rows
    mask = loss_mask(inputs)
    assert (inputs["tool_mask"][inputs["completion_mask"].bool()] == 0).any(), "no tool turn in the batch"
    trl_advantages = torch.tensor(trainer._logs["advantages"])  # TRL's group-normalised (B,) advantages
    assert trl_advantages.abs().max() > 0.1, "every group had equal rewards"
    ours = inputs["advantages"]  # (B, T)
    assert ours.shape == mask.shape and torch.all(ours[mask == 0] == 0)
    # equal on every sampled token, up to the std's epsilon (verl's 1e-6 here, TRL's 1e-4)
    expected = trl_advantages[:, None].expand_as(ours)
    torch.testing.assert_close(ours[mask == 1], expected[mask == 1], rtol=1e-3, atol=1e-4)
    _shut_down(trainer)


def test_loss_and_gradient_equal_trls_for_the_default_grpo_objective(warm_policy, tmp_path):
    trainer = _trainer(warm_policy, tmp_path)
    inputs = _rollout_batch(trainer)
    generator = torch.Generator().manual_seed(0)
    logps = trainer._policy_logps(inputs)
    # an off-policy ratio in [0.74, 1.35], so the clip is active on some tokens
    inputs["old_per_token_logps"] = logps + 0.3 * (2 * torch.rand(logps.shape, generator=generator) - 1)
    results = []
    for loss_of in (GRPOTrainer._compute_loss, type(trainer)._compute_loss):
        trainer.model.zero_grad()
        loss = loss_of(trainer, trainer.model, inputs)
        loss.backward()
        results.append((loss.detach(), [p.grad.clone() for p in trainer.model.parameters() if p.grad is not None]))
    (trl_loss, trl_grads), (our_loss, our_grads) = results
    assert trainer._metrics["train"]["actor/pg_clipfrac"][-1] > 0
    torch.testing.assert_close(our_loss, trl_loss, rtol=1e-5, atol=1e-7)
    assert len(our_grads) == len(trl_grads)
    for ours, theirs in zip(our_grads, trl_grads, strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-7)
    _shut_down(trainer)


ENTROPY = "actor_rollout_ref.actor.entropy_coeff=1"


@pytest.mark.parametrize(
    "overrides",
    [
        ("algorithm.adv_estimator=gae", "algorithm.use_kl_in_reward=true", "algorithm.kl_ctrl.type=adaptive"),
        ("algorithm.adv_estimator=remax", "actor_rollout_ref.actor.use_kl_loss=true"),
        ("algorithm.adv_estimator=reinforce_plus_plus", "algorithm.gamma=0.9", ENTROPY),
    ],
    ids=["gae-kl_in_reward", "remax-kl_loss", "rpp-entropy"],
)
def test_tool_tokens_and_padding_get_no_advantage_kl_or_loss(warm_policy, tmp_path, overrides):
    trainer = _trainer(warm_policy, tmp_path, *overrides, "actor_rollout_ref.actor.kl_loss_type=k2")
    inputs = _rollout_batch(trainer)
    mask = loss_mask(inputs)
    assert (inputs["tool_mask"][inputs["completion_mask"].bool()] == 0).any(), "no tool turn in the batch"
    assert torch.all(inputs["advantages"][mask == 0] == 0) and inputs["advantages"][mask == 1].abs().max() > 0
    losses = []
    for garbage in (0.0, 5.0):
        perturbed = dict(inputs)
        for key in ("advantages", "old_per_token_logps", "ref_per_token_logps"):
            if key in perturbed:
                perturbed[key] = torch.where(mask.bool(), perturbed[key], torch.full_like(perturbed[key], garbage))
        losses.append(trainer._compute_loss(trainer.model, perturbed).item())
    assert losses[0] == pytest.approx(losses[1], abs=1e-6)
    _shut_down(trainer)


def test_kl_in_reward_updates_the_controller_with_the_batch_kl(warm_policy, tmp_path):
    trainer = _trainer(
        warm_policy,
        tmp_path,
        "algorithm.use_kl_in_reward=true",
        "algorithm.kl_ctrl.type=adaptive",
        "algorithm.kl_ctrl.kl_coef=0.01",
        "algorithm.kl_ctrl.horizon=100",
    )
    _rollout_batch(trainer)
    metrics = trainer._metrics["train"]
    # the reference is the starting policy: KL ~ 0, so the error clips to -20 % over 8 of 100 horizon episodes
    assert metrics["actor/reward_kl_penalty"][-1] == pytest.approx(0.0, abs=1e-5)
    assert metrics["actor/reward_kl_penalty_coeff"][-1] == 0.01
    assert trainer.kl_ctrl.value == pytest.approx(0.01 * (1 - 0.2 * 8 / 100))
    _shut_down(trainer)


def test_gae_trains_the_critic_and_the_warmup_keeps_the_policy_still(warm_policy, tmp_path):
    trainer = _trainer(
        warm_policy,
        tmp_path,
        "algorithm.adv_estimator=gae",
        "trainer.critic_warmup=1",
        "algorithm.rollout_correction.rollout_is=token",
    )
    critic_before = [p.detach().clone() for p in trainer.critic.model.parameters()]
    inputs = _rollout_batch(trainer)
    metrics = trainer._metrics["train"]
    assert {"critic/vf_loss", "critic/vf_explained_var", "critic/values/mean", "critic/returns/mean"} <= set(metrics)
    # the warm-up loss runs no forward pass: the engine/trainer gap is measured at rollout time instead
    assert metrics["rollout/logprob_diff_mean"][-1] < 1e-4 and "rollout_is_weights" in inputs
    assert trainer._gap_chunks is None
    assert any(not torch.equal(a, b) for a, b in zip(critic_before, trainer.critic.model.parameters(), strict=True))
    loss = trainer._compute_loss(trainer.model, inputs)
    assert loss.item() == 0.0 and loss.grad_fn is None  # step 1 of 1 warm-up step: no policy gradient
    trainer.state.global_step = 1
    assert trainer._compute_loss(trainer.model, inputs).grad_fn is not None
    _shut_down(trainer)


def _perturb_policy(trainer, scale: float = 0.05) -> None:
    """Moves the trainable weights off the reference, so that KL(π ‖ π_ref) > 0."""
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for parameter in trainer.model.parameters():
            if parameter.requires_grad:
                parameter.add_(scale * torch.randn(parameter.shape, generator=generator))


def _exact_kl(trainer, batch) -> torch.Tensor:
    """(B, T) KL(π ‖ π_ref) by its definition, from both models' plain logits (the reference: TRL's ``ref_model``,
    or with LoRA the base model with the adapter disabled)."""
    ids, attention = sequences(batch)
    length = batch["completion_ids"].shape[1]

    def log_probs(model) -> torch.Tensor:
        logits = model(input_ids=ids, attention_mask=attention).logits[:, -length - 1 : -1]
        return (logits / trainer.temperature).log_softmax(-1)

    with torch.no_grad():
        log_p = log_probs(trainer.model)
        if trainer.ref_model is not None:
            log_q = log_probs(trainer.ref_model)
        else:
            with trainer.model.disable_adapter():
                log_q = log_probs(trainer.model)
    return (log_p.exp() * (log_p - log_q)).sum(-1)


FULL_KL_LOSS = ("actor_rollout_ref.actor.use_kl_loss=true", "actor_rollout_ref.actor.kl_loss_type=full")


def test_the_full_kl_loss_scores_completions_as_trls_fused_head_and_takes_the_exact_kl(warm_policy, tmp_path):
    trainer = _trainer(warm_policy, tmp_path, *FULL_KL_LOSS, "actor_rollout_ref.rollout.temperature=0.7")
    inputs = _rollout_batch(trainer)
    _perturb_policy(trainer)
    mask = loss_mask(inputs).bool()
    logps, entropies, _, kl = trainer._policy_terms(trainer.model, inputs)
    ids, attention = sequences(inputs)
    trl_logps, trl_entropies, _ = trainer._get_per_token_logps_and_entropies(
        trainer.model, ids, attention, inputs["completion_ids"].shape[1], compute_entropy=True
    )
    torch.testing.assert_close(logps[mask], trl_logps[mask], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(entropies[mask], trl_entropies[mask], rtol=1e-4, atol=1e-5)
    expected = _exact_kl(trainer, inputs)
    assert expected[mask].min() > 1e-4, "the perturbed policy should differ from the reference everywhere"
    torch.testing.assert_close(kl[mask], expected[mask], rtol=1e-4, atol=1e-6)
    loss = trainer._compute_loss(trainer.model, inputs)
    assert trainer._metrics["train"]["actor/kl_loss"][-1] > 0
    loss.backward()
    assert all(p.grad is not None for p in trainer.model.parameters() if p.requires_grad)
    _shut_down(trainer)


@pytest.mark.parametrize("lora", [(), ("actor_rollout_ref.model.lora_rank=4",)], ids=["ref_model", "lora"])
def test_the_full_kl_in_the_reward_is_the_exact_kl_of_the_batch(warm_policy, tmp_path, lora):
    trainer = _trainer(
        warm_policy,
        tmp_path,
        *lora,
        "algorithm.use_kl_in_reward=true",
        "algorithm.kl_penalty=full",
        "algorithm.kl_ctrl.kl_coef=0.1",
    )
    assert (trainer.ref_model is None) == bool(lora)  # with LoRA, the reference is the adapter switched off
    _perturb_policy(trainer)
    output = trainer._generate_and_score_completions(_generation_batch(trainer))
    mask = loss_mask(output)
    per_sequence = (_exact_kl(trainer, output) * mask).sum(-1) / mask.sum(-1).clamp(min=1)
    metrics = trainer._metrics["train"]
    assert per_sequence.mean().item() > 1e-3
    assert metrics["actor/reward_kl_penalty"][-1] == pytest.approx(per_sequence.mean().item(), rel=1e-4)
    assert metrics["actor/reward_kl_penalty_coeff"][-1] == 0.1
    _shut_down(trainer)


def _step_losses(trainer) -> list[tuple[Tensor, list[Tensor]]]:
    """The loss and the gradients of each buffered micro-batch of the rollout step, in the training loop's order."""
    losses = []
    for index, inputs in enumerate(trainer._buffered_inputs):
        trainer._step = index  # TRL's micro-batch counter, which the training loop advances
        trainer.model.zero_grad()
        loss = trainer._compute_loss(trainer.model, inputs)
        loss.backward()
        losses.append((loss.detach(), [p.grad.clone() for p in trainer.model.parameters() if p.grad is not None]))
    return losses


def test_rollout_correction_weights_the_loss_by_the_truncated_engine_trainer_ratio(warm_policy, tmp_path):
    """One optimiser step per rollout batch: the trainer's log-probs are the loss's own forward (no extra pass)."""
    trainer = _trainer(
        warm_policy,
        tmp_path,
        "algorithm.rollout_correction.rollout_is=token",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",  # two micro-batches
    )
    _rollout_batch(trainer)
    micro_batches = trainer._buffered_inputs
    assert len(micro_batches) > 1 and all("old_per_token_logps" not in b for b in micro_batches)
    metrics = trainer._metrics["train"]
    assert "rollout/logprob_diff_mean" not in metrics  # measured by the losses, after the last micro-batch
    plain = _step_losses(trainer)
    # the HF engine samples from the trained model itself: its log-probs are the trainer's, up to float32 noise
    assert metrics["rollout/logprob_diff_mean"] and metrics["rollout/logprob_diff_mean"][-1] < 1e-4
    assert metrics["rollout/logprob_diff_max"][-1] < 1e-3
    assert metrics["rollout_corr/rollout_is_mean"][-1] == pytest.approx(1.0, abs=1e-3)
    assert len(metrics["rollout/logprob_diff_mean"]) == 1  # once per rollout batch, not per micro-batch

    # An engine 3x less likely than the trainer on every sampled token: ratio 3, truncated at the threshold 2.
    for inputs in micro_batches:
        inputs["sampling_per_token_logps"] = trainer._policy_logps(inputs) - torch.log(torch.tensor(3.0))
    trainer._gap_chunks = []  # the rollout step's measurement, again
    weighted = _step_losses(trainer)
    assert metrics["rollout/logprob_diff_mean"][-1] == pytest.approx(float(torch.log(torch.tensor(3.0))), rel=1e-5)
    assert metrics["rollout_corr/rollout_is_clipped_frac"][-1] == pytest.approx(1.0)
    assert metrics["rollout_corr/rollout_is_raw_min"][-1] == pytest.approx(3.0, rel=1e-4)
    assert metrics["rollout_corr/rollout_is_mean"][-1] == pytest.approx(2.0)
    for (plain_loss, plain_grads), (weighted_loss, weighted_grads) in zip(plain, weighted, strict=True):
        assert max(g.abs().max() for g in plain_grads) > 1e-4  # (the on-policy loss itself is ~0)
        torch.testing.assert_close(weighted_loss, 2 * plain_loss, rtol=1e-5, atol=1e-7)
        for ours, theirs in zip(weighted_grads, plain_grads, strict=True):
            torch.testing.assert_close(ours, 2 * theirs, rtol=1e-4, atol=1e-7)
    _shut_down(trainer)


def test_rollout_correction_with_several_optimiser_steps_per_batch_uses_the_rollout_time_policy(warm_policy, tmp_path):
    """Two optimiser steps per rollout batch: π_train is the policy before the first update, computed once at
    rollout time, and the weights go with the batch."""
    trainer = _trainer(
        warm_policy,
        tmp_path,
        "algorithm.rollout_correction.rollout_is=sequence",
        "actor_rollout_ref.actor.ppo_mini_batch_size=1",
    )
    output = trainer._generate_and_score_completions(_generation_batch(trainer))
    mask = loss_mask(output)
    metrics = trainer._metrics["train"]
    assert metrics["rollout/logprob_diff_mean"][-1] < 1e-4 and metrics["rollout/logprob_diff_max"][-1] < 1e-3
    weights = output["rollout_is_weights"]
    torch.testing.assert_close(weights[mask == 1], torch.ones_like(weights[mask == 1]), atol=1e-3, rtol=0)
    assert torch.all(weights[mask == 0] == 0) and trainer._gap_chunks is None
    _shut_down(trainer)


def test_dropped_reasoning_trains_each_turn_as_a_row_with_its_episodes_advantage(warm_policy, tmp_path):
    """With past reasoning dropped, TRL gets ``max_turns`` rows per episode, each the turn's sampled tokens after the
    context it was sampled in, and every sampled token of an episode has the episode's GRPO advantage. (The tiny
    policy does not reason: its tool-call tag stands in for the end of a reasoning block, and the turn rows that
    ``agent.past_reasoning=drop`` asks for are asked for by ``agent.context.step_wise``.)"""
    trainer = _trainer(warm_policy, tmp_path, "agent.context.step_wise=true")
    trainer.agent.codec.reasoning_end = "<tool_call>"
    turns = trainer.agent.turn_rows
    assert turns == 2  # LEARNING_TASKS' max_turns
    inputs = trainer._generate_and_score_completions(_generation_batch(trainer))  # before TRL shuffles the rows
    mask = loss_mask(inputs)  # (episodes * turns, T)
    rewards = torch.tensor(trainer._batch_turns.rewards).sum(dim=1)  # (episodes,): each episode's return
    assert mask.shape[0] == len(rewards) * turns == 16
    assert mask[1::turns].sum(dim=1).gt(0).any(), "no episode took a second turn"
    groups = rewards.view(-1, trainer.num_generations)  # GRPO over each prompt's episodes
    expected = ((groups - groups.mean(1, keepdim=True)) / (groups.std(1, keepdim=True) + 1e-6)).flatten()
    ours = inputs["advantages"]
    assert torch.all(ours[mask == 0] == 0)
    for row in range(mask.shape[0]):
        torch.testing.assert_close(ours[row][mask[row] == 1], expected[row // turns].expand(int(mask[row].sum())))
    # a second turn's prompt is the first turn's prompt, then the first turn without its "reasoning"
    prompts = [ids[m.bool()].tolist() for ids, m in zip(inputs["prompt_ids"], inputs["prompt_mask"], strict=True)]
    second = next(row for row in range(1, mask.shape[0], turns) if mask[row].sum() > 0)
    first_turn = inputs["completion_ids"][second - 1][mask[second - 1] == 1].tolist()
    assert prompts[second][: len(prompts[second - 1])] == prompts[second - 1]
    assert prompts[second][len(prompts[second - 1]) :][: len(first_turn)] != first_turn  # its start was dropped
    _shut_down(trainer)


def test_an_excluded_episode_is_out_of_its_groups_baseline_and_a_thinned_group_is_dropped(warm_policy, tmp_path):
    """An episode that ended on an infrastructure failure (excluded) trains nothing, and the advantages of the rest of
    its group are the estimator's on the group without it; a group left with one episode trains nothing at all."""
    from agentfly_train.algorithms import compute_advantage

    trainer = _trainer(warm_policy, tmp_path)
    output = trainer._generate_and_score_completions(_generation_batch(trainer))  # 2 groups of 4, before shuffling
    rewards = torch.tensor(trainer._batch_turns.rewards).sum(dim=1)  # (episodes,): each episode's return
    varied = next(g for g in range(2) if rewards[4 * g : 4 * g + 4].std() > 0)  # a group whose baseline matters
    first, other = 4 * varied, 4 * (1 - varied)
    excluded = [0.0] * 8
    excluded[first] = 1.0  # out of the varied group
    excluded[other + 1 : other + 4] = [1.0] * 3  # the other group keeps one episode: dropped
    trainer._batch_excluded = excluded
    before = loss_mask(output)
    advantages = trainer._advantages(output, "train")
    mask = loss_mask(output)
    left_out = [first, *range(other, other + 4)]
    assert mask[left_out].sum() == 0 and advantages[left_out].abs().sum() == 0
    kept = list(range(first + 1, first + 4))
    assert torch.equal(mask[kept], before[kept])
    expected, _ = compute_advantage(
        "grpo",
        torch.nn.functional.pad(rewards[kept][:, None], (0, before.shape[1] - 1)),  # grpo sums a row's rewards
        before[kept],
        index=torch.zeros(3, dtype=torch.long),
        norm_adv_by_std_in_grpo=trainer.rl.algorithm.norm_adv_by_std_in_grpo,
    )
    torch.testing.assert_close(advantages[kept][mask[kept] == 1], expected[before[kept] == 1])
    assert advantages[kept].abs().max() > 0.1
    _shut_down(trainer)


@pytest.mark.parametrize("estimator", ["rloo_turns", pytest.param("gae_turns", marks=pytest.mark.slow)])
def test_saved_episodes_carry_the_advantage_each_turn_trains_with(warm_policy, tmp_path, estimator):
    """The training samples' ``turn_advantages`` are the advantages the loss gets on each turn's tokens, one value per
    turn, and the turns of one episode get different ones."""
    trainer = _trainer(warm_policy, tmp_path, f"algorithm.adv_estimator={estimator}", "trainer.log_train_generations=8")
    inputs = trainer._generate_and_score_completions(_generation_batch(trainer))  # before TRL shuffles the rows
    mask = loss_mask(inputs)
    path = tmp_path / "train_samples" / "step_000001.jsonl"
    episodes = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(episodes) == 8 == mask.shape[0]
    differing = 0
    for row, episode in enumerate(episodes):
        trained = inputs["advantages"][row][mask[row] == 1].split(trainer._batch_turns.tokens[row][: episode["turns"]])
        assert len(episode["turn_advantages"]) == len(episode["turn_rewards"]) == episode["turns"] == len(trained)
        for saved, tokens in zip(episode["turn_advantages"], trained, strict=True):
            assert saved == pytest.approx(tokens[0].item(), abs=1e-6) and torch.all(tokens == tokens[0])
        differing += len(set(episode["turn_advantages"])) > 1
    assert differing, "no episode's turns got different advantages"
    _shut_down(trainer)


@pytest.mark.slow
def test_with_turn_rows_each_row_trains_with_its_turns_saved_advantage(warm_policy, tmp_path):
    """``grpo_turns`` with past reasoning dropped (each turn its own row): every row's tokens get the advantage saved
    for its turn."""
    trainer = _trainer(warm_policy, tmp_path, "algorithm.adv_estimator=grpo_turns", "trainer.log_train_generations=8",
                       "agent.context.step_wise=true")  # fmt: skip
    trainer.agent.codec.reasoning_end = "<tool_call>"  # as in the dropped-reasoning test above
    turns = trainer.agent.turn_rows
    inputs = trainer._generate_and_score_completions(_generation_batch(trainer))  # before TRL shuffles the rows
    mask = loss_mask(inputs)
    path = tmp_path / "train_samples" / "step_000001.jsonl"
    episodes = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(episodes) * turns == mask.shape[0] == 16
    for episode_index, episode in enumerate(episodes):
        for turn, saved in enumerate(episode["turn_advantages"]):
            row = episode_index * turns + turn
            trained = inputs["advantages"][row][mask[row] == 1]
            assert len(trained) > 0 and torch.allclose(trained, torch.full_like(trained, saved), atol=1e-6)
    assert any(len(set(episode["turn_advantages"])) > 1 for episode in episodes)
    _shut_down(trainer)
