"""Where and in what precision the policy trains: ``trainer.device`` and ``actor_rollout_ref.model.dtype`` resolved."""

from __future__ import annotations

import torch


def policy_dtype(name: str, device: str) -> torch.dtype:
    """The dtype for ``actor_rollout_ref.model.dtype`` (``auto``: bfloat16 on a GPU that supports it)."""
    if name == "auto":
        return torch.bfloat16 if device == "cuda" and torch.cuda.is_bf16_supported() else torch.float32
    return getattr(torch, name)


def training_device(setting: str) -> str:
    """``trainer.device`` resolved: ``cuda`` when available for ``auto``."""
    if setting == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return setting
