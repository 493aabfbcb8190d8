"""Advantage estimators, KL penalties and controllers, PPO losses: pure tensor math.

Everything here is a function of tensors and numbers (no trainer state, no config objects, no I/O), so
each piece reads top to bottom next to its equation and is tested on hand-worked values.

Shapes: ``B`` responses in the batch, ``T`` response tokens per row (right-padded), ``V`` vocabulary
size. ``response_mask`` is ``(B, T)``, bool or 0/1 numbers: 1 marks a token the policy sampled,
0 marks padding and tool/env tokens of multi-turn episodes (``env_mask = 0``). Masked tokens never
receive advantage, return, KL or loss, and sequential quantities (returns, GAE) skip over them: the
token after a tool span follows the token before it as if the span were not there. Masks are applied
by multiplication (as in verl), so values on masked tokens must be finite.

The numbers are those of verl 0.9.1 (``verl/trainer/ppo/core_algos.py``) on every valid token, for the
same inputs. Where verl's output is an accident of its implementation we differ, always on purpose:

- Advantages and returns are 0 on every masked token (verl leaves carried values there for ``gae``
  and ``remax``, and NaN for ``opo`` groups whose responses are all empty).
- Group statistics (means, standard deviations, leave-one-out sums) are accumulated in float64, so a
  group of equal rewards always gets advantage 0. verl's float32 sums can leave a residue of ~1e-8
  that ``epsilon = 1e-6`` turns into advantages up to ~0.06 (eight rewards of 0.7 in one group).
- Whitening over fewer than two valid tokens returns zeros where verl raises ``ValueError``.
- Losses over a batch with no valid token are 0 (verl divides 0 by 0).
- ``kl_penalty`` kind ``"full"`` (exact KL over the vocabulary) exists; verl raises
  ``NotImplementedError`` for it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

import torch
from torch import Tensor

from agentfly_envs.registry import Registry

Fn = TypeVar("Fn", bound=Callable)

# ---------------------------------------------------------------------------------------------------------------------
# Registries: every variant is chosen once, by name, from config.
# ---------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AdvantageEstimator:
    """A registered advantage estimator.

    ``fn(token_level_rewards, mask, **inputs) -> (advantages, returns)`` takes the ``(B, T)`` rewards and
    the ``(B, T)`` 0/1 mask (in the rewards' dtype) positionally and returns two ``(B, T)`` tensors that are 0
    wherever the mask is. ``inputs`` names its keyword-only parameters, drawn from :data:`ESTIMATOR_INPUTS`,
    which :func:`compute_advantage` passes in. What the trainer must provide follows from them (a critic for
    ``values``, greedy rollouts for ``reward_baselines``); ``compares_responses`` says the estimator learns nothing
    from a group of one response per prompt (``agent.num_chains >= 2``).
    """

    fn: Callable[..., tuple[Tensor, Tensor]]
    inputs: tuple[str, ...]
    compares_responses: bool = False

    @property
    def trains_critic(self) -> bool:
        """It takes a critic's ``values``: the trainer builds and trains a value model."""
        return "values" in self.inputs

    @property
    def needs_greedy_baseline(self) -> bool:
        """It takes ``reward_baselines``: the trainer rolls out a greedy response per prompt (ReMax)."""
        return "reward_baselines" in self.inputs


ESTIMATOR_INPUTS = ("group", "values", "reward_baselines", "gamma", "lam", "norm_adv_by_std_in_grpo", "epsilon")
"""What an estimator may ask for. ``group`` is ``compute_advantage``'s ``index`` as ``(B,)`` int64 ids 0..G-1."""

ADVANTAGE_ESTIMATORS: Registry[AdvantageEstimator] = Registry(
    "advantage estimator", where="agentfly_train/algorithms.py", how="@register_advantage_estimator(name)"
)
"""Estimator name (``algorithm.adv_estimator``) -> estimator."""

KL_PENALTIES: Registry[Callable[[Tensor, Tensor], Tensor]] = Registry(
    "KL penalty", where="agentfly_train/algorithms.py"
)
"""KL kind (``algorithm.kl_penalty``, ``actor.kl_loss_type``) -> ``fn(logprob, ref_logprob) -> (B, T) estimate``."""

LOSS_AGG_MODES: Registry[Callable[[Tensor, Tensor], tuple[Tensor, Tensor]]] = Registry(
    "loss aggregation mode", where="agentfly_train/algorithms.py"
)
"""Mode (``actor.loss_agg_mode``) -> ``fn(loss_mat, mask) -> (total, default denominator)``, mask 0/1 float."""


def register_advantage_estimator(name: str, *, compares_responses: bool = False) -> Callable[[Fn], Fn]:
    """Decorator that files an estimator under ``name``; its keyword-only parameters say what it needs, and
    ``compares_responses`` that it needs two or more responses per prompt (:class:`AdvantageEstimator`).

    Raises:
        ValueError: ``name`` is taken, or the function asks for an input not in :data:`ESTIMATOR_INPUTS`.
    """

    def decorator(fn: Fn) -> Fn:
        params = inspect.signature(fn).parameters.values()
        inputs = tuple(p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY)
        unknown = sorted(set(inputs) - set(ESTIMATOR_INPUTS))
        if unknown:
            raise ValueError(f"estimator {name!r} asks for {unknown}; estimators can take {ESTIMATOR_INPUTS}.")
        ADVANTAGE_ESTIMATORS.add(name, AdvantageEstimator(fn, inputs, compares_responses))
        return fn

    return decorator


def get_advantage_estimator(name: str) -> AdvantageEstimator:
    """The estimator registered as ``name``; raises ``UnknownNameError`` naming the closest known one."""
    return ADVANTAGE_ESTIMATORS.get(name)


def _register(registry: Registry, *names: str) -> Callable[[Fn], Fn]:
    def decorator(fn: Fn) -> Fn:
        for name in names:
            registry.add(name, fn)
        return fn

    return decorator


# ---------------------------------------------------------------------------------------------------------------------
# Masked statistics and scans shared by the estimators.
# ---------------------------------------------------------------------------------------------------------------------


def _float_mask(mask: Tensor, like: Tensor) -> Tensor:
    """``mask`` as 0/1 numbers in ``like``'s dtype, at least float32 so token counts stay exact."""
    return mask.to(torch.promote_types(like.dtype, torch.float32))


def _masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``x`` over the entries where the 0/1 float ``mask`` (same shape) is 1; 0 when there are none."""
    return (x * mask).sum() / mask.sum().clamp(min=1)


def _masked_whiten(x: Tensor, mask: Tensor) -> Tensor:
    """(x - mean) / sqrt(var + 1e-8), mean and unbiased var over the valid entries; 0 where ``mask`` is 0.

    With fewer than two valid entries the variance is undefined and the result is all zeros.
    """
    n = mask.sum()
    if n < 2:
        return torch.zeros_like(x)
    mean = (x * mask).sum() / n
    var = ((x - mean).square() * mask).sum() / n * (n / (n - 1))  # Bessel's correction
    return (x - mean) * torch.rsqrt(var + 1e-8) * mask


def _reverse_scan(x: Tensor, factor: Tensor) -> Tensor:
    """The linear recurrence y_t = x_t + factor_t * y_{t+1}, y_T = 0, along the last dim of (B, T) tensors.

    Two batch-wide ops per time step; the time loop itself is inherent. The multiply and the add are rounded
    separately (no fused multiply-add), the same float32 arithmetic as verl's loops.
    """
    x_tb, factor_tb = x.T.contiguous(), factor.T.contiguous()  # (T, B): each step reads one contiguous row
    y = torch.empty_like(x_tb)
    carry, discounted = torch.zeros_like(x_tb[0]), torch.empty_like(x_tb[0])  # (B,)
    for t in reversed(range(x_tb.shape[0])):
        torch.mul(factor_tb[t], carry, out=discounted)
        carry = torch.add(x_tb[t], discounted, out=y[t])
    return y.T.contiguous()


def _discounted_valid_sum(x: Tensor, mask: Tensor, discount: float) -> Tensor:
    """y_t = x_t + discount * y_next on valid tokens, "next" being the next valid token (y = 0 after the last).

    Masked tokens are skipped: they add nothing and cost no discount step. Their own y (the carried value of
    the next valid token) is meaningless and left for the caller to mask.
    """
    return _reverse_scan(x * mask, mask * discount + (1 - mask))


def _next_valid(x: Tensor, mask: Tensor) -> Tensor:
    """(B, T): x at the first valid token strictly after t in the same row, 0 if there is none."""
    at_or_after = _reverse_scan(x * mask, 1 - mask)  # y_t = x_t if valid else y_{t+1}
    return torch.nn.functional.pad(at_or_after[:, 1:], (0, 1))


# ---------------------------------------------------------------------------------------------------------------------
# Groups of responses to one prompt (``index``): vectorised per-group statistics.
# ---------------------------------------------------------------------------------------------------------------------


def _group_ids(index: Sequence[Hashable] | Tensor, batch_size: int, device: torch.device) -> Tensor:
    """(B,) int64 ids 0..G-1, equal for rows with equal labels; labels are any hashables or a 1-D tensor."""
    if isinstance(index, Tensor):
        ids = torch.unique(index.reshape(-1), return_inverse=True)[1]
    else:
        first_seen: dict[Hashable, int] = {}
        ids = torch.tensor([first_seen.setdefault(label, len(first_seen)) for label in index], dtype=torch.long)
    if ids.numel() != batch_size:
        raise ValueError(f"index has {ids.numel()} group labels for a batch of {batch_size} rows; give one per row.")
    return ids.to(device)


def _group_sum(x: Tensor, group: Tensor) -> Tensor:
    """(G,) sums of ``x`` (B,) within each group."""
    return torch.zeros(int(group.max()) + 1, dtype=x.dtype, device=x.device).index_add_(0, group, x)


def _per_row(per_group: Tensor, group: Tensor) -> Tensor:
    """(B,) each row's entry of a (G,) per-group tensor."""
    return per_group.index_select(0, group)


def _group_reduce(x: Tensor, group: Tensor, reduce: str) -> Tensor:
    """(B,) for each row, the ``reduce`` ("amax" or "amin") of ``x`` (B,) over the row's group."""
    per_group = torch.empty(int(group.max()) + 1, dtype=x.dtype, device=x.device)
    return _per_row(per_group.scatter_reduce_(0, group, x, reduce, include_self=False), group)


def _group_mean_std(scores: Tensor, group: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Per row: mean, unbiased std and size of its group, float64 (B,) each. A group of one: mean 0, std 1."""
    s = scores.double()
    size = torch.bincount(group).to(s.dtype)  # (G,)
    mean = _group_sum(s, group) / size
    std = (_group_sum((s - _per_row(mean, group)).square(), group) / (size - 1).clamp(min=1)).sqrt()
    single = size == 1
    mean, std = mean.masked_fill(single, 0.0), std.masked_fill(single, 1.0)
    return _per_row(mean, group), _per_row(std, group), _per_row(size, group)


def _outcome_scores(token_level_rewards: Tensor) -> Tensor:
    """(B,) one score per response: the sum of its token rewards over all T positions, masked ones included.

    Counting masked positions (as verl does) keeps the reward of an empty response, which has no valid token
    to carry it, in its group's statistics.
    """
    return token_level_rewards.sum(-1)


def _per_token(advantage: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """A (B,) per-response advantage on every valid token, (B, T) in ``mask``'s dtype, as (advantages, returns)."""
    per_token = advantage.to(mask.dtype)[:, None] * mask
    return per_token, per_token


# ---------------------------------------------------------------------------------------------------------------------
# Advantage estimators. Each returns (advantages, returns), (B, T), both 0 on masked tokens.
# s_i is response i's outcome score (see _outcome_scores), g its group, n its group's size.
# ---------------------------------------------------------------------------------------------------------------------


@register_advantage_estimator("gae")
def gae(
    token_level_rewards: Tensor, mask: Tensor, *, values: Tensor, gamma: float, lam: float
) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation (Schulman et al., 2016, arXiv:1506.02438), whitened over the batch.

    δ_t = r_t + γ V_t' − V_t and A_t = δ_t + γλ A_t', where t' is the next valid token after t (V = A = 0 past
    the last one); returns R_t = A_t + V_t are taken before whitening A over all valid tokens of the batch.
    ``values``: (B, T) float, the critic's V_t for each response token.
    """
    next_values = _next_valid(values, mask)  # (B, T) V_t'
    deltas = token_level_rewards + gamma * next_values - values  # (B, T) TD errors δ_t
    advantages = _discounted_valid_sum(deltas, mask, gamma * lam)
    returns = (advantages + values) * mask
    return _masked_whiten(advantages, mask), returns


@register_advantage_estimator("grpo", compares_responses=True)
def grpo(
    token_level_rewards: Tensor, mask: Tensor, *, group: Tensor, norm_adv_by_std_in_grpo: bool, epsilon: float
) -> tuple[Tensor, Tensor]:
    """GRPO (Shao et al., 2024, arXiv:2402.03300): A_i = (s_i − mean_g s) / (std_g s + ε) on every token of i.

    With ``norm_adv_by_std_in_grpo=False`` only the mean is removed: Dr. GRPO (Liu et al., 2025,
    arXiv:2503.20783). std is unbiased (n − 1); a group of one has mean 0 and std 1, so A_i = s_i / (1 + ε).
    """
    scores = _outcome_scores(token_level_rewards)
    mean, std, _ = _group_mean_std(scores, group)
    advantage = scores - mean
    if norm_adv_by_std_in_grpo:
        advantage = advantage / (std + epsilon)
    return _per_token(advantage, mask)


@register_advantage_estimator("grpo_passk", compares_responses=True)
def grpo_passk(
    token_level_rewards: Tensor, mask: Tensor, *, group: Tensor, norm_adv_by_std_in_grpo: bool, epsilon: float
) -> tuple[Tensor, Tensor]:
    """Pass@k training (arXiv:2503.19595, as in verl): only the best response of each group is credited.

    A_best = (max_g s − second max_g s) / (std_g s + ε) (no division with ``norm_adv_by_std_in_grpo=False``);
    every other response gets 0, as do all responses of a group whose top two scores tie.

    Raises:
        ValueError: a group has fewer than two responses.
    """
    scores = _outcome_scores(token_level_rewards).double()
    _, std, size = _group_mean_std(scores, group)
    if bool((size < 2).any()):
        raise ValueError("grpo_passk needs at least two responses per prompt; sample n >= 2 per group.")
    rows = torch.arange(scores.numel(), device=scores.device)
    best = _group_reduce(scores, group, "amax")  # (B,) top score of the row's group
    is_winner = rows == _group_reduce(torch.where(scores == best, rows, scores.numel()), group, "amin")
    runner_up = _group_reduce(scores.masked_fill(is_winner, -torch.inf), group, "amax")  # (B,)
    gap = best - runner_up
    if norm_adv_by_std_in_grpo:
        gap = gap / (std + epsilon)
    return _per_token(torch.where(is_winner, gap, 0.0), mask)


@register_advantage_estimator("reinforce_plus_plus")
def reinforce_plus_plus(token_level_rewards: Tensor, mask: Tensor, *, gamma: float) -> tuple[Tensor, Tensor]:
    """REINFORCE++ (Hu, 2025, arXiv:2501.03262): discounted return-to-go, whitened over the batch.

    G_t = r_t + γ G_t' (t' the next valid token; masked tokens' rewards are ignored); A = whiten(G) over all
    valid tokens of the batch. Returns G.
    """
    returns = _discounted_valid_sum(token_level_rewards, mask, gamma) * mask
    return _masked_whiten(returns, mask), returns


@register_advantage_estimator("reinforce_plus_plus_baseline")
def reinforce_plus_plus_baseline(token_level_rewards: Tensor, mask: Tensor, *, group: Tensor) -> tuple[Tensor, Tensor]:
    """REINFORCE++-baseline (Hu, 2025, arXiv:2501.03262): A = whiten(s_i − mean_g s) over all valid tokens.

    The group mean of a group of one is 0. Whitening is per token, so long responses weigh more in the
    batch mean and variance. Returns equal advantages.
    """
    scores = _outcome_scores(token_level_rewards)
    mean, _, _ = _group_mean_std(scores, group)
    centred, _ = _per_token(scores - mean, mask)
    advantages = _masked_whiten(centred, mask)
    return advantages, advantages


@register_advantage_estimator("rloo", compares_responses=True)
def rloo(token_level_rewards: Tensor, mask: Tensor, *, group: Tensor) -> tuple[Tensor, Tensor]:
    """RLOO (Ahmadian et al., 2024, arXiv:2402.14740): A_i = s_i − mean of the other n − 1 scores of g.

    Computed as (n s_i − Σ_g s) / (n − 1). A group of one has no baseline: A_i = s_i.
    """
    scores = _outcome_scores(token_level_rewards).double()
    size = _per_row(torch.bincount(group).to(scores.dtype), group)  # (B,) n
    loo = (size * scores - _per_row(_group_sum(scores, group), group)) / (size - 1).clamp(min=1)
    return _per_token(torch.where(size > 1, loo, scores), mask)


@register_advantage_estimator("remax")
def remax(token_level_rewards: Tensor, mask: Tensor, *, reward_baselines: Tensor) -> tuple[Tensor, Tensor]:
    """ReMax (Li et al., 2023, arXiv:2310.10505): A_t = G_t − b, G_t the undiscounted return-to-go.

    G_t = Σ r_k over valid k >= t; ``reward_baselines``: (B,) float, b = the reward of a greedy rollout of the
    same prompt. Returns G (``gamma`` is not used, as in verl).
    """
    returns = (token_level_rewards * mask).flip(-1).cumsum_(-1).flip(-1).mul_(mask)  # (B, T) G_t
    return torch.addcmul(returns, reward_baselines[:, None], mask, value=-1), returns  # G_t − b on valid tokens


@register_advantage_estimator("opo", compares_responses=True)
def opo(token_level_rewards: Tensor, mask: Tensor, *, group: Tensor) -> tuple[Tensor, Tensor]:
    """OPO (Hao et al., 2025, arXiv:2505.23585): A_i = s_i − b_g, b_g the length-weighted mean score of g.

    b_g = Σ_g |y_j| s_j / Σ_g |y_j|, |y_j| the number of valid tokens of response j. A group of one, or one
    whose responses are all empty, has b_g = 0.
    """
    scores = _outcome_scores(token_level_rewards).double()
    length = mask.sum(-1).to(scores.dtype)  # (B,) |y_i|
    size = _per_row(torch.bincount(group), group)
    weighted = _per_row(_group_sum(length * scores, group), group)
    total_length = _per_row(_group_sum(length, group), group)
    baseline = torch.where((size > 1) & (total_length > 0), weighted / total_length.clamp(min=1), 0.0)
    return _per_token(scores - baseline, mask)


@register_advantage_estimator("gpg", compares_responses=True)
def gpg(token_level_rewards: Tensor, mask: Tensor, *, group: Tensor) -> tuple[Tensor, Tensor]:
    """GPG (Chu et al., 2025, arXiv:2504.02546): A_i = α (s_i − mean_g s), α = B / #{i : s_i ≠ 0}.

    α rescales for responses that carry no gradient signal (α = B when every score is 0); a group of one has
    mean 0. verl's ``f_norm`` is fixed at 1.
    """
    scores = _outcome_scores(token_level_rewards)
    mean, _, _ = _group_mean_std(scores, group)
    alpha = scores.numel() / torch.count_nonzero(scores).clamp(min=1)
    return _per_token(alpha * (scores.double() - mean), mask)


_INPUT_ARGUMENT = {"group": "index", "values": "values", "reward_baselines": "reward_baselines"}
"""Estimator inputs that have no default, with the compute_advantage argument that supplies each."""


@torch.no_grad()
def compute_advantage(
    estimator: str,
    token_level_rewards: Tensor,
    response_mask: Tensor,
    *,
    index: Sequence[Hashable] | Tensor | None = None,
    values: Tensor | None = None,
    reward_baselines: Tensor | None = None,
    gamma: float = 1.0,
    lam: float = 1.0,
    norm_adv_by_std_in_grpo: bool = True,
    epsilon: float = 1e-6,
) -> tuple[Tensor, Tensor]:
    """Advantages and returns of a batch of responses with the estimator registered as ``estimator``.

    Args:
        estimator: A key of :data:`ADVANTAGE_ESTIMATORS`: ``gae``, ``grpo``, ``grpo_passk``,
            ``reinforce_plus_plus``, ``reinforce_plus_plus_baseline``, ``rloo``, ``remax``, ``opo``, ``gpg``.
        token_level_rewards: (B, T) float, reward per response token; an outcome reward sits on the last
            sampled token of the episode. Outcome estimators score a response by the sum over all T positions.
        response_mask: (B, T) bool or 0/1, 1 = token sampled by the policy, 0 = padding or tool/env token.
        index: (B,) group labels, one per row (any hashables, e.g. prompt uids, or a 1-D tensor); rows with
            equal labels answer the same prompt and need not be adjacent. Needed by ``grpo``, ``grpo_passk``,
            ``reinforce_plus_plus_baseline``, ``rloo``, ``opo``, ``gpg``.
        values: (B, T) float, critic values V_t of the response tokens. Needed by ``gae``.
        reward_baselines: (B,) float, reward of a greedy rollout of each row's prompt. Needed by ``remax``.
        gamma: Discount per valid token (masked tokens cost no discount step), for ``gae`` and
            ``reinforce_plus_plus``.
        lam: GAE's λ.
        norm_adv_by_std_in_grpo: Divide by the group std in ``grpo`` and ``grpo_passk`` (False: Dr. GRPO).
        epsilon: Added to the group std before dividing.

    Returns:
        (advantages, returns), both (B, T) in ``token_level_rewards``' dtype, 0 on every masked token.
        Outcome estimators return their advantages as returns.

    Raises:
        UnknownNameError: unknown estimator (the message names the closest).
        ValueError: a missing input the estimator needs, or mismatched shapes.
    """
    entry = get_advantage_estimator(estimator)
    shape = token_level_rewards.shape
    _check_shape("response_mask", response_mask, shape)
    mask = response_mask.to(token_level_rewards.dtype)
    supplied = {
        "group": None if index is None else _group_ids(index, shape[0], token_level_rewards.device),
        "values": values,
        "reward_baselines": reward_baselines,
        "gamma": gamma,
        "lam": lam,
        "norm_adv_by_std_in_grpo": norm_adv_by_std_in_grpo,
        "epsilon": epsilon,
    }
    missing = [_INPUT_ARGUMENT[name] for name in entry.inputs if supplied[name] is None]
    if missing:
        raise ValueError(f"advantage estimator {estimator!r} needs {', '.join(missing)}=...; none was given.")
    if "values" in entry.inputs:
        _check_shape("values", values, shape)
    if "reward_baselines" in entry.inputs:
        _check_shape("reward_baselines", reward_baselines, shape[:1])
    return entry.fn(token_level_rewards, mask, **{name: supplied[name] for name in entry.inputs})


def _check_shape(name: str, tensor: Tensor, shape: torch.Size) -> None:
    if tensor.shape != shape:
        raise ValueError(f"{name} has shape {tuple(tensor.shape)}; expected {tuple(shape)}, to match the rewards.")


# ---------------------------------------------------------------------------------------------------------------------
# KL penalties: per-token estimates of KL(π || π_ref) from the sampled tokens' log-probs (Schulman, "Approximating
# KL divergence", 2020, http://joschu.net/blog/kl-approx.html), and the exact KL from full logits.
# ---------------------------------------------------------------------------------------------------------------------


@_register(KL_PENALTIES, "kl", "k1")
def _k1(logprob: Tensor, ref_logprob: Tensor) -> Tensor:
    """k1 = log π − log π_ref: unbiased, high variance, can be negative."""
    return logprob - ref_logprob


@_register(KL_PENALTIES, "abs")
def _abs(logprob: Tensor, ref_logprob: Tensor) -> Tensor:
    """|log π − log π_ref|."""
    return (logprob - ref_logprob).abs()


@_register(KL_PENALTIES, "mse", "k2")
def _k2(logprob: Tensor, ref_logprob: Tensor) -> Tensor:
    """k2 = ½ (log π − log π_ref)²: biased, low variance; its gradient is that of the true KL."""
    return 0.5 * (logprob - ref_logprob).square()


@_register(KL_PENALTIES, "low_var_kl", "k3")
def _k3(logprob: Tensor, ref_logprob: Tensor) -> Tensor:
    """k3 = π_ref/π − log(π_ref/π) − 1 >= 0: unbiased, low variance. log-ratio clamped to ±20, k3 to <= 10."""
    log_ratio = (ref_logprob - logprob).clamp(-20, 20)
    return (log_ratio.exp() - log_ratio - 1).clamp(-10, 10)


def _with_k2_gradient(estimate: Callable[[Tensor, Tensor], Tensor]) -> Callable[[Tensor, Tensor], Tensor]:
    """Straight-through: the value of ``estimate`` with the gradient of k2 (unbiased KL gradient; verl's "+")."""

    def penalty(logprob: Tensor, ref_logprob: Tensor) -> Tensor:
        value = estimate(logprob, ref_logprob).detach()
        k2 = _k2(logprob, ref_logprob)
        return k2 - k2.detach() + value

    return penalty


def _register_straight_through_variants() -> None:
    for name, estimate in list(KL_PENALTIES.items()):
        KL_PENALTIES.add(f"{name}+", _with_k2_gradient(estimate))


_register_straight_through_variants()


def _log_softmax_pair(logits: Tensor, ref_logits: Tensor) -> tuple[Tensor, Tensor]:
    """log π and log π_ref of an (n, V) chunk of positions, computed in at least float32."""
    dtype = torch.promote_types(logits.dtype, torch.float32)
    return logits.to(dtype).log_softmax(-1), ref_logits.to(dtype).log_softmax(-1)


def _row_chunks(num_rows: int, chunk_size: int) -> Iterator[slice]:
    """Consecutive slices of at most ``chunk_size`` rows covering ``num_rows``."""
    return (slice(start, start + chunk_size) for start in range(0, num_rows, chunk_size))


class _FullKL(torch.autograd.Function):
    """Exact KL per position; forward and backward run over chunks of positions and never hold (N, V) buffers
    besides the inputs and their gradients.

    The backward recomputes each chunk's softmaxes instead of saving them: ∂KL/∂z = p (log p − log q − KL) for
    the policy logits z and ∂KL/∂z_ref = q − p for the reference logits, p = softmax(z), q = softmax(z_ref).
    """

    @staticmethod
    def forward(ctx, logits: Tensor, ref_logits: Tensor, chunk_size: int) -> Tensor:
        z, z_ref = logits.reshape(-1, logits.shape[-1]), ref_logits.reshape(-1, logits.shape[-1])  # (N, V)
        kl = z.new_empty(z.shape[0], dtype=torch.promote_types(z.dtype, torch.float32))  # (N,)
        for rows in _row_chunks(z.shape[0], chunk_size):
            log_p, log_q = _log_softmax_pair(z[rows], z_ref[rows])
            kl[rows] = (log_p.exp() * (log_p - log_q)).sum(-1)
        ctx.chunk_size = chunk_size
        ctx.save_for_backward(logits, ref_logits, kl)
        return kl.view(logits.shape[:-1])

    @staticmethod
    def backward(ctx, grad_kl: Tensor) -> tuple[Tensor | None, Tensor | None, None]:
        logits, ref_logits, kl = ctx.saved_tensors
        z, z_ref = logits.reshape(-1, logits.shape[-1]), ref_logits.reshape(-1, logits.shape[-1])  # (N, V)
        g, kl = grad_kl.reshape(-1, 1), kl[:, None]  # (N, 1)
        grad = torch.empty_like(z) if ctx.needs_input_grad[0] else None
        ref_grad = torch.empty_like(z_ref) if ctx.needs_input_grad[1] else None
        for rows in _row_chunks(z.shape[0], ctx.chunk_size):
            log_p, log_q = _log_softmax_pair(z[rows], z_ref[rows])
            p = log_p.exp()
            if grad is not None:
                grad[rows] = g[rows] * p * (log_p - log_q - kl[rows])
            if ref_grad is not None:
                ref_grad[rows] = g[rows] * (log_q.exp() - p)
        return (
            None if grad is None else grad.view_as(logits),
            None if ref_grad is None else ref_grad.view_as(ref_logits),
            None,
        )


def full_kl(logits: Tensor, ref_logits: Tensor, chunk_size: int = 256) -> Tensor:
    """Exact KL(π || π_ref) = Σ_v π(v) (log π(v) − log π_ref(v)) at every position, in chunks of positions.

    Args:
        logits: (B, T, V) or (..., V) policy logits (any float dtype; computed in at least float32).
        ref_logits: Reference-model logits, same shape.
        chunk_size: Positions per chunk. Beyond the inputs (and in the backward their gradients), peak memory is
            a few times chunk_size * V floats: the backward recomputes the softmaxes instead of storing them.

    Returns:
        (B, T) (the logits' shape without V) in nats, float32 or wider. Differentiable in both inputs.
    """
    if logits.shape != ref_logits.shape:
        raise ValueError(f"logits {tuple(logits.shape)} and ref_logits {tuple(ref_logits.shape)} differ in shape.")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive number of positions; got {chunk_size}.")
    return _FullKL.apply(logits, ref_logits, chunk_size)


KL_PENALTIES.add("full", full_kl)


def kl_penalty(logprob: Tensor, ref_logprob: Tensor, kind: str) -> Tensor:
    """Per-token KL estimate between the policy and the reference policy.

    Args:
        logprob: (B, T) float, log π of the sampled tokens. For ``kind="full"``: the policy's (B, T, V) logits.
        ref_logprob: (B, T) float, log π_ref of the same tokens. For ``kind="full"``: (B, T, V) reference logits.
        kind: A key of :data:`KL_PENALTIES`: ``kl``/``k1``, ``abs``, ``mse``/``k2``, ``low_var_kl``/``k3``, each
            also with a ``+`` suffix (same value, k2's gradient), or ``full`` (exact, see :func:`full_kl`).

    Returns:
        (B, T) KL estimate in nats per token, unmasked (mask it yourself).
    """
    return KL_PENALTIES.get(kind)(logprob, ref_logprob)


# ---------------------------------------------------------------------------------------------------------------------
# KL controllers and the KL penalty in the reward.
# ---------------------------------------------------------------------------------------------------------------------


class KLController:
    """The coefficient β of the KL penalty in the reward (``value``), updated once per batch; checkpointable."""

    def __init__(self, kl_coef: float) -> None:
        self.value = float(kl_coef)

    def update(self, current_kl: float, n_steps: int) -> None:
        """Adjusts β after a batch of ``n_steps`` responses whose mean KL was ``current_kl`` (nats per token)."""
        raise NotImplementedError

    def state_dict(self) -> dict[str, float]:
        """{"value": β}: the state to checkpoint (the other arguments come from config)."""
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, float]) -> None:
        """Restores β from :meth:`state_dict`'s output."""
        self.value = float(state["value"])


