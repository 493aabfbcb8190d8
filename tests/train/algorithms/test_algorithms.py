"""agentfly_train.algorithms on hand-worked numbers, plus parity with verl 0.9.1 when verl is importable.

The hand-worked cases are small enough to check on paper; the comments give the arithmetic. The verl
section runs only where ``verl`` imports (a scratch environment; it is not a dependency).
"""

from __future__ import annotations

import math
import statistics

import pytest

from agentfly_envs.errors import UnknownNameError

torch = pytest.importorskip("torch")

from agentfly_train import algorithms as alg  # noqa: E402

EPS = 1e-6  # compute_advantage's default epsilon


def close(actual, expected, atol: float = 1e-6) -> None:
    torch.testing.assert_close(actual, torch.as_tensor(expected, dtype=actual.dtype), atol=atol, rtol=0)


def whiten(xs: list[float]) -> list[float]:
    """The whitening formula by hand: (x - mean) / sqrt(unbiased var + 1e-8)."""
    mean, var = statistics.fmean(xs), statistics.variance(xs)
    return [(x - mean) / math.sqrt(var + 1e-8) for x in xs]


def outcome_batch(scores: list[float], lengths: list[int], T: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    """Rewards with each score on the row's last valid token, and a right-padded mask of the given lengths."""
    mask = torch.tensor([[1.0] * n + [0.0] * (T - n) for n in lengths])
    rewards = torch.zeros(len(scores), T)
    for row, (score, n) in enumerate(zip(scores, lengths, strict=True)):
        rewards[row, max(n - 1, 0)] = score
    return rewards, mask


# --- registries --------------------------------------------------------------------------------------------------


def test_registries_hold_the_issue_names():
    assert set(alg.ADVANTAGE_ESTIMATORS) == {
        "gae", "grpo", "grpo_passk", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "rloo", "remax", "opo",
        "gpg", "gigpo", "grpo_turns", "rloo_turns", "reinforce_plus_plus_turns", "gae_turns",
    }  # fmt: skip
    base = {"kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3"}
    assert set(alg.KL_PENALTIES) == base | {f"{k}+" for k in base} | {"full"}
    assert set(alg.LOSS_AGG_MODES) == {
        "token-mean",
        "token-sum",
        "seq-mean-token-sum",
        "seq-mean-token-mean",
        "seq-mean-token-sum-norm",
    }
    assert set(alg.KL_CONTROLLERS) == {"fixed", "adaptive"}


def test_unknown_names_suggest_the_closest():
    rewards, mask = outcome_batch([1.0], [2])
    with pytest.raises(UnknownNameError, match="did you mean 'grpo'"):
        alg.compute_advantage("grp", rewards, mask, index=[0])
    with pytest.raises(UnknownNameError, match="did you mean 'low_var_kl'"):
        alg.kl_penalty(rewards, rewards, "low_var_k")
    with pytest.raises(UnknownNameError, match="did you mean 'token-mean'"):
        alg.agg_loss(rewards, mask, "token_mean")
    with pytest.raises(UnknownNameError, match="did you mean 'adaptive'"):
        alg.make_kl_controller("adaptiv", 0.1)


def test_register_rejects_duplicates_and_unknown_inputs():
    with pytest.raises(ValueError, match="already registered"):
        alg.register_advantage_estimator("grpo")(alg.grpo)
    with pytest.raises(ValueError, match="asks for \\['temperature'\\]"):

        @alg.register_advantage_estimator("never_registered")
        def bad(token_level_rewards, valid, *, temperature):  # pragma: no cover - rejected before any call
            return token_level_rewards, token_level_rewards

    assert "never_registered" not in alg.ADVANTAGE_ESTIMATORS


def test_missing_inputs_and_bad_shapes_raise():
    rewards, mask = outcome_batch([1.0, 0.0], [2, 3])
    with pytest.raises(ValueError, match="needs index="):
        alg.compute_advantage("grpo", rewards, mask)
    with pytest.raises(ValueError, match="needs values="):
        alg.compute_advantage("gae", rewards, mask)
    with pytest.raises(ValueError, match="needs reward_baselines="):
        alg.compute_advantage("remax", rewards, mask)
    with pytest.raises(ValueError, match="3 group labels for a batch of 2"):
        alg.compute_advantage("grpo", rewards, mask, index=["a", "b", "c"])
    with pytest.raises(ValueError, match="values has shape \\(2, 3\\); expected \\(2, 4\\)"):
        alg.compute_advantage("gae", rewards, mask, values=torch.zeros(2, 3))
    with pytest.raises(ValueError, match="response_mask has shape"):
        alg.compute_advantage("rloo", rewards, mask[:, :2], index=[0, 0])


# --- estimators ----------------------------------------------------------------------------------------------------


def test_gae_skips_tool_tokens():
    # One row, token 1 is a tool token (its reward 5 and value 9 are ignored); γ = 0.9, λ = 0.8, γλ = 0.72.
    rewards = torch.tensor([[0.0, 5.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
    values = torch.tensor([[0.5, 9.0, 0.2, 0.4], [1.0, 1.0, 1.0, 1.0]])
    mask = torch.tensor([[1, 0, 1, 1], [0, 0, 0, 0]])  # second row: an empty response
    adv, ret = alg.compute_advantage("gae", rewards, mask, values=values, gamma=0.9, lam=0.8)
    a3 = 1.0 + 0.0 - 0.4  # δ3, no valid token after t=3
    a2 = (0.0 + 0.9 * 0.4 - 0.2) + 0.72 * a3  # δ2 + γλ A3
    a0 = (0.0 + 0.9 * 0.2 - 0.5) + 0.72 * a2  # t=0 is followed by t=2: the tool token is skipped
    close(ret, [[a0 + 0.5, 0.0, a2 + 0.2, a3 + 0.4], [0.0] * 4])
    w0, w2, w3 = whiten([a0, a2, a3])
    close(adv, [[w0, 0.0, w2, w3], [0.0] * 4])


def test_gae_with_gamma_lam_one_is_return_minus_value():
    rewards, mask = outcome_batch([1.0, 0.0], [3, 2])
    values = torch.tensor([[0.1, 0.2, 0.3, 7.0], [0.4, 0.5, 7.0, 7.0]])
    _, ret = alg.compute_advantage("gae", rewards, mask, values=values)
    close(ret, [[1.0, 1.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]])  # R_t = Σ future rewards when γ = λ = 1


def test_grpo_groups_need_not_be_adjacent():
    # Groups: a = rows 0, 2, 5 (scores 1, 0, 0.5), b = rows 1, 4 (equal: 1, 1), c = row 3 alone (0.7).
    rewards, mask = outcome_batch([1.0, 1.0, 0.0, 0.7, 1.0, 0.5], [2, 4, 1, 3, 2, 4])
    index = ["a", "b", "a", "c", "b", "a"]
    adv, ret = alg.compute_advantage("grpo", rewards, mask, index=index)
    std_a = 0.5  # sqrt(((1-.5)² + (0-.5)² + 0²) / 2)
    per_row = [0.5 / (std_a + EPS), 0.0, -0.5 / (std_a + EPS), 0.7 / (1 + EPS), 0.0, 0.0]
    close(adv, torch.tensor(per_row)[:, None] * mask)
    assert torch.equal(adv, ret)
    dr_adv, _ = alg.compute_advantage("grpo", rewards, mask, index=index, norm_adv_by_std_in_grpo=False)
    close(dr_adv, torch.tensor([0.5, 0.0, -0.5, 0.7, 0.0, 0.0])[:, None] * mask)


def test_grpo_index_forms_and_row_order_do_not_matter():
    torch.manual_seed(0)
    rewards, mask = torch.rand(12, 5), (torch.rand(12, 5) > 0.3).int()
    labels = [3, 1, 3, 2, 1, 2, 3, 1, 2, 2, 1, 3]
    adv, _ = alg.compute_advantage("grpo", rewards, mask, index=labels)
    close(alg.compute_advantage("grpo", rewards, mask, index=torch.tensor(labels))[0], adv, atol=0)
    close(alg.compute_advantage("grpo", rewards, mask, index=[f"uid-{x}" for x in labels])[0], adv, atol=0)
    perm = torch.randperm(12)
    shuffled, _ = alg.compute_advantage("grpo", rewards[perm], mask[perm], index=[labels[i] for i in perm])
    close(shuffled, adv[perm])


def test_equal_rewards_give_exactly_zero_even_when_not_representable():
    # 0.7 has no exact float; verl's float32 group mean is off by ~6e-8 and ε = 1e-6 turns that into ~0.06.
    rewards, mask = outcome_batch([0.7] * 8, [3] * 8)
    for estimator in ("grpo", "rloo", "gpg", "opo", "reinforce_plus_plus_baseline", "grpo_passk"):
        adv, _ = alg.compute_advantage(estimator, rewards, mask, index=[0] * 8)
        assert torch.count_nonzero(adv) == 0, estimator


def test_grpo_passk_credits_only_the_best_response():
    rewards, mask = outcome_batch([1.0, 0.0, 0.5, 1.0, 1.0, 0.0], [2, 2, 3, 1, 4, 2])
    index = ["a", "a", "a", "tie", "tie", "tie"]
    adv, _ = alg.compute_advantage("grpo_passk", rewards, mask, index=index)
    gap = (1.0 - 0.5) / (0.5 + EPS)  # (max - second max) / (std + ε), std of [1, 0, 0.5] = 0.5
    close(adv, torch.tensor([gap, 0, 0, 0, 0, 0])[:, None] * mask)  # a tie at the top earns nothing
    raw, _ = alg.compute_advantage("grpo_passk", rewards, mask, index=index, norm_adv_by_std_in_grpo=False)
    close(raw, torch.tensor([0.5, 0, 0, 0, 0, 0])[:, None] * mask)
    with pytest.raises(ValueError, match="at least two responses"):
        alg.compute_advantage("grpo_passk", rewards, mask, index=["a", "a", "a", "b", "b", "c"])


def test_reinforce_plus_plus_discounts_over_valid_tokens_only():
    rewards = torch.tensor([[1.0, 0.0, 7.0, 2.0]])  # the 7 sits on a tool token and is ignored
    mask = torch.tensor([[1, 1, 0, 1]])
    adv, ret = alg.compute_advantage("reinforce_plus_plus", rewards, mask, gamma=0.5)
    g3, g1 = 2.0, 0.0 + 0.5 * 2.0
    g0 = 1.0 + 0.5 * g1
    close(ret, [[g0, g1, 0.0, g3]])
    w0, w1, w3 = whiten([g0, g1, g3])
    close(adv, [[w0, w1, 0.0, w3]])


def test_reinforce_plus_plus_baseline_whitens_tokens():
    # Group a: scores 1, 0 (mean 0.5); b: 0.5 alone (mean 0). Lengths 2, 1, 3 tokens.
    rewards, mask = outcome_batch([1.0, 0.0, 0.5], [2, 1, 3])
    adv, ret = alg.compute_advantage("reinforce_plus_plus_baseline", rewards, mask, index=["a", "a", "b"])
    w = whiten([0.5, 0.5, -0.5, 0.5, 0.5, 0.5])  # one entry per valid token
    close(adv, [[w[0], w[1], 0, 0], [w[2], 0, 0, 0], [w[3], w[4], w[5], 0]])
    assert torch.equal(adv, ret)


def test_rloo_leaves_one_out():
    rewards, mask = outcome_batch([1.0, 0.0, 0.5, 0.7], [1, 2, 3, 4])
    adv, _ = alg.compute_advantage("rloo", rewards, mask, index=["a", "a", "a", "alone"])
    # 1 - mean(0, .5); 0 - mean(1, .5); .5 - mean(1, 0); a group of one keeps its score (no baseline).
    close(adv, torch.tensor([0.75, -0.75, 0.0, 0.7])[:, None] * mask)


def test_remax_subtracts_the_greedy_reward():
    rewards = torch.tensor([[0.2, 3.0, 1.0]])
    mask = torch.tensor([[1, 0, 1]])
    adv, ret = alg.compute_advantage("remax", rewards, mask, reward_baselines=torch.tensor([0.5]), gamma=0.5)
    close(ret, [[1.2, 0.0, 1.0]])  # undiscounted: gamma is not used by remax
    close(adv, [[0.7, 0.0, 0.5]])


def test_opo_baseline_is_length_weighted():
    # Group a: lengths 2 and 4, scores 1 and 0 -> b = (2·1 + 4·0) / 6. Group e: two empty responses.
    rewards, mask = outcome_batch([1.0, 0.0, 0.7, 1.0, 0.0], [2, 4, 3, 0, 0])
    adv, _ = alg.compute_advantage("opo", rewards, mask, index=["a", "a", "alone", "e", "e"])
    close(adv, torch.tensor([1 - 1 / 3, -1 / 3, 0.7, 0.0, 0.0])[:, None] * mask)
    assert torch.isfinite(adv).all()


def test_gpg_scales_by_the_share_of_nonzero_scores():
    rewards, mask = outcome_batch([1.0, 0.0, 0.5, 0.0], [2, 2, 3, 1])
    adv, _ = alg.compute_advantage("gpg", rewards, mask, index=["a", "a", "a", "b"])
    alpha = 4 / 2  # B / #nonzero scores
    close(adv, (alpha * torch.tensor([0.5, -0.5, 0.0, 0.0]))[:, None] * mask)


@pytest.mark.parametrize("estimator", sorted(alg.ADVANTAGE_ESTIMATORS))
def test_masked_tokens_get_nothing_and_empty_rows_are_harmless(estimator):
    torch.manual_seed(1)
    rewards = torch.randn(6, 5)
    mask = (torch.rand(6, 5) > 0.3).int()
    mask[2] = 0  # an empty response
    inputs = {"index": [0, 0, 1, 1, 0, 1], "values": torch.randn(6, 5), "reward_baselines": torch.randn(6)}
    first = mask.sum(1) // 2  # two turns per row (gigpo): the first half of its valid tokens, then the rest
    tokens = torch.stack([first, mask.sum(1) - first], 1)
    turns = alg.Turns(tokens, torch.randn(6, 2), torch.tensor([[1, 2]] * 6), torch.ones(6, 2, dtype=torch.bool))
    adv, ret = alg.compute_advantage(estimator, rewards, mask, gamma=0.9, lam=0.95, turns=turns, **inputs)
    assert adv.shape == ret.shape == rewards.shape and adv.dtype == ret.dtype == rewards.dtype
    assert torch.isfinite(adv).all() and torch.isfinite(ret).all()
    assert torch.count_nonzero(adv[mask == 0]) == 0 and torch.count_nonzero(ret[mask == 0]) == 0


def test_whitening_fewer_than_two_tokens_is_zero():
    rewards = torch.tensor([[0.0, 2.0], [0.0, 0.0]])
    adv, ret = alg.compute_advantage("reinforce_plus_plus", rewards, torch.tensor([[0, 1], [0, 0]]))
    close(adv, [[0.0, 0.0], [0.0, 0.0]])
    close(ret, [[0.0, 2.0], [0.0, 0.0]])


# --- KL --------------------------------------------------------------------------------------------------------------


def test_kl_estimators_by_hand():
    logprob, ref = torch.tensor([math.log(0.5), math.log(0.25)]), torch.tensor([math.log(0.25), math.log(0.5)])
    ln2 = math.log(2)
    close(alg.kl_penalty(logprob, ref, "k1"), [ln2, -ln2])
    close(alg.kl_penalty(logprob, ref, "kl"), [ln2, -ln2])
    close(alg.kl_penalty(logprob, ref, "abs"), [ln2, ln2])
    close(alg.kl_penalty(logprob, ref, "k2"), [0.5 * ln2**2] * 2)
    # k3 = r - log r - 1 with r = π_ref / π: r = 0.5 and r = 2.
    close(alg.kl_penalty(logprob, ref, "low_var_kl"), [0.5 + ln2 - 1, 2 - ln2 - 1])
    close(alg.kl_penalty(torch.tensor([0.0]), torch.tensor([-50.0]), "k3"), [math.exp(-20) + 20 - 1 - 9])  # clamps


@pytest.mark.parametrize("kind", ["k1", "abs", "k3", "low_var_kl"])
def test_plus_variants_keep_the_value_and_take_k2_gradients(kind):
    logprob = torch.tensor([-0.5, -2.0, -1.0], requires_grad=True)
    ref = torch.tensor([-1.0, -1.5, -1.0])
    value = alg.kl_penalty(logprob, ref, kind + "+")
    close(value.detach(), alg.kl_penalty(logprob, ref, kind).detach())
    value.sum().backward()
    close(logprob.grad, (logprob - ref).detach())  # d/dlogπ of ½ (logπ - logπ_ref)²


def test_full_kl_by_hand_and_against_kl_div():
    # p = (½, ½), q = (¾, ¼): KL = ½ ln(½/¾) + ½ ln(½/¼) = ½ ln(4/3).
    logits, ref_logits = torch.tensor([[[0.0, 0.0]]]), torch.tensor([[[math.log(3.0), 0.0]]])
    close(alg.kl_penalty(logits, ref_logits, "full"), [[0.5 * math.log(4 / 3)]])
    torch.manual_seed(2)
    logits, ref_logits = torch.randn(3, 5, 11), torch.randn(3, 5, 11)
    expected = torch.nn.functional.kl_div(
        ref_logits.log_softmax(-1), logits.log_softmax(-1), log_target=True, reduction="none"
    ).sum(-1)
    for chunk_size in (1, 4, 15, 100):
        close(alg.full_kl(logits, ref_logits, chunk_size=chunk_size), expected, atol=1e-5)
    assert alg.full_kl(logits.bfloat16(), ref_logits.bfloat16()).dtype == torch.float32


def test_full_kl_gradients_match_autograd_and_pass_gradcheck():
    torch.manual_seed(3)
    logits = torch.randn(2, 3, 7, dtype=torch.float64, requires_grad=True)
    ref_logits = torch.randn(2, 3, 7, dtype=torch.float64, requires_grad=True)
    full_kl = lambda a, b: alg.full_kl(a, b, chunk_size=4)  # noqa: E731
    assert torch.autograd.gradcheck(full_kl, (logits, ref_logits), fast_mode=True)
    weights = torch.randn(2, 3, dtype=torch.float64)
    (alg.full_kl(logits, ref_logits, chunk_size=2) * weights).sum().backward()
    ours = logits.grad.clone(), ref_logits.grad.clone()
    logits.grad = ref_logits.grad = None
    log_p, log_q = logits.log_softmax(-1), ref_logits.log_softmax(-1)
    ((log_p.exp() * (log_p - log_q)).sum(-1) * weights).sum().backward()
    close(ours[0], logits.grad, atol=1e-10)
    close(ours[1], ref_logits.grad, atol=1e-10)


def test_full_kl_frozen_reference_and_bf16_policy():
    torch.manual_seed(4)
    logits = torch.randn(2, 3, 9).bfloat16().requires_grad_()
    ref_logits = torch.randn(2, 3, 9).bfloat16()  # a frozen reference model: no gradient wanted
    alg.full_kl(logits, ref_logits, chunk_size=4).sum().backward()
    assert logits.grad.dtype == torch.bfloat16 and ref_logits.grad is None
    log_p, log_q = logits.float().log_softmax(-1), ref_logits.float().log_softmax(-1)
    kl = (log_p.exp() * (log_p - log_q)).sum(-1, keepdim=True)
    close(logits.grad.float(), log_p.exp() * (log_p - log_q - kl), atol=1e-2)  # bf16 holds ~3 digits


def test_full_kl_rejects_mismatched_inputs():
    with pytest.raises(ValueError, match="differ in shape"):
        alg.full_kl(torch.zeros(2, 3, 5), torch.zeros(2, 3, 6))
    with pytest.raises(ValueError, match="chunk_size"):
        alg.full_kl(torch.zeros(2, 3, 5), torch.zeros(2, 3, 5), chunk_size=0)


# --- controllers and the KL in the reward ----------------------------------------------------------------------------


def test_controllers_update_and_checkpoint():
    fixed = alg.FixedKLController(0.1)
    fixed.update(5.0, 100)
    assert fixed.value == 0.1
    adaptive = alg.AdaptiveKLController(init_kl_coef=0.1, target_kl=0.1, horizon=100)
    adaptive.update(current_kl=0.15, n_steps=10)  # error 0.5 clipped to 0.2: β · (1 + 0.2 · 10/100)
    assert adaptive.value == pytest.approx(0.1 * 1.02)
    adaptive.update(current_kl=0.09, n_steps=10)  # error -0.1: β · (1 - 0.1 · 10/100)
    assert adaptive.value == pytest.approx(0.1 * 1.02 * 0.99)
    resumed = alg.make_kl_controller("adaptive", kl_coef=0.5, target_kl=0.1, horizon=100)
    resumed.load_state_dict(adaptive.state_dict())
    assert resumed.value == adaptive.value and resumed.state_dict() == {"value": adaptive.value}
    with pytest.raises(ValueError, match="must be > 0"):
        alg.AdaptiveKLController(0.1, target_kl=0.1, horizon=0)


def test_apply_kl_penalty_uses_the_coefficient_before_the_update():
    scores = torch.tensor([[0.0, 1.0, 3.0], [2.0, 0.0, 0.0]])
    logprob = torch.tensor([[-1.0, -1.0, 9.0], [-1.0, -1.0, -1.0]])
    ref = torch.tensor([[-1.2, -1.4, 0.0], [-1.0, -1.0, -1.0]])
    mask = torch.tensor([[1, 1, 0], [0, 0, 0]])  # row 1 is empty
    ctrl = alg.AdaptiveKLController(init_kl_coef=0.1, target_kl=0.1, horizon=10)
    rewards, metrics = alg.apply_kl_penalty(scores, logprob, ref, mask, ctrl, "kl")
    close(rewards, [[0.0 - 0.1 * 0.2, 1.0 - 0.1 * 0.4, 3.0], [2.0, 0.0, 0.0]])  # masked tokens keep their score
    assert metrics["kl"] == pytest.approx((0.3 + 0.0) / 2)  # mean over sequences of each one's mean KL
    assert metrics["kl_coef"] == 0.1
    assert ctrl.value == pytest.approx(0.1 * (1 + 0.2 * 2 / 10))  # KL 0.15 vs target 0.1, n_steps = B = 2
    with pytest.raises(ValueError, match="'full' KL has shape"):
        alg.apply_kl_penalty(scores, logprob, ref, mask, ctrl, "full")  # full needs (B, T, V) logits


def test_full_kl_in_the_reward_from_logits_equals_subtracting_the_precomputed_kl():
    generator = torch.Generator().manual_seed(0)
    logits, ref_logits = torch.randn(2, 2, 3, 5, generator=generator)  # (B, T, V) each
    scores = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 2.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    by_kind, by_value = (alg.FixedKLController(0.5) for _ in range(2))
    from_logits = alg.apply_kl_penalty(scores, logits, ref_logits, mask, by_kind, "full")
    p, log_p, log_q = logits.softmax(-1), logits.log_softmax(-1), ref_logits.log_softmax(-1)
    kl = (p * (log_p - log_q)).sum(-1)  # (B, T), by the definition
    from_values = alg.subtract_kl(scores, kl, mask, by_value)
    close(from_logits[0], from_values[0])
    close(from_values[0], scores - 0.5 * kl * mask)
    assert from_logits[1]["kl"] == pytest.approx(from_values[1]["kl"])
    assert from_values[1]["kl"] == pytest.approx(((kl[0, :2].mean() + kl[1].mean()) / 2).item())
    with pytest.raises(ValueError, match="kl has shape"):
        alg.subtract_kl(scores, kl[:, :2], mask, by_value)


# --- losses -----------------------------------------------------------------------------------------------------------

LOSS = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
LOSS_MASK = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0]])  # the last row is empty


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("token-mean", (1 + 2 + 4) / 3),
        ("token-sum", 1 + 2 + 4),
        ("seq-mean-token-sum", ((1 + 2) + 4) / 2),  # the empty row does not count as a sequence
        ("seq-mean-token-mean", ((1 + 2) / 2 + 4) / 2),
        ("seq-mean-token-sum-norm", ((1 + 2) + 4) / 2 / 3),  # T = 3
    ],
)
def test_agg_loss_modes(mode, expected):
    close(alg.agg_loss(LOSS, LOSS_MASK, mode), expected)
    close(alg.agg_loss(LOSS, LOSS_MASK, mode, denominator=7.0), {"seq-mean-token-mean": 5.5}.get(mode, 7.0) / 7)
    close(alg.agg_loss(LOSS, torch.zeros_like(LOSS_MASK), mode), 0.0)  # nothing valid: 0, not NaN


