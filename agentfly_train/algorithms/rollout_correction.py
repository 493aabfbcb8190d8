"""Rollout correction: importance weights π_train / π_rollout for the gap between the rollout engine's log-probs and
the trainer's, and the metrics of that gap."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from agentfly_train.algorithms.common import _float_mask, _masked_mean
from agentfly_train.config.errors import ConfigError, check_choice

if TYPE_CHECKING:
    from agentfly_train.config.schema import RolloutCorrectionConfig

ROLLOUT_IS_LEVELS = ("token", "sequence")
"""``algorithm.rollout_correction.rollout_is`` values (verl's names); ``None`` turns the weights off."""
ROLLOUT_IS_METRICS = ("rollout_is_mean", "rollout_is_raw_min", "rollout_is_raw_max", "rollout_is_clipped_frac")
"""The metrics of :func:`rollout_is_weights`, in the order it returns them."""

_LOG_RATIO_BOUND = 20.0


def check_rollout_correction(section: RolloutCorrectionConfig) -> None:
    """Checks ``algorithm.rollout_correction``: a known level and a threshold :func:`parse_is_threshold` reads.

    Raises:
        ConfigError: one line naming the key.
    """
    if section.rollout_is is not None:
        check_choice("algorithm.rollout_correction.rollout_is", section.rollout_is, ROLLOUT_IS_LEVELS)
    try:
        parse_is_threshold(section.rollout_is_threshold)
    except ValueError as error:
        raise ConfigError(f"algorithm.rollout_correction.rollout_is_threshold: {error}") from None


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
