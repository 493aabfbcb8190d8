"""KL penalties (per-token estimates of KL(π || π_ref), and the exact KL over the vocabulary), the controllers of
the KL coefficient β in the reward, and the penalty in the reward itself."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from agentfly_envs.registry import Registry
from agentfly_train.algorithms.common import _check_shape, _float_mask, _register
from agentfly_train.config.errors import check_positive

if TYPE_CHECKING:
    from agentfly_train.config.schema import KLControlConfig

KL_PENALTIES: Registry[Callable[[Tensor, Tensor], Tensor]] = Registry(
    "KL penalty", where="agentfly_train/algorithms/kl.py"
)
"""KL kind (``algorithm.kl_penalty``, ``actor.kl_loss_type``) -> ``fn(logprob, ref_logprob) -> (B, T) estimate``."""


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
    """The coefficient β of the KL penalty in the reward (``value``), updated once per batch; checkpointable.

    A subclass registered in :data:`KL_CONTROLLERS` is built as ``cls(kl_coef, target_kl, horizon)`` and checks its
    section of the configuration with :meth:`check`.
    """

    def __init__(self, kl_coef: float) -> None:
        self.value = float(kl_coef)

    @classmethod
    def check(cls, kl_ctrl: KLControlConfig) -> None:
        """Checks ``algorithm.kl_ctrl`` for this controller, when ``algorithm.use_kl_in_reward``: ``kl_coef`` > 0.

        Raises:
            ConfigError: naming the key and its bad value.
        """
        check_positive("algorithm.kl_ctrl.kl_coef", kl_ctrl.kl_coef)

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
    """β stays at ``kl_coef``; ``target_kl`` and ``horizon`` (the other arguments of a registered controller) are
    ignored."""

    def __init__(self, kl_coef: float, target_kl: float | None = None, horizon: float | None = None) -> None:
        super().__init__(kl_coef)

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

    @classmethod
    def check(cls, kl_ctrl: KLControlConfig) -> None:
        """Checks ``algorithm.kl_ctrl``: ``kl_coef``, ``target_kl`` and ``horizon`` > 0.

        Raises:
            ConfigError: naming the key and its bad value.
        """
        super().check(kl_ctrl)
        check_positive("algorithm.kl_ctrl.target_kl", kl_ctrl.target_kl)
        check_positive("algorithm.kl_ctrl.horizon", kl_ctrl.horizon)

    def update(self, current_kl: float, n_steps: int) -> None:
        """β ← β (1 + clip(current_kl / target − 1, ±0.2) · n_steps / horizon)."""
        error = min(max(float(current_kl) / self.target - 1, -0.2), 0.2)
        self.value *= 1 + error * n_steps / self.horizon


KL_CONTROLLERS: Registry[type[KLController]] = Registry("KL controller type", where="agentfly_train/algorithms/kl.py")
"""``algorithm.kl_ctrl.type`` -> a :class:`KLController` subclass, built as ``cls(kl_coef, target_kl, horizon)``."""
KL_CONTROLLERS.add("fixed", FixedKLController)
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