@pytest.mark.parametrize("mode", sorted(alg.LOSS_AGG_MODES))
def test_agg_loss_counts_exactly_for_bfloat16_losses(mode):
    loss = torch.full((1, 5000), 3.0, dtype=torch.bfloat16)
    loss[0, 0] = 50.0
    mask = (torch.arange(5000) < 4097)[None]  # 4097 tokens: not a bfloat16 number
    expected = {"token-mean": (50 + 3 * 4096) / 4097, "seq-mean-token-sum": 50 + 3 * 4096, "token-sum": 50 + 3 * 4096}
    expected["seq-mean-token-mean"], expected["seq-mean-token-sum-norm"] = (
        expected["token-mean"],
        (50 + 3 * 4096) / 5000,
    )
    result = alg.agg_loss(loss, mask, mode)
    assert result.dtype == torch.float32  # summed and counted in float32, not in the loss's bfloat16
    close(result, expected[mode], atol=1e-3)


def test_policy_loss_clips_and_dual_clips():
    # (A, ratio): plain clip above 1.2; clip below 0.8; dual clip caps -A·ρ at -A·3; inside the range.
    advantages = torch.tensor([[1.0, -1.0, -1.0, 1.0]])
    ratio = torch.tensor([[1.5, 0.5, 5.0, 1.0]])
    old = torch.full((1, 4), -1.0)
    new = (old + ratio.log()).requires_grad_()
    loss, metrics = alg.policy_loss(old, new, advantages, torch.ones(1, 4), 0.2, 0.2, 3.0, "token-mean")
    close(loss.detach(), (-1.2 + 0.8 + 3.0 - 1.0) / 4)
    close(metrics["pg_clipfrac"], 0.5)  # tokens 0 and 1
    close(metrics["pg_clipfrac_lower"], 0.25)  # token 2
    close(metrics["ppo_kl"], -(math.log(1.5) + math.log(0.5) + math.log(5.0)) / 4)
    loss.backward()
    close(new.grad, [[0.0, 0.0, 0.0, -1.0 / 4]])  # only the unclipped token moves: d(-A·ρ)/dlogπ = -A·ρ / 4
    with pytest.raises(ValueError, match="must be > 1"):
        alg.policy_loss(old, new, advantages, torch.ones(1, 4), clip_ratio_c=1.0)


