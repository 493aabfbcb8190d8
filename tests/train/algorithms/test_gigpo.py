"""``gigpo`` against values worked by hand from the paper's equations (Feng et al., 2025, arXiv:2505.10978): the
episode-level group advantage plus ω times the step-level one within anchor groups, on hand-made groups."""

from __future__ import annotations

import statistics

import pytest
import torch

from agentfly_train import algorithms as alg
from agentfly_train.batch import episode_mask, on_turn_rows

EPS = 1e-6
GAMMA = 0.5
A, B, C = 11, 12, 13  # anchor states (context digests)

# Group "a": three episodes of different lengths; group "b": one episode whose first anchor is also A.
#   episode 0: turns of 2 and 1 tokens (a tool token between them), anchors A, B, rewards 0, 1
#   episode 1: turns of 1, 2 and 1 tokens (tool tokens between), anchors A, B, C, rewards 0, 0, 0.5
#   episode 2: one turn of 3 tokens, anchor A, reward 0
#   episode 3 (group b): one turn of 2 tokens, anchor A, reward 1
MASK = torch.tensor([[1, 1, 0, 1, 0, 0], [1, 0, 1, 1, 0, 1], [1, 1, 1, 0, 0, 0], [1, 1, 0, 0, 0, 0]])
TURNS = alg.Turns(
    tokens=torch.tensor([[2, 1, 0], [1, 2, 1], [3, 0, 0], [2, 0, 0]]),
    rewards=torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 0.5], [0.0, 0.0, 0.0], [1.0, 0.0, 0.0]]),
    anchors=torch.tensor([[A, B, 0], [A, B, C], [A, 0, 0], [A, 0, 0]]),
    taken=torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0], [1, 0, 0]]).bool(),
)
INDEX = ["a", "a", "a", "b"]


def gigpo(omega: float = 1.0, norm: bool = True, turns: alg.Turns = TURNS, mask: torch.Tensor = MASK) -> torch.Tensor:
    rewards = turns.token_rewards(mask)
    advantages, returns = alg.compute_advantage(
        "gigpo", rewards, mask, index=INDEX, turns=turns, omega=omega, turn_gamma=GAMMA, norm_adv_by_std_in_grpo=norm
    )
    assert torch.equal(advantages, returns)
    return advantages


def normalised(value: float, group: list[float], norm: bool = True) -> float:
    """(x − mean) / (std + ε) over a group by hand (unbiased std; a group of one: mean 0, std 1)."""
    if len(group) == 1:
        return value / (1 + EPS) if norm else value
    centred = value - statistics.fmean(group)
    return centred / (statistics.stdev(group) + EPS) if norm else centred


def expected(omega: float, norm: bool) -> torch.Tensor:
    scores = [1.0, 0.5, 0.0]  # episode returns of group a: the sums of their turn rewards
    episode = [normalised(s, scores, norm) for s in scores] + [normalised(1.0, [1.0], norm)]
    # R_t = Σ_k γ^(k−t) r_k: episode 0 (0 + γ·1, 1), episode 1 (γ²·0.5, γ·0.5, 0.5), episode 2 (0), episode 3 (1)
    r0, r1, r2 = [GAMMA, 1.0], [GAMMA**2 * 0.5, GAMMA * 0.5, 0.5], [0.0]
    anchor_a, anchor_b = [r0[0], r1[0], r2[0]], [r0[1], r1[1]]  # C, and episode 3's A in group b, are alone
    a0 = [
        episode[0] + omega * normalised(r0[0], anchor_a, norm),
        episode[0] + omega * normalised(r0[1], anchor_b, norm),
    ]
    a1 = [
        episode[1] + omega * normalised(r1[0], anchor_a, norm),
        episode[1] + omega * normalised(r1[1], anchor_b, norm),
    ]
    a1.append(episode[1])  # its turn at C is alone: the episode term only
    a2 = [episode[2] + omega * normalised(r2[0], anchor_a, norm)]
    a3 = [episode[3]]  # alone in group b, anchor A included
    return torch.tensor(
        [
            [a0[0], a0[0], 0, a0[1], 0, 0],
            [a1[0], 0, a1[1], a1[1], 0, a1[2]],
            [a2[0], a2[0], a2[0], 0, 0, 0],
            [a3[0], a3[0], 0, 0, 0, 0],
        ]
    )


