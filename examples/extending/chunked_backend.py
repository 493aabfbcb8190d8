"""A new generation backend: Hugging Face ``generate`` on at most 4 sequences per call, for less memory per call."""

from __future__ import annotations

from collections.abc import Sequence

from agentfly_train.generation import GENERATION_BACKENDS, Generation, HFGenerationBackend, SamplingParams

CHUNK = 4
"""Sequences per ``generate`` call."""


@GENERATION_BACKENDS.register("hf_chunked")
class ChunkedHFBackend(HFGenerationBackend):
    """HF ``generate`` on the policy itself, at most :data:`CHUNK` sequences per call."""

    largest_call = 0
    """The most sequences one ``generate`` call has had in this process (the test reads it)."""

    def generate(
        self, prompts: Sequence[Sequence[int]], max_new_tokens: Sequence[int], params: SamplingParams
    ) -> list[Generation]:
        generations: list[Generation] = []
        for start in range(0, len(prompts), CHUNK):
            chunk = prompts[start : start + CHUNK]
            type(self).largest_call = max(type(self).largest_call, len(chunk))
            generations += super().generate(chunk, max_new_tokens[start : start + CHUNK], params)
        return generations
