"""The bias test of issue #38 (verl issue #7244's point): on a problem where the policy decides how many turns an
episode takes, the naive per-turn-index baselines bias the policy gradient and the leave-one-out baseline of
``rloo_turns`` / ``grpo_turns`` does not.

The problem: at turn 1 a softmax policy (logits θ_stop, θ_go) stops (reward 0.5, the episode ends after one turn) or
goes on (an intermediate reward 0.2); at turn 2 it answers x (reward 1) or y (reward 0) with logits θ_x, θ_y. Three
trajectories, so every group of n = 3 episodes (27 of them) is enumerated with its exact probability and the expected
update E[(1/n) Σ_i Σ_t A_t^i ∇log π(a_t^i)] is computed exactly, against the policy gradient ∇J by autograd (γ = 1),
or against the update without a baseline, E[Σ_t R_t ∇log π(a_t)] (γ < 1, where that is what per-turn discounting
estimates).
"""

from __future__ import annotations

import itertools

import pytest
import torch

from agentfly_train import algorithms as alg

THETA = torch.tensor([0.3, -0.2, 0.1, 0.4], dtype=torch.float64)  # logits: stop, go on; x, y
STOP, GO_ON, X, Y = 0.5, 0.2, 1.0, 0.0  # rewards
PATHS = (("stop",), ("go", "x"), ("go", "y"))
N = 3  # episodes per group


def turn_rewards(path: tuple[str, ...]) -> list[float]:
    return [STOP] if path == ("stop",) else [GO_ON, X if path[1] == "x" else Y]


def path_probabilities(theta: torch.Tensor) -> list[torch.Tensor]:
    first, second = theta[:2].softmax(0), theta[2:].softmax(0)
    return [first[0], first[1] * second[0], first[1] * second[1]]


def policy_gradient(gamma: float) -> torch.Tensor:
    """∇J, J = E[Σ_t γ^t r_t], by autograd over the three trajectories."""
    theta = THETA.clone().requires_grad_()
    returns = [sum(gamma**t * r for t, r in enumerate(turn_rewards(path))) for path in PATHS]
    objective = sum(p * r for p, r in zip(path_probabilities(theta), returns, strict=True))
    return torch.autograd.grad(objective, theta)[0]


def scores(path: tuple[str, ...]) -> torch.Tensor:
    """(turns, 4) ∇log π(a_t) of each turn of ``path``: one-hot of the action minus the softmax."""
    first, second = THETA[:2].softmax(0), THETA[2:].softmax(0)
    one_hot, zeros = torch.eye(2, dtype=THETA.dtype), torch.zeros(2, dtype=THETA.dtype)
    rows = [torch.cat([one_hot[int(path[0] != "stop")] - first, zeros])]
    if len(path) == 2:
        rows.append(torch.cat([zeros, one_hot[int(path[1] != "x")] - second]))
    return torch.stack(rows)


# Every group of N episodes, as one batch: group g holds rows N g .. N g + N − 1, one token per turn (a tool token
# between the two turns of an episode that goes on).
GROUPS = list(itertools.product(PATHS, repeat=N))
ROWS = [path for group in GROUPS for path in group]
TURNS = alg.Turns(
    tokens=torch.tensor([[1] * len(p) + [0] * (2 - len(p)) for p in ROWS]),
    rewards=torch.tensor([turn_rewards(p) + [0.0] * (2 - len(p)) for p in ROWS], dtype=torch.float64),
    anchors=torch.zeros(len(ROWS), 2, dtype=torch.long),
    taken=torch.tensor([[True] * len(p) + [False] * (2 - len(p)) for p in ROWS]),
)
MASK = torch.tensor([[1.0, 0.0, 1.0] if len(p) == 2 else [1.0, 0.0, 0.0] for p in ROWS], dtype=torch.float64)
INDEX = torch.arange(len(GROUPS)).repeat_interleave(N)
PROBABILITY = [
    float(torch.stack([path_probabilities(THETA)[PATHS.index(p)] for p in group]).prod()) for group in GROUPS
]


