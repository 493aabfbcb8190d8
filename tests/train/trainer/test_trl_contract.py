"""The TRL 1.16 behaviour ``AgentGRPOTrainer`` relies on; a failure here means TRL changed under us.

Each test runs the stock ``GRPOTrainer`` method on a tiny model and a scripted ``rollout_func`` (fixed token ids,
an ``env_mask`` and an extra field per sample) and checks what it does (our trainer on real batches:
``test_trainer.py``).
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

import pytest
import torch
import trl
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer

from agentfly_train.tiny_model import build_tiny_checkpoint
from agentfly_train.trainer import AgentGRPOTrainer
from agentfly_train.trl_args import UNSUPPORTED_TRL_OPTIONS

COMPLETIONS = ([11, 12, 13], [14, 15], [16, 17, 18, 19], [20])
"""The scripted completion of sample i is ``COMPLETIONS[i % 4]`` (token ids)."""
ENV_MASKS = ([1, 0, 1], [1, 1], [1, 0, 0, 1], [1])
"""Its ``env_mask`` (1 = sampled, 0 = tool text)."""


class ScriptedRollouts:
    """A ``rollout_func`` that returns :data:`COMPLETIONS` with their masks, the sample's index as the extra field
    ``sample`` and log-probabilities -1; it counts its calls."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.calls = 0

    def __call__(self, prompts: list[str], trainer: GRPOTrainer) -> dict[str, list]:
        self.calls += 1
        indices = range(len(prompts))
        return {
            "prompt_ids": [self.tokenizer(prompt)["input_ids"] for prompt in prompts],
            "completion_ids": [COMPLETIONS[i % 4] for i in indices],
            "logprobs": [[-1.0] * len(COMPLETIONS[i % 4]) for i in indices],
            "env_mask": [ENV_MASKS[i % 4] for i in indices],
            "sample": list(indices),
        }


def sample_parity(completions: list, sample: list[int], **kwargs: Any) -> list[float]:
    """Reward 1 for odd samples (read from the rollout's extra field), 0 for even ones."""
    return [float(i % 2) for i in sample]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    return build_tiny_checkpoint(tmp_path_factory.mktemp("tiny"), hidden_size=32)


def make_trainer(
    tiny_dir: Path, output_dir: Path, model: Any = None, trainer_class: type[GRPOTrainer] = GRPOTrainer, **options: Any
) -> GRPOTrainer:
    """A stock ``GRPOTrainer`` (or ``trainer_class``) on the tiny model with :class:`ScriptedRollouts`, 4 prompts in
    groups of 2; ``options`` are ``GRPOConfig`` fields."""
    tokenizer = AutoTokenizer.from_pretrained(tiny_dir)
    settings = {"per_device_train_batch_size": 4, "num_generations": 2, "max_completion_length": 8,
                "save_strategy": "no", **options}  # fmt: skip
    args = GRPOConfig(output_dir=str(output_dir), report_to=[], use_cpu=True, bf16=False, seed=0,
                      gradient_checkpointing=False, disable_tqdm=True, **settings)  # fmt: skip
    trainer = trainer_class(
        model=model if model is not None else AutoModelForCausalLM.from_pretrained(tiny_dir),
        args=args,
        reward_funcs=sample_parity,
        train_dataset=Dataset.from_list([{"prompt": f"question {i}"} for i in range(4)]),
        processing_class=tokenizer,
        rollout_func=ScriptedRollouts(tokenizer),
    )
    trainer.current_gradient_accumulation_steps = args.gradient_accumulation_steps  # train() sets it; tests call in
    return trainer


def generation_batch(size: int) -> list[dict[str, str]]:
    """``size`` samples, two per prompt, as TRL's sampler hands them out."""
    return [{"prompt": f"question {i // 2}"} for i in range(size)]


def test_trl_is_the_pinned_minor_version():
    assert trl.__version__.startswith("1.16.")


def test_the_methods_we_override_keep_their_signatures():
    expected = {
        "_generate_and_score_completions": ["self", "inputs"],
        "_compute_loss": ["self", "model", "inputs"],
        "_save_checkpoint": ["self", "model", "trial"],
        "_load_optimizer_and_scheduler": ["self", "checkpoint"],
    }
    for name, parameters in expected.items():
        assert list(inspect.signature(getattr(GRPOTrainer, name)).parameters) == parameters, name
        assert getattr(AgentGRPOTrainer, name) is not getattr(GRPOTrainer, name), name


def test_our_eos_ids_are_the_ones_trl_stops_completions_at(tiny_dir, tmp_path):
    # TRL cuts completions at its eos_token_ids; our backends stop turns at eos_token_ids(model, tokenizer)
    from agentfly_train.generation import eos_token_ids

    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    model.generation_config.eos_token_id = [model.generation_config.eos_token_id, 5]  # as Qwen/Llama list several
    trainer = make_trainer(tiny_dir, tmp_path, model=model)
    ours = eos_token_ids(trainer.model, trainer.processing_class)
    assert sorted(trainer.eos_token_ids) == ours and 5 in ours and len(ours) == 2


