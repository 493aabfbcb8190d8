"""The check that a backend's sampled log-probabilities are the policy's own, shared by the HF engines' tests."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from agentfly_train.generation import SamplingParams


def assert_logprobs_are_a_forward_pass_at_the_temperature(backend: Any, model: Any, tokenizer: Any) -> None:
    """Samples two prompts (budgets 10 and 6) at temperature 0.7 on ``backend`` and checks each turn's length, its
    stop flag and that its log-probabilities are ``log_softmax(logits / 0.7)`` of a forward pass of ``model`` over
    the prompt and the sampled tokens (to 1e-4)."""
    prompts = [tokenizer("Ava has 3 boxes")["input_ids"], tokenizer("Hi")["input_ids"]]
    torch.manual_seed(0)
    generations = backend.generate(prompts, [10, 6], SamplingParams(temperature=0.7))
    assert [len(g.token_ids) <= b for g, b in zip(generations, [10, 6], strict=True)] == [True, True]
    model.eval()
    for prompt, generation in zip(prompts, generations, strict=True):
        ids = torch.tensor([prompt + generation.token_ids])
        with torch.no_grad():
            logits = model(ids).logits[0, len(prompt) - 1 : -1]
        expected = torch.log_softmax(logits / 0.7, dim=-1).gather(1, torch.tensor(generation.token_ids)[:, None])
        assert generation.logprobs == pytest.approx(expected.squeeze(1).tolist(), abs=1e-4)
        assert generation.stopped == (generation.token_ids[-1] == tokenizer.eos_token_id)
