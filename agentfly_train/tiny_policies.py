"""The ``agentfly:tiny*`` model names: policies built locally, with no download.

:data:`TINY_POLICIES` names each policy by an entry point into :mod:`agentfly_train.tiny_model`, so the configuration
can tell a tiny name from a checkpoint without importing transformers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentfly_envs.registry import Registry
from agentfly_train.config.schema import TINY_MODEL, TINY_QWEN3_VL_MODEL, TINY_VL_MODEL


@dataclass(frozen=True)
class TinyPolicy:
    """What an ``agentfly:tiny*`` model name builds (no download).

    Attributes:
        tokenizer: Builds the tokenizer (no arguments).
        model: Builds the model from the tokenizer (``hidden_size``, ``num_layers``, ``seed`` keywords).
        image_processor: Builds a vision-language policy's image processor (``max_pixels`` keyword), or ``None``.
    """

    tokenizer: Callable[[], Any]
    model: Callable[..., Any]
    image_processor: Callable[..., Any] | None = None


TINY_POLICIES: Registry[TinyPolicy] = Registry(
    "tiny model", where="agentfly_train/tiny_policies.py", how="TINY_POLICIES.add(name, TinyPolicy(...))"
)
"""``actor_rollout_ref.model.path`` values that build a tiny policy locally -> how."""
TINY_POLICIES.add_entry_point(TINY_MODEL, "agentfly_train.tiny_model:TEXT_POLICY")
TINY_POLICIES.add_entry_point(TINY_VL_MODEL, "agentfly_train.tiny_model:VL_POLICY")
TINY_POLICIES.add_entry_point(TINY_QWEN3_VL_MODEL, "agentfly_train.tiny_model:QWEN3_VL_POLICY")
