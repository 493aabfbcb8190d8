"""Turn-level credit on discounted per-turn returns: ``grpo_turns``, ``rloo_turns`` and ``reinforce_plus_plus_turns``
(critic-free, with a leave-one-out baseline per turn index that stays unbiased when the policy decides how many
turns an episode takes) and ``gae_turns`` (GAE over turns, the critic valued at turn boundaries).

Notation: episode i of group g (n episodes) takes turns t = 0 .. K_i − 1; r_t^i is the reward of its turn t (the sum
of the token rewards on the turn's sampled tokens: the env's reward of that step, the final score on the last turn,
minus β·KL with ``use_kl_in_reward``), and R_t^i = Σ_{k≥t} γ^(k−t) r_k^i its discounted return from turn t, γ the
discount per turn (``turn_gamma``). Every token of a turn gets the turn's advantage; tool tokens and padding get 0.

**Why leave-one-out per turn index.** The policy gradient with per-turn credit is
E[Σ_t ∇log π(a_t^i | h_t^i) (R_t^i − b_t^i)], which equals the true gradient E[Σ_t ∇log π(a_t^i | h_t^i) R_t^i]
only when E[∇log π(a_t^i | h_t^i) b_t^i] = 0, i.e. when b_t^i does not depend on episode i's own actions from turn t
on. The *naive* per-turn-index baseline, the mean of R_t over the episodes of the group that reached turn t, breaks
this twice (verl issue #7244 "a turn-level baseline that stays unbiased under variable turn counts" shows the MT-GRPO
form, Σ_{k=t}^{K_i−1} of per-index means of r_k, whose number of terms is set by episode i's own stopping turn):

- it contains R_t^i itself: R_t^i − mean = (1 − 1/m_t)(R_t^i − mean of the others), m_t the number of episodes that
  reached turn t, so each turn's term is scaled by a factor that falls with how few episodes reach that turn: the
  expected update reweights the turns' terms against each other and is no longer along the policy gradient;
- with per-index means summed over the episode's own remaining turns (MT-GRPO), the baseline grows with the episode's
  length, an action-dependent bonus on every decision to take another turn.

Here b_t^i = mean of R_t^j over the *other* episodes j ≠ i of the group that took turn t, and 0 when no other episode
did (the baseline is then undefined; 0 keeps it independent of episode i). It is a function of the other episodes
only, which are sampled independently of episode i, so E[∇log π(a_t^i | h_t^i) b_t^i] = E[b_t^i] ·
E[∇log π(a_t^i | h_t^i)] = 0 (the score function has mean 0 under π) whether or not the policy decides the length:
the estimator is unbiased (Kool et al., 2019, "Buy 4 REINFORCE samples, get a baseline for free!", applied per turn
index). ``tests/train/algorithms/test_turn_credit_bias.py`` computes the expected update exactly on a two-turn
problem whose policy chooses the episode length: ours equals the policy gradient, the naive ones do not.

The GRPO and REINFORCE++ forms multiply by GRPO's centring factor c_n = (n − 1)/n (1 for a group of one), one constant
per group: GRPO's R_i − mean_g R equals c_n (R_i − mean of the others), so on one-turn episodes ``grpo_turns`` is
``grpo``, ``rloo_turns`` is ``rloo`` and ``reinforce_plus_plus_turns`` is ``reinforce_plus_plus_baseline``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from agentfly_train.algorithms.common import _masked_whiten
from agentfly_train.algorithms.estimators import (
    _group_mean_std,
    _per_row,
    _turn_returns,
    register_advantage_estimator,
)
from agentfly_train.algorithms.turns import Turns


def _returns(token_level_rewards: Tensor, mask: Tensor, turns: Turns, gamma: float) -> Tensor:
    """(B, K) float64 R_t = Σ_{k≥t} γ^(k−t) r_k, r_k the sum of the token rewards on turn k's valid tokens."""
    return _turn_returns(turns.sums(token_level_rewards.double(), mask), gamma)


def _leave_one_out(returns: Tensor, taken: Tensor, group: Tensor) -> tuple[Tensor, Tensor]:
    """(B, K) baselines b_t^i = mean of R_t^j over the other episodes j of i's group that took turn t (0 where none
    did, and on slots i did not take), and (B,) GRPO's centring factor c_n = (n − 1)/n of each row's group (1 for a
    group of one)."""
    taken = taken.to(returns.device)
    groups = int(group.max()) + 1
    took = taken.to(returns.dtype)
    totals = torch.zeros(groups, returns.shape[1], dtype=returns.dtype, device=returns.device)
    # Sums of R − (the largest R at t in the group), which are exact zeros where the group's returns at t are equal,
    # so that such a turn gets exactly 0 (the shift cancels in R − b).
    rows = group[:, None].expand_as(returns)
    top = totals.scatter_reduce(0, rows, returns.masked_fill(~taken, -torch.inf), "amax", include_self=False)
    shift = top.nan_to_num(posinf=0.0, neginf=0.0).index_select(0, group)  # (B, K)
    shifted = (returns - shift) * took
    others = totals.index_add(0, group, shifted).index_select(0, group) - shifted  # (B, K)
    count = totals.index_add(0, group, took).index_select(0, group) - took  # (B, K) other episodes at turn t
    baseline = torch.where(taken & (count > 0), others / count.clamp(min=1) + shift, 0.0)
    size = _per_row(torch.bincount(group).to(returns.dtype), group)  # (B,) n
    return baseline, torch.where(size > 1, (size - 1) / size, 1.0)