def test_policy_loss_asymmetric_clip_and_masking():
    advantages = torch.tensor([[1.0, 1.0, 5.0]])
    old = torch.zeros(1, 3)
    new = torch.tensor([[math.log(1.25), math.log(1.35), 0.0]])
    loss, metrics = alg.policy_loss(old, new, advantages, torch.tensor([[1, 1, 0]]), 0.2, 0.28, 3.0)
    close(loss, (-1.25 + -1.28) / 2)  # 1.25 is inside [0.8, 1.28]; 1.35 is clipped to 1.28
    close(metrics["pg_clipfrac"], 0.5)


def test_policy_loss_weights_scale_each_tokens_loss_and_gradient():
    advantages, old = torch.tensor([[1.0, -2.0, 0.5]]), torch.zeros(1, 3)
    weights = torch.tensor([[2.0, 0.5, 0.0]])
    new = torch.zeros(1, 3, requires_grad=True)
    loss, _ = alg.policy_loss(old, new, advantages, torch.ones(1, 3), weights=weights)
    close(loss.detach(), (-1.0 * 2.0 + 2.0 * 0.5 + 0.0) / 3)  # ratio 1: loss -A·w per token, token-mean
    loss.backward()
    close(new.grad, [[-2.0 / 3, 1.0 / 3, 0.0]])
    unweighted, _ = alg.policy_loss(old, new, advantages, torch.ones(1, 3), weights=torch.ones(1, 3))
    close(unweighted, alg.policy_loss(old, new, advantages, torch.ones(1, 3))[0])


