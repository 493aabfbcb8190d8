"""A training run end to end: config -> model, envs, data -> (SFT warm start) -> RL -> validation."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from agentfly_train.build import RunData, make_codec, make_trainer, run_data
from agentfly_train.config.errors import ConfigError
from agentfly_train.config.schema import TrainConfig
from agentfly_train.config.validation import ignored_settings
from agentfly_train.generation.base import backend_of
from agentfly_train.run_dir import FINAL_DIR, REFERENCE_DIR, RESULT_FILE, RUN_CONFIG_FILE, RunResult
from agentfly_train.tiny_policies import TINY_POLICIES


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C during training (or the validation and saving after it).

    Args:
        step: The (optimiser) step under way, 1-based.
    """

    def __init__(self, step: int) -> None:
        super().__init__(step)
        self.step = step


def resume_checkpoint(config: TrainConfig) -> tuple[str | None, str | None]:
    """The checkpoint to resume from, per ``trainer.resume_mode`` (``auto``: the newest complete checkpoint in
    ``trainer.default_local_dir``, :func:`~agentfly_train.checkpoints.newest_complete`), and the line that says
    which one it is and which newer ones were skipped, and why (``None``: a fresh run, nothing skipped).

    Raises:
        ConfigError: ``resume_path`` names a directory that is not a complete checkpoint.
    """
    from agentfly_train.checkpoints import checkpoint_problem, newest_complete, resume_note

    trainer = config.trainer
    if trainer.resume_mode == "disable":
        return None, None
    if trainer.resume_mode == "resume_path":
        path = Path(trainer.resume_from_path)
        problem = checkpoint_problem(path)
        if problem is not None:
            raise ConfigError(
                f"trainer.resume_from_path={str(path)!r} is not a complete checkpoint ({problem}): point it at a "
                "checkpoint-N directory whose manifest.json checks, or set trainer.resume_mode=auto to resume from "
                "the newest complete checkpoint in trainer.default_local_dir"
            )
        return str(path), f"resuming from {path}"
    chosen, skipped = newest_complete(trainer.default_local_dir)
    return (str(chosen) if chosen is not None else None), resume_note(chosen, skipped)


def _check_world(config: TrainConfig, world_size: int, device: str) -> None:
    expected = config.trainer.nnodes * max(config.trainer.n_gpus_per_node, 1)
    if device == "cuda" and expected != world_size:
        raise ConfigError(
            f"trainer.nnodes * trainer.n_gpus_per_node = {expected} but the launch has {world_size} processes; "
            "launch with accelerate launch --num_processes / --num_machines to match"
        )


def run(config: TrainConfig, show_progress: bool = True) -> RunResult:
    """Runs the configured job: load, optionally warm-start, validate, train with RL, validate.

    Args:
        config: A validated configuration (:func:`~agentfly_train.config.load_config`).
        show_progress: Draw the console progress bar.

    Returns:
        The :class:`RunResult` (also saved as ``result.json`` in the run directory).
    """
    from agentfly_train.config.loading import load_user_code

    load_user_code(config)  # loaded already where the configuration was read; not on a Ray Train worker
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # tools may fork after the tokenizer ran
    data = run_data(config)  # missing or malformed data fails here, in seconds: before transformers and TRL load
    try:
        from accelerate import PartialState
        from transformers import set_seed

        from agentfly_train.checkpoints import remove_leftovers
        from agentfly_train.devices import training_device
        from agentfly_train.models import add_stop_tokens, load_policy
        from agentfly_train.trl_args import grpo_config

        _quiet_libraries()
        device = training_device(config.trainer.device)
        world_size = PartialState(cpu=device == "cpu").num_processes
        _check_world(config, world_size, device)
        if PartialState().is_main_process:
            for note in ignored_settings(config, world_size):
                print(f"note: {note}", file=sys.stderr)
        args = grpo_config(config, world_size, device)  # fails on bad sizes before any model is loaded
        checkpoint, resume_line = resume_checkpoint(config)
        if PartialState().is_main_process:
            remove_leftovers(config.trainer.default_local_dir)
            if resume_line is not None:
                print(resume_line, file=sys.stderr)
        set_seed(config.trainer.seed)
        run_dir = Path(config.trainer.default_local_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / RUN_CONFIG_FILE).write_text(json.dumps(asdict(config), indent=2))

        backend_of(config).preflight(config)
        model, tokenizer = load_policy(config)
        codec = make_codec(config, tokenizer, data.env, data.train[0])
        add_stop_tokens(model, codec.stop_token_ids)
        if codec.note and PartialState().is_main_process:
            print(f"note: {codec.note}", file=sys.stderr)
        result = RunResult(run_dir=str(run_dir))
        if config.sft.enable and checkpoint is None:
            model, result.sft_loss = _warm_start(
                config, model, tokenizer, codec, data, use_cpu=device == "cpu", bf16=args.bf16
            )
    finally:
        data.env.close()  # the rollouts make their own envs; a web env's browser goes with this one, also on error
    if args.beta and config.actor_rollout_ref.model.lora_rank == 0:
        pin_reference(config, model, run_dir)

    trainer = make_trainer(config, args, model, tokenizer, codec, data.train, data.val, world_size)
    try:
        _train_and_validate(config, trainer, checkpoint, show_progress, result)
    except KeyboardInterrupt:
        step = trainer.state.global_step + 1  # after the last step: validating or saving final/
        raise RunInterrupted(min(step, trainer.state.max_steps or step)) from None
    finally:
        trainer.close()
    (run_dir / RESULT_FILE).write_text(json.dumps(asdict(result), indent=2))
    if PartialState().is_main_process:
        _write_report(run_dir)
    return result


