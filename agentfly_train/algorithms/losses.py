"""PPO's losses: aggregation of a per-token loss over tokens and sequences, the clipped policy loss and the clipped
value loss."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from agentfly_envs.registry import Registry
from agentfly_train.algorithms.common import _float_mask, _masked_mean, _register

LOSS_AGG_MODES: Registry[Callable[[Tensor, Tensor], tuple[Tensor, Tensor]]] = Registry(
    "loss aggregation mode", where="agentfly_train/algorithms/losses.py"
)
"""Mode (``actor.loss_agg_mode``) -> ``fn(loss_mat, mask) -> (total, default denominator)``, mask 0/1 float."""


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
