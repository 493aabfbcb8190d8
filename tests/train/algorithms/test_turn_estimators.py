"""``grpo_turns``, ``rloo_turns``, ``reinforce_plus_plus_turns`` and ``gae_turns`` against values worked by hand from
their equations (``agentfly_train/algorithms/turn_estimators.py``) on hand-made groups: episodes of different
lengths, a group of one, an all-equal group, slots not taken, a turn without tokens, whitening."""

from __future__ import annotations

import math
import statistics

import pytest
import torch

from agentfly_train import algorithms as alg

EPS = 1e-6
GAMMA = 0.5

# Group "a": three episodes of different lengths; group "b": one episode (the same batch as test_gigpo.py).
#   episode 0: turns of 2 and 1 tokens (a tool token between them), rewards 0, 1      -> R = 0 + γ·1 = 0.5, 1
#   episode 1: turns of 1, 2 and 1 tokens (tool tokens between), rewards 0, 0, 0.5    -> R = 0.125, 0.25, 0.5
#   episode 2: one turn of 3 tokens, reward 0                                          -> R = 0
#   episode 3 (group b): one turn of 2 tokens, reward 1                                -> R = 1
MASK = torch.tensor([[1, 1, 0, 1, 0, 0], [1, 0, 1, 1, 0, 1], [1, 1, 1, 0, 0, 0], [1, 1, 0, 0, 0, 0]])
TURNS = alg.Turns(
    tokens=torch.tensor([[2, 1, 0], [1, 2, 1], [3, 0, 0], [2, 0, 0]]),
    rewards=torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 0.5], [0.0, 0.0, 0.0], [1.0, 0.0, 0.0]]),
    anchors=torch.tensor([[1, 2, 0], [1, 2, 3], [1, 0, 0], [1, 0, 0]]),
    taken=torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0], [1, 0, 0]]).bool(),
)
INDEX = ["a", "a", "a", "b"]

# R_t − b_t, b_t the mean of R_t over the OTHER episodes of the group that took turn t (0 where none did):
LOO = [
    [0.5 - (0.125 + 0.0) / 2, 1.0 - 0.25],  # episode 0: turn 2 is reached by episode 1 only
    [0.125 - (0.5 + 0.0) / 2, 0.25 - 1.0, 0.5 - 0.0],  # its third turn: no other episode took one
    [0.0 - (0.5 + 0.125) / 2],
    [1.0 - 0.0],  # alone in group b
]
RETURNS = [[0.5, 1.0], [0.125, 0.25, 0.5], [0.0], [1.0]]


def on_tokens(per_turn: list[list[float]]) -> torch.Tensor:
    """Each turn's value on its tokens of MASK, 0 elsewhere, by hand."""
    rows = []
    for row, values in zip(MASK.tolist(), per_turn, strict=True):
        tokens = iter(t for t, n in zip(values, TURNS.tokens.tolist()[len(rows)], strict=False) for _ in range(n))
        rows.append([next(tokens) if valid else 0.0 for valid in row])
    return torch.tensor(rows)


def run(estimator: str, turns: alg.Turns = TURNS, mask: torch.Tensor = MASK, **kwargs) -> tuple:
    kwargs = {"index": INDEX, "turns": turns, "turn_gamma": GAMMA, **kwargs}
    return alg.compute_advantage(estimator, turns.token_rewards(mask), mask, **kwargs)


def whiten(xs: list[float]) -> list[float]:
    mean, var = statistics.fmean(xs), statistics.variance(xs)
    return [(x - mean) / math.sqrt(var + 1e-8) for x in xs]


def test_rloo_turns_by_hand():
    advantages, returns = run("rloo_turns")
    torch.testing.assert_close(advantages, on_tokens(LOO), atol=1e-6, rtol=0)
    torch.testing.assert_close(returns, on_tokens(RETURNS), atol=1e-6, rtol=0)
    assert advantages[0, 0] == pytest.approx(0.4375) and advantages[1, 5] == pytest.approx(0.5)


@pytest.mark.parametrize("norm", [True, False])
def test_grpo_turns_by_hand(norm):
    # c_n = (n − 1)/n: 2/3 in group a, 1 in group b (a group of one); std of the returns from the first turn
    std_a = statistics.stdev([0.5, 0.125, 0.0]) if norm else 1 - EPS
    scale = [2 / 3 / (std_a + EPS)] * 3 + [1 / (1 + EPS) if norm else 1.0]
    expected = [[scale[row] * x for x in values] for row, values in enumerate(LOO)]
    advantages, _ = run("grpo_turns", norm_adv_by_std_in_grpo=norm)
    torch.testing.assert_close(advantages, on_tokens(expected), atol=1e-6, rtol=0)