def _warm_start(
    config: TrainConfig, model: Any, tokenizer: Any, codec: Any, data: RunData, use_cpu: bool, bf16: bool
) -> tuple[Any, float]:
    """The SFT warm start on the demonstrations of the first ``sft.num_demos`` training rows: (model, mean loss)."""
    from agentfly_train.sft import warm_start_on_demonstrations

    with tempfile.TemporaryDirectory() as scratch:
        return warm_start_on_demonstrations(
            model,
            tokenizer,
            data.env,
            codec,
            data.train[: config.sft.num_demos],
            config.sft,
            output_dir=scratch,
            use_cpu=use_cpu,
            seed=config.trainer.seed,
            bf16=bf16,
            max_images=config.agent.max_images,
        )


def _train_and_validate(
    config: TrainConfig, trainer: Any, checkpoint: str | None, show_progress: bool, result: RunResult
) -> None:
    """RL (from ``checkpoint`` if resuming), validation before (by the callback) and after, and ``final/``; fills
    ``result``."""
    from agentfly_train.callbacks import AgentCallback

    callback = AgentCallback(
        trainer,
        config.trainer.test_freq,
        config.trainer.val_before_train and bool(trainer.val_rows),
        show_progress,
        config.trainer.max_ckpt_to_keep,
    )
    _replace_console_callbacks(trainer, callback)
    saved = _trainer_state(checkpoint) if checkpoint is not None else None
    if saved is not None and saved.global_step >= trainer.args.max_steps:
        # Killed after its last step: finish, train no more (Trainer.train() would take one more step).
        trainer.finish_from_checkpoint(checkpoint, saved)
        callback.metrics.keep(lambda record: not record.get("final"))
    else:
        trainer.train(resume_from_checkpoint=checkpoint)
    result.resumed_from = checkpoint
    result.steps = trainer.state.global_step
    before = [r for r in callback.metrics.read() if r["step"] == 0 and "val/accuracy" in r]
    result.val_before = _val_metrics(before[0]) if before else {}
    if trainer.val_rows:
        result.val_after = trainer.validate()
        if trainer.accelerator.is_main_process:
            callback.metrics.append(trainer.state.global_step, {"final": True, **result.val_after})
    if trainer.is_fsdp_enabled:  # final/ holds a whole model, whatever the checkpoints' sharding
        trainer.accelerator.state.fsdp_plugin.set_state_dict_type("FULL_STATE_DICT")
    final = Path(config.trainer.default_local_dir) / FINAL_DIR
    trainer.save_model(str(final))
    images = trainer.agent.codec.images
    if images is not None and trainer.accelerator.is_main_process:  # eval of final/ loads it as a VLM
        images.image_processor.save_pretrained(final)


def _quiet_libraries() -> None:
    """No per-file progress bars from transformers (loading and saving shards) and datasets: the run's own
    progress bar and log lines are the output."""
    import datasets
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    datasets.disable_progress_bars()


def _write_report(run_dir: Path) -> None:
    """``<run dir>/report.html``; a failure to build it is reported in one line, never fails the finished run."""
    from agentfly_train.report import build_report

    try:
        build_report(run_dir)
    except Exception as error:  # the run's results are saved; a report bug must not turn it into a failure
        print(f"warning: could not write {run_dir / 'report.html'}: {error}")


def pin_reference(config: TrainConfig, model: Any, run_dir: Path) -> None:
    """Makes the reference model of the KL terms the policy as RL starts.

    TRL builds the reference from the path in the policy's config, which holds the weights before the SFT
    warm start (and no path at all for ``agentfly:tiny``). When either applies, the policy is saved once to
    ``<run dir>/reference`` (a resumed run keeps the first run's) and its config points there. With LoRA,
    TRL's reference is the base model with the adapter off, which needs no copy.
    """
    from accelerate import PartialState

    path = run_dir / REFERENCE_DIR
    if not (config.sft.enable or config.model_path in TINY_POLICIES or path.is_dir()):
        return
    state = PartialState()
    if state.is_main_process and not (path / "config.json").is_file():
        model.save_pretrained(path)
    state.wait_for_everyone()
    model.config._name_or_path = str(path)


def _trainer_state(checkpoint: str) -> Any:
    from transformers.trainer import TRAINER_STATE_NAME
    from transformers.trainer_callback import TrainerState

    return TrainerState.load_from_json(str(Path(checkpoint) / TRAINER_STATE_NAME))


def _val_metrics(record: dict[str, Any]) -> dict[str, float]:
    return {key: value for key, value in record.items() if key.startswith("val/")}


def _replace_console_callbacks(trainer: Any, callback: Any) -> None:
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    for console in (PrinterCallback, ProgressCallback):
        trainer.remove_callback(console)
    trainer.add_callback(callback)
