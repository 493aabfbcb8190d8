"""What the other modules of :mod:`agentfly_train.algorithms` share: masked statistics, the reverse scans of the
sequential estimators, registration of several names at once, and the shape check of their inputs."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import torch
from torch import Tensor

from agentfly_envs.registry import Registry

Fn = TypeVar("Fn", bound=Callable)


def _register(registry: Registry, *names: str) -> Callable[[Fn], Fn]:
    def decorator(fn: Fn) -> Fn:
        for name in names:
            registry.add(name, fn)
        return fn

    return decorator


def _check_shape(name: str, tensor: Tensor, shape: torch.Size) -> None:
    if tensor.shape != shape:
        raise ValueError(f"{name} has shape {tuple(tensor.shape)}; expected {tuple(shape)}, to match the rewards.")


# ---------------------------------------------------------------------------------------------------------------------
# Masked statistics and scans shared by the estimators and the losses.
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