def test_rollout_is_weights_token_level_truncate_and_mask():
    log_ratio = torch.tensor([[math.log(0.5), math.log(3.0), math.log(1.5), 9.0]])
    mask = torch.tensor([[1, 1, 1, 0]])
    weights, metrics = alg.rollout_is_weights(log_ratio, mask, "token", 2.0)
    close(weights, [[0.5, 2.0, 1.5, 0.0]])  # 3.0 truncated at 2; the masked token gets 0
    close(metrics["rollout_is_mean"], (0.5 + 2.0 + 1.5) / 3)  # the weights applied
    close(metrics["rollout_is_raw_min"], 0.5)
    close(metrics["rollout_is_raw_max"], 3.0)  # before truncation
    close(metrics["rollout_is_clipped_frac"], 1 / 3)
    weights, metrics = alg.rollout_is_weights(log_ratio, mask, "token", "0.8_2.0")
    close(weights, [[0.0, 0.0, 1.5, 0.0]])  # IcePop: outside [0.8, 2] is dropped, not truncated
    close(metrics["rollout_is_clipped_frac"], 2 / 3)


def test_rollout_is_weights_sequence_level_and_bad_arguments():
    log_ratio = torch.tensor([[math.log(2.0), math.log(2.0), 5.0], [math.log(0.5), 0.0, 0.0], [1.0, 1.0, 1.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [0, 0, 0]])
    weights, metrics = alg.rollout_is_weights(log_ratio, mask, "sequence", "5")
    close(weights, [[4.0, 4.0, 0.0], [0.5, 0.5, 0.5], [0.0, 0.0, 0.0]])  # the product over each row's valid tokens
    close(metrics["rollout_is_mean"], (2 * 4.0 + 3 * 0.5) / 5)  # over valid tokens
    close(metrics["rollout_is_raw_max"], 4.0)
    close(metrics["rollout_is_raw_min"], 0.5)  # the row without valid tokens is not a sequence
    close(alg.rollout_is_weights(log_ratio, mask, "sequence", 3.0)[0][0], [3.0, 3.0, 0.0])
    with pytest.raises(ValueError, match="rollout_is='tok'"):
        alg.rollout_is_weights(log_ratio, mask, "tok")
    for bad in ("0", "-1", "2_1", "a_b", "x"):
        with pytest.raises(ValueError, match=r"lower_upper|upper bound"):
            alg.parse_is_threshold(bad)
    assert alg.parse_is_threshold(2) == (None, 2.0)
    assert alg.parse_is_threshold("0.5_5.0") == (0.5, 5.0)


def test_value_loss_clips_around_old_values():
    vpreds, values = torch.tensor([[1.0, 0.2, 9.0]]), torch.tensor([[0.0, 0.0, 0.0]])
    returns = torch.tensor([[2.0, 0.0, 0.0]])
    loss, clipfrac = alg.value_loss(vpreds, returns, values, torch.tensor([[1, 1, 0]]), cliprange_value=0.5)
    # token 0: max((1 - 2)², (0.5 - 2)²) = 2.25 (clipped term); token 1: 0.04 either way; token 2 masked.
    close(loss, 0.5 * (2.25 + 0.04) / 2)
    close(clipfrac, 0.5)


# --- each chosen entry checks its own configuration section --------------------------------------------------------


def test_kl_controllers_check_their_section():
    from agentfly_train.config.errors import ConfigError
    from agentfly_train.config.schema import KLControlConfig

    for name in alg.KL_CONTROLLERS:
        controller = alg.KL_CONTROLLERS.get(name)
        controller.check(KLControlConfig(type=name))  # the defaults pass
        with pytest.raises(ConfigError, match=r"^algorithm\.kl_ctrl\.kl_coef must be > 0, got 0$"):
            controller.check(KLControlConfig(type=name, kl_coef=0))
    alg.FixedKLController.check(KLControlConfig(target_kl=0, horizon=0))  # a fixed β uses neither
    with pytest.raises(ConfigError, match=r"^algorithm\.kl_ctrl\.target_kl must be > 0, got -0\.1$"):
        alg.AdaptiveKLController.check(KLControlConfig(type="adaptive", target_kl=-0.1))
    with pytest.raises(ConfigError, match=r"^algorithm\.kl_ctrl\.horizon must be > 0, got 0$"):
        alg.AdaptiveKLController.check(KLControlConfig(type="adaptive", horizon=0))
    fixed = alg.make_kl_controller("fixed", 0.2, target_kl=0, horizon=0)  # registered classes build controllers
    assert isinstance(fixed, alg.FixedKLController) and fixed.value == 0.2


def configured(estimator: str, **changes: object):
    """A default ``TrainConfig`` with ``algorithm.adv_estimator=estimator`` and ``changes`` (dotted keys with ``__``
    for ``.``) set on it, two responses per prompt unless changed."""
    from agentfly_train.config.schema import TrainConfig

    config = TrainConfig()
    config.algorithm.adv_estimator = estimator
    config.agent.num_chains = 2
    for key, value in changes.items():
        *path, name = key.split("__")
        section = config
        for part in path:
            section = getattr(section, part)
        setattr(section, name, value)
    return config


@pytest.mark.parametrize(
    ("estimator", "changes", "message"),
    [
        (
            "grpo",
            {"agent__num_chains": 1},
            "algorithm.adv_estimator=grpo compares the responses to one prompt: set agent.num_chains >= 2, or use an "
            "estimator that needs no group (gae, gae_turns, reinforce_plus_plus, reinforce_plus_plus_baseline, "
            "reinforce_plus_plus_turns, remax)",
        ),
        (
            "gae",
            {"agent__env_kwargs": {"obs": "screenshot"}},
            "algorithm.adv_estimator=gae trains a critic, which does not see the screenshots "
            "(agent.env_kwargs.obs=screenshot); use an estimator without one (grpo, rloo, reinforce_plus_plus)",
        ),
        (
            "rloo",
            {"agent__past_reasoning": "drop", "algorithm__use_kl_in_reward": True},
            "agent.past_reasoning=drop trains each turn as its own sample, which needs an estimator that compares "
            "whole responses (gigpo, gpg, grpo, grpo_passk, grpo_turns, opo, rloo, rloo_turns) and "
            "algorithm.use_kl_in_reward=false; got adv_estimator=rloo, use_kl_in_reward=True",
        ),
        (
            "remax",
            {"async_training__enable": True},
            "algorithm.adv_estimator=remax needs a greedy episode of the policy that sampled each group, which "
            "async_training.enable=true does not keep; use grpo, rloo or reinforce_plus_plus",
        ),
        (
            "grpo",
            {"trainer__critic_warmup": 1},
            "trainer.critic_warmup warms up PPO's critic; only algorithm.adv_estimator=gae, gae_turns has one",
        ),
        (
            "grpo",
            {"algorithm__gigpo__omega": 0.5},
            "algorithm.gigpo.* is used by algorithm.adv_estimator=gigpo only; got adv_estimator=grpo: leave it at its "
            "default or pick one of those",
        ),
        (
            "rloo_turns",
            {"algorithm__gigpo__omega": 0.5},
            "algorithm.gigpo.* is used by algorithm.adv_estimator=gigpo only; got adv_estimator=rloo_turns: leave it "
            "at its default or pick one of those",
        ),
        (
            "grpo",
            {"algorithm__turn_gamma": 0.9},
            "algorithm.turn_gamma is used by algorithm.adv_estimator=gae_turns, gigpo, grpo_turns, "
            "reinforce_plus_plus_turns, rloo_turns only; got adv_estimator=grpo: leave it at its default or pick one "
            "of those",
        ),
        (
            "gae_turns",
            {"agent__env_kwargs": {"obs": "screenshot"}},
            "algorithm.adv_estimator=gae_turns trains a critic, which does not see the screenshots "
            "(agent.env_kwargs.obs=screenshot); use an estimator without one (grpo, rloo, reinforce_plus_plus)",
        ),
        (
            "gigpo",
            {"agent__num_chains": 1},
            "algorithm.adv_estimator=gigpo compares the responses to one prompt: set agent.num_chains >= 2, or use an "
            "estimator that needs no group (gae, gae_turns, reinforce_plus_plus, reinforce_plus_plus_baseline, "
            "reinforce_plus_plus_turns, remax)",
        ),
        (
            "gae",
            {"data__train_batch_size": 4, "critic__ppo_mini_batch_size": 3},
            "data.train_batch_size=4 must be a multiple of critic.ppo_mini_batch_size=3",
        ),
        (
            "gae",
            {"critic__optim__lr_scheduler_type": "cosine"},
            "the critic's learning rate is constant: leave critic.optim.lr_scheduler_type and "
            "critic.optim.lr_warmup_steps_ratio at their defaults",
        ),
    ],
)
def test_an_estimator_checks_what_it_needs(estimator, changes, message):
    from agentfly_train.config.errors import ConfigError

    with pytest.raises(ConfigError) as error:
        alg.get_advantage_estimator(estimator).check(configured(estimator, **changes))
    assert str(error.value) == message


@pytest.mark.parametrize("estimator", list(alg.ADVANTAGE_ESTIMATORS))
def test_every_estimator_passes_a_valid_section(estimator):
    entry = alg.get_advantage_estimator(estimator)
    entry.check(configured(estimator))
    if entry.trains_critic:  # what the others refuse, a critic's estimator takes
        entry.check(configured(estimator, trainer__critic_warmup=2, critic__ppo_mini_batch_size=1))
    elif not entry.needs_greedy_baseline:
        entry.check(configured(estimator, async_training__enable=True, agent__num_chains=4))


# --- parity with verl 0.9.1 (runs only where verl imports) ------------------------------------------------------------


@pytest.fixture(scope="module")
def verl():
    """verl's core_algos and an OmegaConf config maker; skipped where verl is not installed."""
    core_algos = pytest.importorskip("verl.trainer.ppo.core_algos")
    omegaconf = pytest.importorskip("omegaconf")
    return core_algos, omegaconf.OmegaConf.create


def edge_case_batch(B: int = 48, T: int = 24, seed: int = 0) -> dict:
    """Random lengths, tool-token gaps, empty rows, groups of one, equal-reward groups, shuffled group rows."""
    import numpy as np

    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, T + 1, (B,), generator=g)
    mask = (torch.arange(T)[None] < lengths[:, None]).float() * (torch.rand(B, T, generator=g) > 0.25).float()
    mask[:3] = 0  # three empty responses
    mask[3, :] = 0
    mask[3, T // 2] = 1  # a response with one valid token
    last = (mask * torch.arange(T)).argmax(-1)
    rewards = 0.05 * torch.randn(B, T, generator=g) * mask
    rewards[torch.arange(B), last] += torch.randint(0, 3, (B,), generator=g).float() * 0.5
    labels = [f"p{i}" for i in torch.randint(0, 10, (B,), generator=g).tolist()]
    labels[0], labels[5] = "alone-0", "alone-5"  # groups of one
    for row in (6, 7, 8):  # a group of equal outcome rewards
        labels[row] = "equal"
        rewards[row] = 0.0
        rewards[row, last[row]] = 1.0
    return {
        "rewards": rewards,
        "mask": mask,
        "index": np.array(labels, dtype=object),
        "values": torch.randn(B, T, generator=g),
        "baselines": torch.rand(B, generator=g),
        "logprob": -3 * torch.rand(B, T, generator=g),
        "ref": -3 * torch.rand(B, T, generator=g),
    }


def same_on_valid(ours: torch.Tensor, theirs: torch.Tensor, mask: torch.Tensor, atol: float = 1e-6) -> None:
    valid = mask.bool()
    torch.testing.assert_close(ours[valid], theirs[valid], atol=atol, rtol=0)


@pytest.mark.parametrize(  # not in verl: test_gigpo.py, test_turn_estimators.py
    "estimator", sorted(e for e in alg.ADVANTAGE_ESTIMATORS if e != "gigpo" and not e.endswith("_turns"))
)
@pytest.mark.parametrize(("gamma", "lam", "norm"), [(1.0, 1.0, True), (0.9, 0.95, False)])
def test_estimators_match_verl(verl, estimator, gamma, lam, norm):
    core_algos, config = verl
    batch = edge_case_batch()
    rewards, mask, index = batch["rewards"], batch["mask"], batch["index"]
    if estimator == "grpo_passk":  # needs two responses per group: fold the groups of one into another
        index = index.copy()
        index[[0, 5]] = "equal"
    cfg = config({"gamma": gamma, "lam": lam, "norm_adv_by_std_in_grpo": norm})
    theirs = {
        "gae": lambda: core_algos.compute_gae_advantage_return(rewards, batch["values"], mask, gamma, lam),
        "grpo": lambda: core_algos.compute_grpo_outcome_advantage(rewards, mask, index, norm_adv_by_std_in_grpo=norm),
        "remax": lambda: core_algos.compute_remax_outcome_advantage(rewards, batch["baselines"], mask, config=cfg),
    }.get(estimator, lambda: core_algos.get_adv_estimator_fn(estimator)(rewards, mask, index=index, config=cfg))()
    ours = alg.compute_advantage(
        estimator, rewards, mask, index=index, values=batch["values"], reward_baselines=batch["baselines"],
        gamma=gamma, lam=lam, norm_adv_by_std_in_grpo=norm,
    )  # fmt: skip
    same_on_valid(ours[0], theirs[0], mask)
    same_on_valid(ours[1], theirs[1], mask)


def test_verl_turns_float_noise_into_advantage_where_we_give_zero(verl):
    core_algos, _ = verl
    rewards, mask = outcome_batch([0.7] * 8, [3] * 8)
    theirs, _ = core_algos.compute_grpo_outcome_advantage(rewards, mask, list(range(1)) * 8)
    assert theirs.abs().max() > 0.01  # the documented deviation: verl's float32 mean misses 0.7 by ~6e-8
    assert torch.count_nonzero(alg.compute_advantage("grpo", rewards, mask, index=[0] * 8)[0]) == 0


@pytest.mark.parametrize("kind", [k for k in sorted(alg.KL_PENALTIES) if k != "full"])
def test_kl_penalties_match_verl_in_value_and_gradient(verl, kind):
    core_algos, _ = verl
    batch = edge_case_batch()
    ours_in, theirs_in = (batch["logprob"].clone().requires_grad_() for _ in range(2))
    ours, theirs = alg.kl_penalty(ours_in, batch["ref"], kind), core_algos.kl_penalty(theirs_in, batch["ref"], kind)
    (ours * batch["mask"]).sum().backward()
    (theirs * batch["mask"]).sum().backward()
    torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=0)
    torch.testing.assert_close(ours_in.grad, theirs_in.grad, atol=1e-6, rtol=0)