def test_reinforce_plus_plus_turns_whitens_over_the_tokens_by_hand():
    centred = on_tokens([[c * x for x in values] for c, values in zip([2 / 3] * 3 + [1.0], LOO, strict=True)])
    expected = torch.zeros_like(centred)
    expected[MASK == 1] = torch.tensor(whiten(centred[MASK == 1].tolist()))
    advantages, returns = run("reinforce_plus_plus_turns")
    torch.testing.assert_close(advantages, expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(returns, on_tokens(RETURNS), atol=1e-6, rtol=0)


def test_gae_turns_by_hand():
    values = torch.arange(24.0).reshape(4, 6) / 10  # V at each turn's first token: [0, .3], [.6, .8, 1.1], [1.2], [1.8]
    advantages, returns = run("gae_turns", values=values, lam=0.5)  # γλ = 0.25
    # episode 0: δ = 0 + .5·.3 − 0 = .15, 1 − .3 = .7            -> A = .15 + .25·.7 = .325, .7
    # episode 1: δ = .5·.8 − .6 = −.2, .5·1.1 − .8 = −.25, .5 − 1.1 = −.6 -> A = −.3, −.4, −.6
    # episode 2: δ = 0 − 1.2 (nothing after its turn)             -> A = −1.2; episode 3: 1 − 1.8 = −.8
    turn_advantages = [[0.325, 0.7], [-0.3, -0.4, -0.6], [-1.2], [-0.8]]
    targets = [[0.325, 1.0], [0.3, 0.4, 0.5], [0.0], [1.0]]  # A_k + V_k on every token of turn k
    torch.testing.assert_close(returns, on_tokens(targets), atol=1e-6, rtol=0)
    per_token = on_tokens(turn_advantages)
    expected = torch.zeros_like(per_token)
    expected[MASK == 1] = torch.tensor(whiten(per_token[MASK == 1].tolist()))
    torch.testing.assert_close(advantages, expected, atol=1e-5, rtol=0)


def test_gae_turns_values_a_turn_without_tokens_by_the_next_turns_first():
    turns = alg.Turns(torch.tensor([[1, 0, 1]]), torch.tensor([[0.0, 0.0, 1.0]]), torch.zeros(1, 3).long(),
                      torch.ones(1, 3).bool())  # fmt: skip
    mask, values = torch.tensor([[1, 0, 1]]), torch.tensor([[0.2, 9.0, 0.5]])
    # V = .2, .5 (the next turn's), .5; γ = λ = 1: δ = .3, 0, .5 -> A = .8, .5, .5; targets A + V = 1, 1
    _, returns = alg.compute_advantage("gae_turns", turns.token_rewards(mask), mask, values=values, turns=turns,
                                       turn_gamma=1.0, lam=1.0)  # fmt: skip
    torch.testing.assert_close(returns, torch.tensor([[1.0, 0.0, 1.0]]))


@pytest.mark.parametrize("estimator", ["grpo_turns", "rloo_turns", "reinforce_plus_plus_turns"])
def test_an_all_equal_group_gets_exactly_zero(estimator):
    # 0.3 + 0.95 · 0.7 and its sums are not exact in binary: the zero must not be a rounding residue that 1/ε inflates
    turns = alg.Turns(torch.tensor([[1, 1]] * 4), torch.tensor([[0.3, 0.7]] * 4), torch.tensor([[1, 2]] * 4),
                      torch.ones(4, 2, dtype=torch.bool))  # fmt: skip
    mask = torch.tensor([[1, 0, 1]] * 4)
    advantages, _ = alg.compute_advantage(estimator, turns.token_rewards(mask), mask, index=[0] * 4, turns=turns,
                                          turn_gamma=0.95)  # fmt: skip
    assert torch.count_nonzero(advantages) == 0


@pytest.mark.parametrize("estimator", ["grpo_turns", "rloo_turns", "reinforce_plus_plus_turns", "gae_turns"])
def test_slots_not_taken_and_masked_tokens_get_nothing_and_anchors_do_not_matter(estimator):
    values = torch.rand(4, 6, generator=torch.Generator().manual_seed(0))
    advantages, returns = run(estimator, values=values)
    assert torch.count_nonzero(advantages[MASK == 0]) == 0 and torch.count_nonzero(returns[MASK == 0]) == 0
    unshared = alg.Turns(TURNS.tokens, TURNS.rewards, torch.arange(12).reshape(4, 3), TURNS.taken)
    torch.testing.assert_close(run(estimator, turns=unshared, values=values), (advantages, returns))


def test_a_turns_reward_is_the_sum_of_its_token_rewards_kl_penalty_included():
    # one group, one turn each: 2 tokens and 1 token, reward 1 each, minus 0.1 per token (β·KL in the reward)
    turns = alg.Turns(torch.tensor([[2], [1]]), torch.ones(2, 1), torch.zeros(2, 1).long(), torch.ones(2, 1).bool())
    mask = torch.tensor([[1, 1], [1, 0]])
    rewards = turns.token_rewards(mask) - 0.1 * mask  # turn rewards 0.8 and 0.9
    advantages, _ = alg.compute_advantage("rloo_turns", rewards, mask, index=[0, 0], turns=turns, turn_gamma=GAMMA)
    torch.testing.assert_close(advantages, torch.tensor([[-0.1, -0.1], [0.1, 0.0]]))


@pytest.mark.parametrize(
    ("turn_estimator", "estimator", "norm"),
    [
        ("grpo_turns", "grpo", True),
        ("grpo_turns", "grpo", False),
        ("rloo_turns", "rloo", True),
        ("reinforce_plus_plus_turns", "reinforce_plus_plus_baseline", True),
    ],
)
def test_on_one_turn_episodes_they_are_the_episode_estimators(turn_estimator, estimator, norm):
    generator = torch.Generator().manual_seed(3)
    lengths = torch.randint(1, 6, (10,), generator=generator)
    mask = (torch.arange(6)[None] < lengths[:, None]).long()
    turns = alg.Turns(lengths[:, None], torch.randint(0, 3, (10, 1), generator=generator) / 2,
                      torch.zeros(10, 1).long(), torch.ones(10, 1).bool())  # fmt: skip
    index = [0, 0, 0, 1, 1, 1, 1, 2, 2, 3]  # groups of 3, 4, 2 and 1
    rewards = turns.token_rewards(mask)
    theirs = alg.compute_advantage(estimator, rewards, mask, index=index, norm_adv_by_std_in_grpo=norm)
    mine = alg.compute_advantage(turn_estimator, rewards, mask, index=index, turns=turns, turn_gamma=0.9,
                                 norm_adv_by_std_in_grpo=norm)  # fmt: skip
    torch.testing.assert_close(mine[0], theirs[0], atol=1e-6, rtol=0)


def test_turn_rows_get_their_turns_advantage():
    from agentfly_train.batch import episode_mask, on_turn_rows

    rows = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 0, 0], [1, 1, 0], [1, 1, 1], [0, 0, 0], [1, 1, 0], [0, 0, 0]])
    turns = alg.Turns(TURNS.tokens[:, :2], TURNS.rewards[:, :2], TURNS.anchors[:, :2], TURNS.taken[:, :2])
    packed = episode_mask(rows, 2)
    advantages, _ = run("rloo_turns", turns=turns, mask=packed)
    on_rows = on_turn_rows(advantages, 2, rows)
    # episode 1's third turn (and its reward) is cut: R = (0.5, 1), (0, 0), (0); R − b = (0.5 − 0, 1 − 0),
    # (0 − 0.25, 0 − 1), (0 − 0.25)
    assert on_rows[0, :2].tolist() == pytest.approx([0.5] * 2) and on_rows[1, 0].item() == pytest.approx(1.0)
    assert on_rows[2, 0].item() == pytest.approx(-0.25) and on_rows[3, :2].tolist() == pytest.approx([-1.0] * 2)
    assert on_rows[4].tolist() == pytest.approx([-0.25] * 3) and torch.count_nonzero(on_rows[rows == 0]) == 0


@pytest.mark.parametrize("estimator", ["grpo_turns", "rloo_turns", "reinforce_plus_plus_turns", "gae_turns"])
def test_they_need_turns(estimator):
    with pytest.raises(ValueError, match=rf"^advantage estimator '{estimator}' needs .*turns=\.\.\."):
        alg.compute_advantage(estimator, TURNS.token_rewards(MASK), MASK, index=INDEX, values=torch.zeros(4, 6))
