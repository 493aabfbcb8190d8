"""A new advantage estimator: pure tensor math, registered by name for ``algorithm.adv_estimator``."""

from __future__ import annotations

import torch
from torch import Tensor

from agentfly_train.algorithms import register_advantage_estimator


@register_advantage_estimator("median_baseline", compares_responses=True)
def median_baseline(token_level_rewards: Tensor, mask: Tensor, *, group: Tensor) -> tuple[Tensor, Tensor]:
    """A_i = s_i − the median score of its group (the lower median for an even group), on every sampled token.

    s_i is response i's outcome score, the sum of its token rewards. ``group`` asks :func:`compute_advantage` for
    the ``(B,)`` group ids; ``compares_responses=True`` makes the config require ``agent.num_chains >= 2``.
    """
    scores = token_level_rewards.sum(-1)  # (B,)
    baseline = torch.empty_like(scores)
    for label in group.unique():
        members = group == label
        baseline[members] = scores[members].median()
    advantages = (scores - baseline)[:, None] * mask  # (B, T), 0 on tool tokens and padding
    return advantages, advantages