@pytest.mark.parametrize("mode", sorted(alg.LOSS_AGG_MODES))
def test_losses_match_verl(verl, mode):
    core_algos, config = verl
    batch = edge_case_batch()
    mask, old = batch["mask"], batch["logprob"]
    advantages = torch.randn(mask.shape, generator=torch.Generator().manual_seed(5))
    new_ours, new_theirs = ((old + 0.3 * batch["values"]).requires_grad_() for _ in range(2))
    actor = config({"clip_ratio": 0.2, "clip_ratio_low": 0.2, "clip_ratio_high": 0.28, "clip_ratio_c": 3.0})
    actor.global_batch_info = {}
    loss, metrics = alg.policy_loss(old, new_ours, advantages, mask, 0.2, 0.28, 3.0, mode)
    verl_loss, verl_metrics = core_algos.compute_policy_loss_vanilla(old, new_theirs, advantages, mask, mode, actor)
    loss.backward()
    verl_loss.backward()
    torch.testing.assert_close(loss, verl_loss, atol=1e-6, rtol=0)
    torch.testing.assert_close(new_ours.grad, new_theirs.grad, atol=1e-6, rtol=0)
    for name, value in metrics.items():
        assert value.item() == pytest.approx(verl_metrics[f"actor/{name}"], abs=1e-6)
    vpreds, returns = batch["values"], batch["ref"]
    values = vpreds + torch.randn(mask.shape, generator=torch.Generator().manual_seed(6))
    ours_v, ours_clip = alg.value_loss(vpreds, returns, values, mask, 0.5, mode)
    verl_v, verl_clip = core_algos.compute_value_loss(vpreds, returns, values, mask, 0.5, mode)
    torch.testing.assert_close(ours_v, verl_v, atol=1e-6, rtol=0)
    torch.testing.assert_close(ours_clip, verl_clip, atol=1e-6, rtol=0)