def expected_update(per_turn: torch.Tensor) -> torch.Tensor:
    """E[(1/N) Σ_i Σ_t A_t^i ∇log π(a_t^i)] over all groups, ``per_turn`` (rows, 2) the advantage of each turn."""
    total = torch.zeros(4, dtype=torch.float64)
    for row, path in enumerate(ROWS):
        total += PROBABILITY[row // N] / N * (per_turn[row, : len(path)] @ scores(path))
    return total


def returns(gamma: float) -> torch.Tensor:
    """(rows, 2) R_t = Σ_{k≥t} γ^(k−t) r_k, 0 on turns not taken."""
    rewards = TURNS.rewards
    return torch.stack([rewards[:, 0] + gamma * rewards[:, 1], rewards[:, 1]], 1) * TURNS.taken


def group_rows(row: int) -> range:
    return range(row // N * N, row // N * N + N)


def naive_per_index(gamma: float) -> torch.Tensor:
    """A_t^i = R_t^i − mean of R_t over the group's episodes that reached turn t (episode i among them)."""
    r, advantages = returns(gamma), torch.zeros(len(ROWS), 2, dtype=torch.float64)
    for row, path in enumerate(ROWS):
        for t in range(len(path)):
            reached = [j for j in group_rows(row) if TURNS.taken[j, t]]
            advantages[row, t] = r[row, t] - r[reached, t].mean()
    return advantages


def naive_mt_grpo(gamma: float) -> torch.Tensor:
    """MT-GRPO's form (verl #7244): A_t^i = Σ_{k=t}^{K_i−1} γ^(k−t) (r_k^i − mean of r_k over the episodes that
    reached turn k), a baseline whose number of terms is set by episode i's own length."""
    rewards, advantages = TURNS.rewards, torch.zeros(len(ROWS), 2, dtype=torch.float64)
    for row, path in enumerate(ROWS):
        for t in range(len(path)):
            for k in range(t, len(path)):
                reached = [j for j in group_rows(row) if TURNS.taken[j, k]]
                advantages[row, t] += gamma ** (k - t) * (rewards[row, k] - rewards[reached, k].mean())
    return advantages


def ours(estimator: str, gamma: float) -> torch.Tensor:
    """(rows, 2) the registered estimator's advantage of each turn (Dr. GRPO form: no division by the std)."""
    advantages, _ = alg.compute_advantage(
        estimator, TURNS.token_rewards(MASK), MASK, index=INDEX, turns=TURNS, turn_gamma=gamma,
        norm_adv_by_std_in_grpo=False,
    )  # fmt: skip
    return TURNS.means(advantages, MASK).nan_to_num()


def off_direction(update: torch.Tensor, gradient: torch.Tensor) -> float:
    """The share of ``update`` orthogonal to ``gradient``: 0 when it is a multiple of it (bias beyond a scale)."""
    along = (update @ gradient) / (gradient @ gradient) * gradient
    return float((update - along).norm() / update.norm())


def test_the_groups_enumerate_every_outcome():
    assert len(GROUPS) == 27 and sum(PROBABILITY) == pytest.approx(1.0, abs=1e-12)


def test_our_leave_one_out_baseline_is_unbiased_where_the_policy_decides_the_length():
    gradient = policy_gradient(1.0)
    assert gradient.abs().min() > 0.02  # every logit moves: a real test of each component
    torch.testing.assert_close(expected_update(ours("rloo_turns", 1.0)), gradient, atol=1e-12, rtol=0)
    # grpo_turns is GRPO's (n − 1)/n times it: the same direction, a constant scale
    torch.testing.assert_close(expected_update(ours("grpo_turns", 1.0)), (N - 1) / N * gradient, atol=1e-12, rtol=0)


def test_with_discounting_ours_equals_the_update_without_a_baseline():
    # with γ < 1 the per-turn update estimates E[Σ_t R_t ∇log π(a_t)] (turn t's term not scaled by γ^t, as in
    # practice); the baseline must leave that expectation unchanged
    without_baseline = expected_update(returns(0.9))
    torch.testing.assert_close(expected_update(ours("rloo_turns", 0.9)), without_baseline, atol=1e-12, rtol=0)


def test_the_naive_per_index_baselines_are_biased():
    gradient = policy_gradient(1.0)
    naive = expected_update(naive_per_index(1.0))
    # it includes episode i (a factor 1 − 1/m_t, m_t the episodes that reached turn t), so the second turn's terms
    # shrink more than the first's: not a multiple of the gradient (26% of it off the gradient's direction)
    assert off_direction(naive, gradient) > 0.2
    assert off_direction(expected_update(ours("rloo_turns", 1.0)), gradient) < 1e-9
    # MT-GRPO's sum of per-index means penalises going on by the mean intermediate reward: the stop-or-go logit
    # moves the wrong way (the policy gradient says go on more, it says stop more)
    mt_grpo = expected_update(naive_mt_grpo(1.0))
    assert gradient[1] > 0.02 and mt_grpo[1] < -0.02