def _centred(
    token_level_rewards: Tensor, mask: Tensor, group: Tensor, turns: Turns, gamma: float
) -> tuple[Tensor, Tensor, Tensor]:
    """(R (B, K), R − b (B, K), c_n (B,)) of the batch, float64."""
    returns = _returns(token_level_rewards, mask, turns, gamma)
    baseline, factor = _leave_one_out(returns, turns.taken, group)
    return returns, (returns - baseline) * turns.taken.to(returns.device), factor


@register_advantage_estimator("grpo_turns", compares_responses=True)
def grpo_turns(
    token_level_rewards: Tensor,
    mask: Tensor,
    *,
    group: Tensor,
    turns: Turns,
    turn_gamma: float,
    norm_adv_by_std_in_grpo: bool,
    epsilon: float,
) -> tuple[Tensor, Tensor]:
    """GRPO (Shao et al., 2024, arXiv:2402.03300) on discounted per-turn returns with a leave-one-out baseline per
    turn index (see the module docstring):

    A_t^i = c_n (R_t^i − b_t^i) / (std_g R_0 + ε), b_t^i = mean_{j ≠ i, K_j > t} R_t^j (0 if no such j),

    c_n = (n − 1)/n, std_g R_0 the unbiased std of the group's returns from the first turn (1 for a group of one);
    without ``norm_adv_by_std_in_grpo`` no division (Dr. GRPO). The std, as GRPO's own, is computed with episode i in
    it: an unbiased update needs ``norm_adv_by_std_in_grpo=false`` or ``rloo_turns``. Returns R_t^i on turn t's
    tokens.
    """
    returns, centred, factor = _centred(token_level_rewards, mask, group, turns, turn_gamma)
    advantage = factor[:, None] * centred
    if norm_adv_by_std_in_grpo:
        _, std, _ = _group_mean_std(returns[:, 0], group)
        advantage = advantage / (std[:, None] + epsilon)
    return turns.on_tokens(advantage.to(mask.dtype), mask), turns.on_tokens(returns.to(mask.dtype), mask)


@register_advantage_estimator("rloo_turns", compares_responses=True)
def rloo_turns(
    token_level_rewards: Tensor, mask: Tensor, *, group: Tensor, turns: Turns, turn_gamma: float
) -> tuple[Tensor, Tensor]:
    """RLOO (Ahmadian et al., 2024, arXiv:2402.14740) per turn: A_t^i = R_t^i − b_t^i, b_t^i the mean of R_t^j over
    the other episodes j of the group that took turn t, 0 when none did (see the module docstring: unbiased when the
    policy decides the episode's length). Returns R_t^i on turn t's tokens."""
    returns, centred, _ = _centred(token_level_rewards, mask, group, turns, turn_gamma)
    return turns.on_tokens(centred.to(mask.dtype), mask), turns.on_tokens(returns.to(mask.dtype), mask)


@register_advantage_estimator("reinforce_plus_plus_turns")
def reinforce_plus_plus_turns(
    token_level_rewards: Tensor, mask: Tensor, *, group: Tensor, turns: Turns, turn_gamma: float
) -> tuple[Tensor, Tensor]:
    """REINFORCE++-baseline (Hu, 2025, arXiv:2501.03262) per turn: A = whiten(c_n (R_t^i − b_t^i)) over all valid
    tokens of the batch, b_t^i the leave-one-out baseline of ``rloo_turns`` (see the module docstring) and c_n =
    (n − 1)/n. Whitening is per token (long turns weigh more in the batch mean and variance). Returns R_t^i on turn
    t's tokens."""
    returns, centred, factor = _centred(token_level_rewards, mask, group, turns, turn_gamma)
    advantages = _masked_whiten(turns.on_tokens((factor[:, None] * centred).to(mask.dtype), mask), mask)
    return advantages, turns.on_tokens(returns.to(mask.dtype), mask)


@register_advantage_estimator("gae_turns")
def gae_turns(
    token_level_rewards: Tensor, mask: Tensor, *, values: Tensor, turns: Turns, turn_gamma: float, lam: float
) -> tuple[Tensor, Tensor]:
    """GAE (Schulman et al., 2016, arXiv:1506.02438) over turns instead of tokens, whitened over the batch:

    δ_k = r_k + γ V_{k+1} − V_k,  A_k = Σ_{j≥0} (γλ)^j δ_{k+j},  V past the last turn = 0,

    γ = ``turn_gamma`` per turn, λ = ``lam``, r_k the turn's reward. V_k is the critic's value at turn k's first
    sampled token (``values`` (B, T) holds V_t read at the position that samples token t, so this is the value of the
    whole context the turn was sampled after, tool output included; a turn without sampled tokens takes the next
    turn's). Every token of turn k gets A_k (whitened over all valid tokens of the batch) and the critic's target
    A_k + V_k, the turn's λ-return: a turn pays its reward only at its end and is not discounted within, so that
    return is also the one expected from any state inside the turn.
    """
    rewards = turns.sums(token_level_rewards, mask).double()  # (B, K)
    start = turns.first_token_values(values, mask).double()  # (B, K) V_k
    following = torch.nn.functional.pad(start[:, 1:], (0, 1))  # (B, K) V_{k+1}
    taken = turns.taken.to(rewards.device)
    deltas = torch.where(taken, rewards + turn_gamma * following - start, 0.0)
    advantage = _turn_returns(deltas, turn_gamma * lam)
    returns = turns.on_tokens((advantage + start).to(mask.dtype), mask)
    return _masked_whiten(turns.on_tokens(advantage.to(mask.dtype), mask), mask), returns