class FixedKLController(KLController):
    """β stays at ``kl_coef``."""

    def update(self, current_kl: float, n_steps: int) -> None:
        """Does nothing: the coefficient is fixed."""


class AdaptiveKLController(KLController):
    """β steered so the measured KL tracks ``target_kl`` (Ziegler et al., 2019, arXiv:1909.08593).

    Each update: e = clip(KL / target − 1, −0.2, 0.2); β ← β (1 + e · n_steps / horizon).

    Args:
        init_kl_coef: Starting β.
        target_kl: Target KL in nats per token (mean over sequences); > 0.
        horizon: Responses (``n_steps`` summed over updates) over which a 20 % error moves β by 20 %; > 0.
    """

    def __init__(self, init_kl_coef: float, target_kl: float, horizon: float) -> None:
        if target_kl <= 0 or horizon <= 0:
            raise ValueError(f"target_kl and horizon must be > 0; got target_kl={target_kl}, horizon={horizon}.")
        super().__init__(init_kl_coef)
        self.target = float(target_kl)
        self.horizon = float(horizon)

    def update(self, current_kl: float, n_steps: int) -> None:
        """β ← β (1 + clip(current_kl / target − 1, ±0.2) · n_steps / horizon)."""
        error = min(max(float(current_kl) / self.target - 1, -0.2), 0.2)
        self.value *= 1 + error * n_steps / self.horizon


