"""The TRL 1.16 behaviour ``AgentGRPOTrainer`` relies on; a failure here means TRL changed under us.

Checked on TRL's source and defaults, without running a model (the behaviour on real batches is in
``test_trainer.py``).
"""

from __future__ import annotations

import inspect

import trl
from transformers import Trainer
from trl import GRPOConfig, GRPOTrainer

from agentfly_train.trainer import UNSUPPORTED_TRL_OPTIONS, AgentGRPOTrainer


def _source(function) -> str:
    return inspect.getsource(function)


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


def test_the_batch_dict_carries_the_keys_we_read_and_replace():
    source = _source(GRPOTrainer._generate_and_score_completions)
    for key in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "advantages"):
        assert f'"{key}": {key}' in source, key
    for key in ("old_per_token_logps", "ref_per_token_logps", "tool_mask"):
        assert f'output["{key}"] = {key}' in source, key
    # rollout_func's env_mask becomes the tool_mask, and TRL's extra fields reach the reward functions' kwargs.
    assert 'tool_mask = extra_fields.pop("env_mask", None)' in _source(GRPOTrainer._generate)
    assert "inp[key] = values[i]" in source
    # TRL's advantages are gathered over processes and sliced per process in this order; we gather likewise.
    assert "self.accelerator.process_index * len(prompts)" in source


def test_old_and_reference_logps_are_computed_when_we_expect():
    source = _source(GRPOTrainer._generate_and_score_completions)
    # old log-probs only when a generation batch feeds more than one optimiser step (otherwise we compute them,
    # or take them from the loss's forward)
    assert "if self.args.gradient_accumulation_steps % generate_every != 0 or (" in source
    # reference log-probs iff beta != 0, which is how trl_args switches the reference model on
    assert "if self.beta != 0.0:\n                if self.ref_model is not None:" in source
    init = _source(GRPOTrainer.__init__)
    assert "create_model_from_path(get_config_model_id(self.model.config)" in init  # train.pin_reference


def test_loss_accepts_token_level_advantages_and_is_not_rescaled_by_transformers():
    assert "if advantages.dim() == 1:" in _source(GRPOTrainer._compute_loss)
    # transformers does not divide our loss by the accumulation steps: it is already the step's share
    assert GRPOTrainer.loss_is_scaled_for_ga is True


def test_generation_batches_are_buffered_per_micro_step():
    source = _source(GRPOTrainer._prepare_inputs)
    assert "generate_every = self.args.steps_per_generation * self.num_iterations" in source
    assert "split_tensor_dict(generation_batch, self.args.steps_per_generation)" in source
    assert "self._buffered_inputs[self._step % self.args.steps_per_generation]" in source
    assert "self._step += 1" in _source(GRPOTrainer.training_step)  # after the micro-step's loss
    parameters = inspect.signature(GRPOTrainer._get_per_token_logps_and_entropies).parameters
    assert {"batch_size", "compute_entropy", "compute_aux_loss"} <= set(parameters)


def test_options_acting_in_trls_loss_default_to_what_we_accept():
    args = GRPOConfig(output_dir="unused", report_to=[], use_cpu=True)
    assert {name: getattr(args, name) for name in UNSUPPORTED_TRL_OPTIONS} == UNSUPPORTED_TRL_OPTIONS


def test_checkpoint_hooks_write_into_the_checkpoint_directory_and_run_on_resume():
    save = _source(Trainer._save_checkpoint)
    assert 'checkpoint_folder = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"' in save
    assert "output_dir = os.path.join(run_dir, checkpoint_folder)" in save
    # trainer_state.json, which marks a complete checkpoint, is written after everything else
    assert save.index("self._save_rng_state(output_dir)") < save.index("TRAINER_STATE_NAME")
    assert "self._load_optimizer_and_scheduler(resume_from_checkpoint)" in _source(Trainer._prepare_for_training)
