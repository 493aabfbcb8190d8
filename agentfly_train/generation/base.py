"""The generation-backend interface: token ids in, sampled token ids and their log-probabilities out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one turn.

    Attributes:
        temperature: Softmax temperature; ``0`` decodes greedily.
        top_p: Nucleus mass (``1.0``: off).
        top_k: Keep the ``top_k`` most likely tokens (``-1`` or ``0``: off).
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1


@dataclass
class Generation:
    """One sampled continuation.

    Attributes:
        token_ids: The sampled tokens, ending with an EOS token when the model stopped by itself.
        logprobs: Log-probability (nats) of each sampled token under the sampling distribution before
            top-k/top-p truncation (``log_softmax(logits / temperature)``; greedy: ``temperature=1``),
            the quantity TRL recomputes as ``old_per_token_logps``. Same length as ``token_ids``.
        stopped: ``True`` if the last token is an EOS token, ``False`` if the token budget ran out.
    """

    token_ids: list[int]
    logprobs: list[float]
    stopped: bool


class GenerationBackend(Protocol):
    """What the rollout engine needs from a generator."""

    def generate(
        self, prompts: Sequence[Sequence[int]], max_new_tokens: Sequence[int], params: SamplingParams
    ) -> list[Generation]:
        """Samples one continuation per prompt.

        Args:
            prompts: Token ids of each sequence so far (prompt and earlier turns), unpadded.
            max_new_tokens: Per-sequence budget of new tokens (each >= 1).
            params: Sampling parameters shared by the batch.

        Returns:
            One :class:`Generation` per prompt, in order.
        """
        ...