KL_CONTROLLERS: Registry[Callable[[float, float, float], KLController]] = Registry(
    "KL controller type", where="agentfly_train/algorithms.py"
)
"""``algorithm.kl_ctrl.type`` -> ``factory(kl_coef, target_kl, horizon)``."""
KL_CONTROLLERS.add("fixed", lambda kl_coef, target_kl, horizon: FixedKLController(kl_coef))
KL_CONTROLLERS.add("adaptive", AdaptiveKLController)


def make_kl_controller(kind: str, kl_coef: float, target_kl: float = 0.1, horizon: float = 10000) -> KLController:
    """The controller of ``algorithm.kl_ctrl``: ``kind`` is "fixed" (ignores target_kl, horizon) or "adaptive"."""
    return KL_CONTROLLERS.get(kind)(kl_coef, target_kl, horizon)


@torch.no_grad()
def apply_kl_penalty(
    token_level_scores: Tensor,
    old_log_probs: Tensor,
    ref_log_probs: Tensor,
    response_mask: Tensor,
    kl_ctrl: KLController,
    kind: str = "kl",
) -> tuple[Tensor, dict[str, float]]:
    """Rewards with the KL penalty: r_t = score_t − β KL_t on valid tokens, then the controller update.

    :func:`subtract_kl` of ``kl_penalty(old_log_probs, ref_log_probs, kind)``.

    Args:
        token_level_scores: (B, T) float, task rewards per token.
        old_log_probs: (B, T) float, log-probs of the sampled tokens under the policy that sampled them
            (for ``kind="full"``: its (B, T, V) logits).
        ref_log_probs: (B, T) float, the same under the reference model (for ``kind="full"``: its logits).
        response_mask: (B, T) bool or 0/1, 1 = sampled token.
        kl_ctrl: The controller; updated in place.
        kind: A key of :data:`KL_PENALTIES`.

    Returns:
        (token_level_rewards (B, T), {"kl": mean per-sequence KL in nats per token, "kl_coef": β used}).
    """
    kl = kl_penalty(old_log_probs, ref_log_probs, kind)
    _check_shape(f"the {kind!r} KL", kl, token_level_scores.shape)
    return subtract_kl(token_level_scores, kl, response_mask, kl_ctrl)