def test_the_batch_dict_carries_the_keys_we_read_and_replace(tiny_dir, tmp_path):
    trainer = make_trainer(tiny_dir, tmp_path)
    trainer.model.train()
    output = trainer._generate_and_score_completions(generation_batch(4))
    assert {"prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "advantages", "tool_mask"} <= set(output)
    for i, (ids, mask) in enumerate(zip(COMPLETIONS, ENV_MASKS, strict=True)):
        assert output["completion_ids"][i, : len(ids)].tolist() == list(ids)
        assert output["completion_mask"][i].sum() == len(ids)
        assert output["tool_mask"][i, : len(mask)].tolist() == mask  # rollout_func's env_mask became the tool_mask
    # the extra field reached the reward function per sample: rewards 0, 1 in each group of 2
    assert output["advantages"].shape == (4,)
    assert (output["advantages"][0::2] < 0).all() and (output["advantages"][1::2] > 0).all()
    torch.testing.assert_close(output["advantages"][0::2], -output["advantages"][1::2])


def test_old_and_reference_logps_are_computed_when_we_expect(tiny_dir, tmp_path):
    # one optimiser step per generation batch, beta = 0: TRL computes neither (we do, or take the loss's forward)
    output = make_trainer(tiny_dir, tmp_path)._generate_and_score_completions(generation_batch(4))
    assert "old_per_token_logps" not in output and "ref_per_token_logps" not in output
    # two iterations per batch and beta != 0: both, from a reference built from the path in the policy's config
    # (not from the policy object: build.pin_reference points that path at the policy as RL starts)
    policy = AutoModelForCausalLM.from_pretrained(tiny_dir)
    saved = policy.get_input_embeddings().weight.detach().clone()
    with torch.no_grad():
        policy.get_input_embeddings().weight.add_(1.0)
    trainer = make_trainer(tiny_dir, tmp_path, model=policy, num_iterations=2, beta=0.04)
    torch.testing.assert_close(trainer.ref_model.get_input_embeddings().weight, saved)
    output = trainer._generate_and_score_completions(generation_batch(4))
    assert output["old_per_token_logps"].shape == output["ref_per_token_logps"].shape == output["completion_ids"].shape


def test_loss_accepts_token_level_advantages_and_is_not_rescaled_by_transformers(tiny_dir, tmp_path):
    trainer = make_trainer(tiny_dir, tmp_path)
    trainer.model.train()
    inputs = trainer._generate_and_score_completions(generation_batch(4))
    per_sequence = trainer._compute_loss(trainer.model, inputs)
    tokens = inputs["advantages"][:, None].expand_as(inputs["completion_mask"]).clone()  # (B, T)
    torch.testing.assert_close(trainer._compute_loss(trainer.model, {**inputs, "advantages": tokens}), per_sequence)
    tokens[0, 0] = 0.0  # a token-level change is taken as it is
    assert trainer._compute_loss(trainer.model, {**inputs, "advantages": tokens}) != per_sequence
    # transformers does not divide our loss by the accumulation steps: it is already the step's share
    assert GRPOTrainer.loss_is_scaled_for_ga is True


def test_generation_batches_are_buffered_per_micro_step(tiny_dir, tmp_path):
    trainer = make_trainer(tiny_dir, tmp_path, per_device_train_batch_size=2, gradient_accumulation_steps=2)
    batch = generation_batch(4)  # per_device_train_batch_size x steps_per_generation (= the accumulation steps)
    trainer.training_step(trainer.model, batch, None)
    assert trainer.rollout_func.calls == 1 and trainer._step == 1  # the micro-step counter moves after the loss
    halves = trainer._buffered_inputs
    assert [len(half["completion_ids"]) for half in halves] == [2, 2]
    trainer.training_step(trainer.model, batch, None)  # the second half: no new generation
    assert trainer.rollout_func.calls == 1 and trainer._buffered_inputs is halves
    trainer.training_step(trainer.model, batch, None)  # the next optimiser step generates again
    assert trainer.rollout_func.calls == 2 and trainer._step == 3
    parameters = inspect.signature(GRPOTrainer._get_per_token_logps_and_entropies).parameters
    assert {"batch_size", "compute_entropy", "compute_aux_loss"} <= set(parameters)


def test_options_acting_in_trls_loss_default_to_what_we_accept():
    args = GRPOConfig(output_dir="unused", report_to=[], use_cpu=True)
    assert {name: getattr(args, name) for name in UNSUPPORTED_TRL_OPTIONS} == UNSUPPORTED_TRL_OPTIONS


class ResumeSpy(GRPOTrainer):
    """Records the checkpoints ``_load_optimizer_and_scheduler`` is called with."""

    resumed_from: list[str | None]

    def _load_optimizer_and_scheduler(self, checkpoint: str | None) -> None:
        self.resumed_from = [*getattr(self, "resumed_from", []), checkpoint]
        super()._load_optimizer_and_scheduler(checkpoint)


def test_checkpoint_hooks_write_into_the_checkpoint_directory_and_run_on_resume(tiny_dir, tmp_path):
    trainer = make_trainer(tiny_dir, tmp_path, max_steps=1, save_strategy="steps", save_steps=1)
    trainer.train()
    checkpoint = tmp_path / "checkpoint-1"
    files = [path for path in checkpoint.rglob("*") if path.is_file()]
    assert {"trainer_state.json", "optimizer.pt", "rng_state.pth"} <= {path.name for path in files}
    # trainer_state.json, which marks a complete checkpoint, is written after everything else
    newest = max(files, key=lambda path: path.stat().st_mtime_ns)
    assert newest.stat().st_mtime_ns == (checkpoint / "trainer_state.json").stat().st_mtime_ns
    assert json.loads((checkpoint / "trainer_state.json").read_text())["global_step"] == 1
    resumed = make_trainer(tiny_dir, tmp_path, trainer_class=ResumeSpy, max_steps=2)
    resumed.train(resume_from_checkpoint=str(checkpoint))
    assert resumed.resumed_from == [str(checkpoint)] and resumed.state.global_step == 2
