"""Batch tensors: episodes of turn rows, loss denominators of a step, masked statistics."""

from __future__ import annotations

import pytest
import torch
from accelerate import Accelerator

from agentfly_train.algorithms import Turns, agg_loss, compute_advantage
from agentfly_train.batch import (
    episode_mask,
    explained_variance,
    gather_rows,
    loss_mask,
    masked_stats,
    on_turn_rows,
    row_slices,
    step_denominator,
)

# Two episodes: sampled turn, tool output (env_mask 0), sampled turn, padding; and one that is all sampled.
COMPLETION_MASK = torch.tensor([[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1]])
TOOL_MASK = torch.tensor([[1, 1, 0, 0, 1, 1], [1, 1, 1, 1, 1, 1]])


@pytest.fixture(scope="module")
def accelerator():
    return Accelerator(cpu=True)


def test_loss_mask_drops_tool_tokens_and_padding():
    mask = loss_mask({"completion_mask": COMPLETION_MASK, "tool_mask": TOOL_MASK})
    assert mask.tolist() == [[1, 1, 0, 0, 1, 0], [1, 1, 1, 1, 1, 1]]
    assert loss_mask({"completion_mask": COMPLETION_MASK}).tolist() == COMPLETION_MASK.tolist()


def test_turn_rows_get_their_episodes_advantage_scored_per_episode():
    # one group of two episodes, two turn rows each: episode 0 (reward 1) took two turns of 2 and 1 sampled tokens,
    # episode 1 (reward 0) one turn of 3 (its second row is an untaken turn); GRPO: s = (1, 0), mean 1/2, std 1/√2
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1], [0, 0, 0]])
    episodes = episode_mask(mask, turns=2)
    assert episodes.tolist() == [[1, 1, 1], [1, 1, 1]]
    taken = torch.tensor([[True, True], [True, False]])
    tokens, turn_rewards = torch.tensor([[2, 1], [3, 0]]), torch.tensor([[0.0, 1.0], [0.0, 0.0]])
    turns = Turns(tokens, turn_rewards, torch.zeros(2, 2).long(), taken)
    rewards = turns.token_rewards(episodes)
    assert rewards.tolist() == [[0, 0, 1], [0, 0, 0]]
    advantages, _ = compute_advantage(
        "grpo", rewards, episodes, index=torch.tensor([0, 0]), norm_adv_by_std_in_grpo=True, gamma=1.0, lam=1.0
    )
    a = 0.5 / (0.5**0.5 + 1e-6)
    expected = [[a, a, 0], [a, 0, 0], [-a, -a, -a], [0, 0, 0]]
    assert torch.allclose(on_turn_rows(advantages, 2, mask), torch.tensor(expected))


@pytest.mark.parametrize(
    "mode", ["token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
)
def test_micro_batch_losses_with_the_step_denominator_add_up_to_the_whole_batch_loss(mode, accelerator):
    torch.manual_seed(0)
    mask = torch.tensor([[1, 1, 0, 1], [1, 0, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]])
    loss_mat = torch.randn(4, 4)
    width = 4  # the batch is padded to the completion budget here, so the norm mode's T is the same
    denominator = step_denominator([mask[:2], mask[2:]], mode, width, accelerator)
    parts = [agg_loss(loss_mat[rows], mask[rows], mode, denominator=denominator) for rows in (slice(0, 2), slice(2, 4))]
    assert sum(parts).item() == pytest.approx(agg_loss(loss_mat, mask, mode).item(), abs=1e-6)


def test_norm_mode_divides_by_the_completion_budget_not_the_batch_width(accelerator):
    mask = torch.tensor([[1, 1], [1, 0]])
    assert step_denominator([mask], "seq-mean-token-sum-norm", 10, accelerator).item() == 20  # 2 sequences x 10


def test_row_slices_cover_the_range_in_chunks_of_at_most_size_rows():
    assert row_slices(5, 2) == [slice(0, 2), slice(2, 4), slice(4, 5)]
    assert row_slices(7, 3, start=4) == [slice(4, 7)]
    assert row_slices(0, 4) == []


def test_gather_rows_on_one_process_is_the_identity(accelerator):
    x = torch.arange(6.0).view(2, 3)
    assert torch.equal(gather_rows(accelerator, x), x)


def test_masked_statistics_ignore_masked_entries():
    x = torch.tensor([[1.0, 100.0, -3.0], [2.0, -100.0, 0.0]])
    mask = torch.tensor([[1, 0, 1], [1, 0, 0]])
    assert masked_stats(x, mask) == {"mean": 0.0, "max": 2.0, "min": -3.0}
    assert masked_stats(x, torch.zeros_like(mask)) == {"mean": 0.0, "max": 0.0, "min": 0.0}


def test_explained_variance():
    returns = torch.tensor([[1.0, 2.0, 3.0, 99.0]])
    mask = torch.tensor([[1, 1, 1, 0]])
    assert explained_variance(returns, returns.clone(), mask) == pytest.approx(1.0, abs=1e-4)
    assert explained_variance(returns, torch.full_like(returns, 2.0), mask) == pytest.approx(0.0, abs=1e-4)
    assert explained_variance(returns, -returns, mask) < 0
    assert explained_variance(returns, returns, torch.tensor([[1, 0, 0, 0]])) == 0.0