@torch.no_grad()
def subtract_kl(
    token_level_scores: Tensor, kl: Tensor, response_mask: Tensor, kl_ctrl: KLController
) -> tuple[Tensor, dict[str, float]]:
    """r_t = score_t − β KL_t on valid tokens, then the controller update, from per-token KL values.

    β is the controller's value before this batch; the controller is then updated with the batch's mean
    per-sequence KL (each sequence's mean over its valid tokens; empty sequences count as 0) and n_steps = B.

    Args:
        token_level_scores: (B, T) float, task rewards per token.
        kl: (B, T) float, KL(π_old ‖ π_ref) per token in nats (any estimate; finite on masked tokens).
        response_mask: (B, T) bool or 0/1, 1 = sampled token.
        kl_ctrl: The controller; updated in place.

    Returns:
        (token_level_rewards (B, T), {"kl": mean per-sequence KL in nats per token, "kl_coef": β used}).
    """
    _check_shape("kl", kl, token_level_scores.shape)
    mask = _float_mask(response_mask, kl)
    kl = kl * mask  # (B, T)
    beta = kl_ctrl.value
    token_level_rewards = token_level_scores - beta * kl
    sequence_kl = kl.sum(-1) / mask.sum(-1).clamp(min=1)  # (B,)
    current_kl = sequence_kl.mean().item()
    kl_ctrl.update(current_kl, n_steps=token_level_scores.shape[0])
    return token_level_rewards, {"kl": current_kl, "kl_coef": beta}