@pytest.mark.parametrize(("omega", "norm"), [(1.0, True), (0.5, True), (2.0, False)])
def test_gigpo_matches_the_equations_worked_by_hand(omega, norm):
    torch.testing.assert_close(gigpo(omega, norm), expected(omega, norm), atol=1e-6, rtol=0)


def test_the_hand_worked_numbers():
    # the same batch in plain numbers (ω = 1, std division): anchor A of group a holds returns 0.5, 0.125, 0
    a = gigpo()
    assert a[0, 0].item() == pytest.approx(1 + (0.5 - 0.625 / 3) / 0.2602082, abs=1e-4)  # A_E = 1, A_S(A)
    assert a[0, 3].item() == pytest.approx(1 + 0.7071068, abs=1e-4)  # anchor B: returns 1 and 0.25
    assert a[1, 5].item() == pytest.approx(0.0, abs=1e-6)  # episode 1: A_E = 0, and its turn at C is alone
    assert a[3, :2].tolist() == pytest.approx([1.0, 1.0], abs=1e-5)  # alone in its group and in its anchor


def test_omega_zero_is_grpo_on_every_turn():
    grpo, _ = alg.compute_advantage("grpo", TURNS.token_rewards(MASK), MASK, index=INDEX)
    torch.testing.assert_close(gigpo(omega=0.0), grpo)


def test_an_all_equal_group_gets_zero_everywhere():
    turns = alg.Turns(
        torch.tensor([[1, 1], [1, 1], [1, 1]]),
        torch.tensor([[0.5, 1.0], [0.5, 1.0], [0.5, 1.0]]),
        torch.tensor([[A, B], [A, B], [A, C]]),
        torch.ones(3, 2, dtype=torch.bool),
    )
    mask = torch.tensor([[1, 0, 1], [1, 0, 1], [1, 0, 1]])
    advantages, _ = alg.compute_advantage(
        "gigpo", turns.token_rewards(mask), mask, index=[0, 0, 0], turns=turns, turn_gamma=GAMMA
    )
    assert torch.count_nonzero(advantages) == 0


def test_unshared_anchors_leave_only_the_episode_term():
    unshared = alg.Turns(TURNS.tokens, TURNS.rewards, torch.arange(12).reshape(4, 3), TURNS.taken)
    torch.testing.assert_close(gigpo(turns=unshared), gigpo(omega=0.0))


def test_masked_tokens_get_nothing_and_turn_rows_get_their_turns_values():
    advantages = gigpo()
    assert torch.count_nonzero(advantages[MASK == 0]) == 0
    # the same episodes as turn rows (two rows per episode, its third turn cut): each row holds its turn's tokens
    rows = torch.tensor(
        [[1, 1, 0], [1, 0, 0], [1, 0, 0], [1, 1, 0], [1, 1, 1], [0, 0, 0], [1, 1, 0], [0, 0, 0]]
    )  # episodes 0..3, turns 0 and 1
    turns = alg.Turns(TURNS.tokens[:, :2], TURNS.rewards[:, :2], TURNS.anchors[:, :2], TURNS.taken[:, :2])
    packed = episode_mask(rows, 2)
    per_episode = gigpo(turns=turns, mask=packed)
    on_rows = on_turn_rows(per_episode, 2, rows)
    for row, mask in enumerate(rows):
        episode, turn = divmod(row, 2)
        values = on_rows[row][mask == 1]
        if len(values):
            first = int(turns.tokens[episode, :turn].sum())
            assert torch.equal(values, per_episode[episode, first : first + len(values)])
            assert len(set(values.tolist())) == 1  # one turn, one advantage
    assert on_rows[0, 0] != on_rows[1, 0]  # episode 0's two turns got different advantages


def test_gigpo_needs_turns():
    with pytest.raises(ValueError, match=r"^advantage estimator 'gigpo' needs turns=\.\.\.; none was given\.$"):
        alg.compute_advantage("gigpo", TURNS.token_rewards(MASK), MASK, index=INDEX)