@pytest.mark.parametrize(("level", "threshold"), [("token", "2.0"), ("sequence", "3.0"), ("token", "0.5_1.5")])
def test_rollout_is_weights_match_verl(verl, level, threshold):
    helper = pytest.importorskip("verl.trainer.ppo.rollout_corr_helper")
    batch = edge_case_batch()
    mask = batch["mask"]
    log_ratio = 0.3 * (batch["logprob"] - batch["ref"]) * (0.1 if level == "sequence" else 1.0)
    ours, metrics = alg.rollout_is_weights(log_ratio, mask, level, threshold)
    theirs, verl_metrics = helper.compute_rollout_correction_weights(log_ratio, mask, level, threshold)
    same_on_valid(ours, theirs, mask, atol=1e-5)
    assert metrics["rollout_is_mean"].item() == pytest.approx(verl_metrics["rollout_is_mean"], rel=1e-5)


@pytest.mark.parametrize("kind", ["kl", "low_var_kl"])
def test_kl_in_reward_and_adaptive_controller_match_verl(verl, kind):
    core_algos, config = verl
    batch = edge_case_batch()
    mask, scores = batch["mask"], batch["rewards"]
    ours = alg.make_kl_controller("adaptive", kl_coef=0.05, target_kl=0.02, horizon=500)
    theirs = core_algos.get_kl_controller(
        config({"type": "adaptive", "kl_coef": 0.05, "target_kl": 0.02, "horizon": 500})
    )
    for step in range(4):
        ref = batch["ref"] + 0.1 * step
        rewards, metrics = alg.apply_kl_penalty(scores, batch["logprob"], ref, mask, ours, kind)
        kld = core_algos.kl_penalty(batch["logprob"], ref, kind) * mask
        verl_rewards = scores - theirs.value * kld
        verl_kl = (kld.sum(-1) / (mask.sum(-1) + 1e-8)).mean().item()  # verl's masked_mean over each row
        assert metrics["kl_coef"] == theirs.value
        theirs.update(verl_kl, n_steps=mask.shape[0])
        same_on_valid(rewards, verl_rewards, mask)
        assert metrics["kl"] == pytest.approx(verl_kl, abs=1e-6)
        assert ours.value == pytest.approx(theirs.value, rel=1e-9)
