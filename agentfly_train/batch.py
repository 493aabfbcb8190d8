"""Tensors of a rollout batch as the trainer and the critic use them: loss masks, episodes of turn rows,
rows gathered across processes, loss denominators of an optimiser step, and masked statistics.

Shapes: ``B`` episodes, ``T`` completion tokens (right-padded). A loss mask is 1 on tokens the policy sampled
and 0 on padding and on tool/env tokens (``env_mask = 0``, TRL's ``tool_mask``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from agentfly_train.algorithms import LOSS_AGG_MODES


def loss_mask(batch: Mapping[str, Any]) -> Tensor:
    """(B, T) int: ``completion_mask * tool_mask`` of a TRL batch dict (``tool_mask`` is our ``env_mask``)."""
    mask = batch["completion_mask"]
    return mask if batch.get("tool_mask") is None else mask * batch["tool_mask"]


def sequences(batch: Mapping[str, Any]) -> tuple[Tensor, Tensor]:
    """(B, P + T) ids and attention mask of each prompt (left-padded) followed by its completion (right-padded)."""
    input_ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    return input_ids, torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)


PIXEL_KEYS = ("pixel_values", "image_grid_thw", "num_images")
"""A vision-language batch's image inputs, in TRL's ragged layout
(:meth:`~agentfly_train.vision.ImageInputs.pixel_inputs`)."""


def pixel_inputs(batch: Mapping[str, Any]) -> dict[str, Any]:
    """The :data:`PIXEL_KEYS` entries of a batch dict (``{}`` for a text batch)."""
    return {key: batch[key] for key in PIXEL_KEYS if key in batch}


def episode_mask(mask: Tensor, turns: int) -> Tensor:
    """The loss mask of episodes whose turns are rows of their own (``turns`` consecutive rows per episode).

    Args:
        mask: (E * turns, T) 0/1, the turn rows' loss mask.
        turns: Rows per episode.

    Returns:
        (E, L) int64, L = the most sampled tokens of an episode (at least 1): row e has as many leading ones as
        episode e's turns have sampled tokens, so an estimator sees each episode as one response of that length.

    Example:
        >>> episode_mask(torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0], [1, 0, 0]]), turns=2)
        tensor([[1, 1, 1],
                [1, 0, 0]])
    """
    counts = mask.reshape(-1, turns * mask.shape[1]).sum(dim=1)  # (E,)
    width = max(int(counts.max()) if counts.numel() else 0, 1)
    return (torch.arange(width, device=mask.device) < counts[:, None]).long()


def on_turn_rows(per_episode: Tensor, turns: int, mask: Tensor) -> Tensor:
    """Each episode's values, computed over :func:`episode_mask`, on the tokens of its turn rows: the j-th trained token
    of an episode's rows (rows in order) gets column j − 1 of its row of ``per_episode``, as an estimator saw it there.

    Args:
        per_episode: (E, L) float, e.g. advantages computed over :func:`episode_mask` (an estimator of whole
            responses gives one value per episode, a turn-level one a value per turn).
        turns: Rows per episode.
        mask: (E * turns, T) 0/1, the turn rows' loss mask.

    Returns:
        (E * turns, T), the value where ``mask`` is 1 and 0 elsewhere.

    Example:
        >>> on_turn_rows(torch.tensor([[1.0, 2.0, 3.0]]), 2, torch.tensor([[1, 0, 1], [0, 1, 0]]))
        tensor([[1., 0., 2.],
                [0., 3., 0.]])
    """
    rows = mask.long()
    counts = rows.sum(dim=1).reshape(-1, turns)  # (E, turns): trained tokens per row
    before = (counts.cumsum(dim=1) - counts).reshape(-1, 1)  # (E * turns, 1): the episode's tokens in earlier rows
    columns = (before + rows.cumsum(dim=1) - 1).clamp(0, per_episode.shape[1] - 1)  # (E * turns, T)
    return per_episode.repeat_interleave(turns, dim=0).gather(1, columns) * mask


def left_out_episodes(excluded: Tensor, group: Tensor) -> Tensor:
    """The episodes that neither train nor enter a baseline: those ``excluded`` (an infrastructure failure), and every
    episode of a group that lost episodes so that fewer than 2 are left.

    Args:
        excluded: (E,) bool, per episode.
        group: (E,) int64, each episode's group (the rollouts of one prompt).

    Returns:
        (E,) bool.

    Example:
        >>> left_out_episodes(torch.tensor([0, 1, 0, 0, 1, 1, 0]).bool(), torch.tensor([0, 0, 0, 1, 1, 1, 2]))
        tensor([False,  True, False,  True,  True,  True, False])
    """
    groups = int(group.max()) + 1 if group.numel() else 0
    size = torch.zeros(groups, dtype=torch.long, device=group.device).scatter_add_(0, group, torch.ones_like(group))
    kept = torch.zeros_like(size).scatter_add_(0, group, (~excluded).long())
    thin = (kept < size) & (kept < 2)
    return excluded | thin[group]


def row_slices(stop: int, size: int, start: int = 0) -> list[slice]:
    """Consecutive slices of at most ``size`` rows covering rows ``start`` to ``stop`` (micro-batches)."""
    return [slice(first, min(first + size, stop)) for first in range(start, stop, size)]


def gather_rows(accelerator: Any, x: Tensor) -> Tensor:
    """Every process's rows, in process order: (B, ...) per process -> (B * processes, ...).

    2-D tensors are right-padded with zeros to the longest T across processes first.
    """
    if x.ndim == 2:
        x = accelerator.pad_across_processes(x, dim=1, pad_index=0)
    return accelerator.gather(x)


def step_denominator(masks: Sequence[Tensor], mode: str, width: int, accelerator: Any) -> Tensor:
    """The denominator that makes a sum of micro-batch losses equal the loss of the whole optimiser step.

    Adds up the count that ``algorithms.agg_loss`` would divide by (valid tokens, non-empty sequences, or
    non-empty sequences times ``width``) over the step's micro-batches on every process, then divides by the
    number of processes, whose gradients are averaged. ``token-sum`` divides by nothing but that average.

    Args:
        masks: The (b, T) loss masks of this process's micro-batches in the step.
        mode: A key of ``algorithms.LOSS_AGG_MODES``.
        width: The padded length ``seq-mean-token-sum-norm`` divides by (the completion token budget, as in
            verl, not the longest completion of the batch).
        accelerator: The run's ``accelerate.Accelerator``.

    Returns:
        Scalar float32 tensor, on the masks' device.
    """
    if mode == "token-sum":  # no count: the step's loss is its token sum (times the processes, whose gradients
        # are averaged), as verl's token-sum with dp_size
        return torch.tensor(1.0 / accelerator.num_processes, device=masks[0].device)
    aggregate = LOSS_AGG_MODES.get(mode)
    count = torch.zeros((), device=masks[0].device)
    for mask in masks:
        padded = torch.nn.functional.pad(mask.float(), (0, width - mask.shape[1]))  # (b, width)
        count = count + aggregate(torch.zeros_like(padded), padded)[1]
    # A step whose every token is left out (infrastructure failures) has a zero loss sum: divided by 1, not 0.
    return accelerator.reduce(count, reduction="sum").clamp(min=1.0) / accelerator.num_processes


def masked_stats(x: Tensor, mask: Tensor) -> dict[str, float]:
    """``mean``, ``max`` and ``min`` of ``x`` over the entries where ``mask`` (same shape) is 1; zeros if none."""
    valid = x[mask.bool()].float()
    if valid.numel() == 0:
        return {"mean": 0.0, "max": 0.0, "min": 0.0}
    return {"mean": valid.mean().item(), "max": valid.max().item(), "min": valid.min().item()}


def explained_variance(returns: Tensor, values: Tensor, mask: Tensor) -> float:
    """1 − Var(R − V) / Var(R) over valid tokens (verl's ``vf_explained_var``): 1 for a perfect critic, 0 for
    one that predicts the mean, negative for worse. Variances are unbiased; 0 with fewer than two tokens."""
    valid = mask.bool()
    if int(valid.sum()) < 2:
        return 0.0
    target, prediction = returns[valid].double(), values[valid].double()
    return float(1 - (target - prediction).var() / (target.var() + 1e-5))