# ---------------------------------------------------------------------------------------------------------------------
# Losses: aggregation over tokens and sequences, clipped policy loss, clipped value loss.
# ---------------------------------------------------------------------------------------------------------------------


@_register(LOSS_AGG_MODES, "token-mean")
def _token_mean(loss_mat: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """Σ over valid tokens / number of valid tokens: every token weighs the same (DAPO)."""
    return (loss_mat * mask).sum(), mask.sum()


@_register(LOSS_AGG_MODES, "token-sum")
def _token_sum(loss_mat: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """Σ over valid tokens, not divided by anything: longer batches weigh more (verl's ``token-sum``)."""
    return (loss_mat * mask).sum(), torch.ones((), dtype=mask.dtype, device=mask.device)


@_register(LOSS_AGG_MODES, "seq-mean-token-sum")
def _seq_mean_token_sum(loss_mat: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """Σ over sequences of (Σ over their valid tokens) / number of non-empty sequences."""
    return (loss_mat * mask).sum(), (mask.sum(-1) > 0).sum()


@_register(LOSS_AGG_MODES, "seq-mean-token-mean")
def _seq_mean_token_mean(loss_mat: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """Σ over sequences of (mean over their valid tokens) / number of non-empty sequences (original GRPO)."""
    length = mask.sum(-1)  # (B,)
    per_sequence = (loss_mat * mask).sum(-1) / length.clamp(min=1)  # (B,)
    return per_sequence.sum(), (length > 0).sum()


@_register(LOSS_AGG_MODES, "seq-mean-token-sum-norm")
def _seq_mean_token_sum_norm(loss_mat: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """seq-mean-token-sum further divided by T, the padded response length (Dr. GRPO's constant)."""
    return (loss_mat * mask).sum(), (mask.sum(-1) > 0).sum() * loss_mat.shape[-1]


def agg_loss(loss_mat: Tensor, loss_mask: Tensor, mode: str, *, denominator: float | Tensor | None = None) -> Tensor:
    """Reduces a per-token loss to a scalar.

    Args:
        loss_mat: (B, T) float, loss per token.
        loss_mask: (B, T) bool or 0/1, 1 = token in the loss.
        mode: A key of :data:`LOSS_AGG_MODES`: ``token-mean``, ``token-sum``, ``seq-mean-token-sum``,
            ``seq-mean-token-mean``, ``seq-mean-token-sum-norm``.
        denominator: Replaces the mode's own count of this batch (valid tokens; non-empty sequences; non-empty
            sequences times T). Pass the count over a whole optimiser step (all micro-batches, all processes,
            divided by the processes if gradients are averaged across them) for a step that equals one big batch.

    Returns:
        Scalar loss; 0 when the batch has nothing to count (verl: NaN).
    """
    total, count = LOSS_AGG_MODES.get(mode)(loss_mat, _float_mask(loss_mask, loss_mat))
    return total / (count.clamp(min=1) if denominator is None else denominator)


def policy_loss(
    old_log_prob: Tensor,
    log_prob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.2,
    clip_ratio_c: float = 3.0,
    loss_agg_mode: str = "token-mean",
    *,
    denominator: float | Tensor | None = None,
    weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO clipped surrogate (Schulman et al., 2017, arXiv:1707.06347) with dual clip (Ye et al., 2020,
    arXiv:1912.09729).

    ρ = exp(clamp(log π − log π_old, ±20)); L = max(−A ρ, −A clip(ρ, 1 − ε_low, 1 + ε_high)); for A < 0 the
    loss is further capped at −A c, so a huge ratio cannot blow up the update of a bad action.

    Args:
        old_log_prob: (B, T) float, log π_old of the sampled tokens (no gradient).
        log_prob: (B, T) float, log π of the same tokens under the policy being trained.
        advantages: (B, T) float.
        response_mask: (B, T) bool or 0/1, 1 = token in the loss.
        clip_ratio_low: ε_low, the ratio's lower clip is 1 − ε_low.
        clip_ratio_high: ε_high, the ratio's upper clip is 1 + ε_high (DAPO's clip-higher when > ε_low).
        clip_ratio_c: Dual-clip bound c > 1.
        loss_agg_mode: See :func:`agg_loss`.
        denominator: See :func:`agg_loss`.
        weights: (B, T) float, no gradient: each token's loss is multiplied by its weight before aggregation
            (the rollout-correction weights of :func:`rollout_is_weights`); ``None``: 1.

    Returns:
        (loss, metrics): metrics are detached scalars, means over valid tokens: ``pg_clipfrac`` (the clipped
        term was the larger), ``pg_clipfrac_lower`` (the dual clip was active), ``ppo_kl`` (mean log π_old − log π,
        the k1 estimate of KL(π_old || π); http://joschu.net/blog/kl-approx.html).

    Raises:
        ValueError: ``clip_ratio_c <= 1``.
    """
    if clip_ratio_c <= 1.0:
        raise ValueError(f"clip_ratio_c is the dual-clip bound and must be > 1; got {clip_ratio_c}.")
    log_ratio = (log_prob - old_log_prob).clamp(-20.0, 20.0)
    ratio = log_ratio.exp()
    pg_losses1 = -advantages * ratio
    pg_losses2 = -advantages * ratio.clamp(1 - clip_ratio_low, 1 + clip_ratio_high)
    clipped = torch.maximum(pg_losses1, pg_losses2)
    pg_losses3 = -advantages * clip_ratio_c
    pg_losses = torch.where(advantages < 0, torch.minimum(clipped, pg_losses3), clipped)
    if weights is not None:
        pg_losses = pg_losses * weights
    loss = agg_loss(pg_losses, response_mask, loss_agg_mode, denominator=denominator)
    mask = _float_mask(response_mask, log_ratio)
    metrics = {
        "pg_clipfrac": _masked_mean((pg_losses2 > pg_losses1).to(mask.dtype), mask),
        "pg_clipfrac_lower": _masked_mean(((clipped > pg_losses3) & (advantages < 0)).to(mask.dtype), mask),
        "ppo_kl": _masked_mean(-log_ratio, mask),
    }
    return loss, {name: value.detach() for name, value in metrics.items()}


def value_loss(
    vpreds: Tensor,
    returns: Tensor,
    values: Tensor,
    response_mask: Tensor,
    cliprange_value: float = 0.5,
    loss_agg_mode: str = "token-mean",
    *,
    denominator: float | Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """PPO's clipped value loss: ½ agg(max((V − R)², (clip(V, V_old ± ε) − R)²)).

    Args:
        vpreds: (B, T) float, values V of the critic being trained.
        returns: (B, T) float, targets R (from :func:`compute_advantage`).
        values: (B, T) float, V_old, the critic's values when the batch was collected.
        response_mask: (B, T) bool or 0/1, 1 = token in the loss.
        cliprange_value: ε, how far V may move from V_old before the clipped term takes over.
        loss_agg_mode: See :func:`agg_loss`.
        denominator: See :func:`agg_loss`.

    Returns:
        (loss, clipfrac): clipfrac is the detached fraction of valid tokens where the clipped term was larger.
    """
    vpreds_clipped = torch.clamp(vpreds, values - cliprange_value, values + cliprange_value)
    vf_losses1 = (vpreds - returns).square()
    vf_losses2 = (vpreds_clipped - returns).square()
    loss = 0.5 * agg_loss(torch.maximum(vf_losses1, vf_losses2), response_mask, loss_agg_mode, denominator=denominator)
    mask = _float_mask(response_mask, vf_losses1)
    return loss, _masked_mean((vf_losses2 > vf_losses1).to(mask.dtype), mask).detach()


# --- rollout correction -----------------------------------------------------------------------------------------

ROLLOUT_IS_LEVELS = ("token", "sequence")
"""``algorithm.rollout_correction.rollout_is`` values (verl's names); ``None`` turns the weights off."""
ROLLOUT_IS_METRICS = ("rollout_is_mean", "rollout_is_raw_min", "rollout_is_raw_max", "rollout_is_clipped_frac")
"""The metrics of :func:`rollout_is_weights`, in the order it returns them."""

_LOG_RATIO_BOUND = 20.0


def parse_is_threshold(spec: str | float) -> tuple[float | None, float]:
    """verl's ``rollout_is_threshold`` -> (lower, upper): ``2.0`` or ``"2.0"`` truncates the weights at 2 (TIS,
    lower ``None``); ``"0.5_5.0"`` zeroes weights outside [0.5, 5] (IcePop's masking).

    Raises:
        ValueError: not a positive number or a ``lower_upper`` pair with 0 <= lower < upper.
    """
    text = str(spec).strip()
    lower_text, _, upper_text = text.rpartition("_")
    try:
        upper = float(upper_text)
        lower = float(lower_text) if lower_text else None
    except ValueError:
        raise ValueError(f"{spec!r} is neither a number (TIS cap) nor 'lower_upper' (e.g. '0.5_5.0')") from None
    if upper <= 0 or (lower is not None and not 0 <= lower < upper):
        raise ValueError(f"{spec!r}: need an upper bound > 0 and, if given, 0 <= lower < upper")
    return lower, upper


def rollout_is_weights(
    log_ratio: Tensor, response_mask: Tensor, level: str, threshold: str | float = 2.0
) -> tuple[Tensor, dict[str, Tensor]]:
    """Importance weights π_train / π_rollout that correct for sampling from a different engine (Yao et al., 2025,
    "Your efficient RL framework secretly brings you off-policy RL training"; verl's ``rollout_correction``).

    ``token``: w_t = exp(log_ratio_t); ``sequence``: every token of a row gets exp(Σ_t log_ratio_t) over its valid
    tokens. Log-ratios are clamped to ±20 before ``exp``; the weights are then truncated at the upper bound (a
    number) or zeroed outside [lower, upper] (a ``lower_upper`` pair), see :func:`parse_is_threshold`.

    Args:
        log_ratio: (B, T) float, log π_train − log π_rollout of each sampled token (no gradient).
        response_mask: (B, T) bool or 0/1.
        level: ``token`` or ``sequence``.
        threshold: verl's ``rollout_is_threshold``.

    Returns:
        (weights, metrics): weights (B, T), 0 on masked tokens, detached; metrics are scalars:
        ``rollout_is_mean`` (the weights' mean over valid tokens, as verl's), ``rollout_is_raw_min``/``_max`` (the
        ratios before truncation) and ``rollout_is_clipped_frac`` (the share truncated or zeroed), the last three
        over valid tokens (``token``) or rows with a valid token (``sequence``).

    Raises:
        ValueError: unknown ``level`` or a bad ``threshold``.
    """
    if level not in ROLLOUT_IS_LEVELS:
        raise ValueError(f"rollout_is={level!r} is not one of {list(ROLLOUT_IS_LEVELS)}")
    lower, upper = parse_is_threshold(threshold)
    mask = _float_mask(response_mask, log_ratio)
    log_ratio = log_ratio.detach() * mask
    if level == "token":
        raw = log_ratio.clamp(-_LOG_RATIO_BOUND, _LOG_RATIO_BOUND).exp()
        units = mask.bool()
    else:
        raw = log_ratio.sum(-1, keepdim=True).clamp(-_LOG_RATIO_BOUND, _LOG_RATIO_BOUND).exp().expand_as(log_ratio)
        units = torch.zeros_like(mask, dtype=torch.bool)
        units[:, 0] = mask.sum(-1) > 0  # one entry per row with a valid token
    if lower is None:
        outside = raw > upper
        weights = raw.clamp(max=upper)
    else:
        outside = (raw < lower) | (raw > upper)
        weights = torch.where(outside, torch.zeros_like(raw), raw)
    weights = weights * mask
    selected = raw[units]
    empty = selected.new_zeros(())
    values = (
        _masked_mean(weights, mask),
        selected.min() if selected.numel() else empty,
        selected.max() if selected.numel() else empty,
        outside[units].float().mean() if selected.numel() else empty,
    )
    return weights, dict(zip(ROLLOUT_IS_METRICS, values, strict=True))


def rollout_gap(
    train_logps: Tensor, sampling_logps: Tensor, response_mask: Tensor, level: str | None, threshold: str | float
) -> tuple[Tensor | None, Tensor]:
    """The gap between the trainer's and the engine's log-probs of the sampled tokens of some rows, as one statistics
    vector that sums across chunks and processes (:func:`rollout_gap_metrics`).

    Args:
        train_logps: (b, T) log π_train, the policy before this step's update (no gradient).
        sampling_logps: (b, T) log π_rollout, the engine's log-probs (NaN where it gave none).
        response_mask: (b, T) bool or 0/1: the sampled tokens.
        level: ``rollout_is`` (``token``, ``sequence``), or ``None`` for no importance weights.
        threshold: ``rollout_is_threshold``.

    Returns:
        (the (b, T) importance weights of ``level`` (:func:`rollout_is_weights`), or ``None`` without it; a (k,)
        float vector: |log-ratio| sum, token count and max, then with ``level`` the weights' metrics).
    """
    mask = _float_mask(response_mask, train_logps)
    log_ratio = torch.nan_to_num(train_logps.detach() - sampling_logps) * mask
    gap = log_ratio.abs()
    stats = [gap.sum(), mask.sum(), gap.max()]
    weights = None
    if level is not None:
        weights, metrics = rollout_is_weights(log_ratio, mask, level, threshold)
        stats += metrics.values()
    return weights, torch.stack([stat.float() for stat in stats])


def rollout_gap_metrics(chunks: Tensor) -> dict[str, float]:
    """A rollout batch's gap from the :func:`rollout_gap` vectors of its chunks (micro-batches, processes):
    ``rollout/logprob_diff_mean`` and ``_max`` of |log π_train − log π_rollout|, and when the vectors carry importance
    weights' metrics, ``rollout_corr/*`` (means of the chunks' means; min and max of the raw ratios).

    Args:
        chunks: (n, k) float, one :func:`rollout_gap` vector per chunk.
    """
    metrics = {
        "rollout/logprob_diff_mean": (chunks[:, 0].sum() / chunks[:, 1].sum().clamp(min=1)).item(),
        "rollout/logprob_diff_max": chunks[:, 2].max().item(),
    }
    if chunks.shape[1] > 3:
        reduce = {"rollout_is_raw_min": torch.min, "rollout_is_raw_max": torch.max}
        for column, name in enumerate(ROLLOUT_IS_METRICS, start=3):
            metrics[f"rollout_corr/{name}"] = reduce.get(name, torch.mean)(chunks[:, column]).item()
    return metrics
