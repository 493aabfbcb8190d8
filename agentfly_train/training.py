"""What a prepared run does: RL (resumed from its checkpoint, or finishing one killed after its last step), validation
before and after, ``final/``, then ``result.json`` and the report (:func:`train_prepared`)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentfly_train.errors import RunInterrupted
from agentfly_train.run_dir import FINAL_DIR, RESULT_FILE, RunResult

if TYPE_CHECKING:
    from agentfly_train.build import PreparedRun


def train_prepared(prepared: PreparedRun, show_progress: bool) -> RunResult:
    """Trains and validates the prepared run, then writes its ``result.json`` and report."""
    from accelerate import PartialState

    trainer = prepared.trainer
    try:
        _train_and_validate(prepared, show_progress)
    except KeyboardInterrupt:
        step = trainer.state.global_step + 1  # after the last step: validating or saving final/
        raise RunInterrupted(min(step, trainer.state.max_steps or step)) from None
    finally:
        trainer.close()
    run_dir = Path(prepared.settings.default_local_dir)
    (run_dir / RESULT_FILE).write_text(json.dumps(asdict(prepared.result), indent=2))
    if PartialState().is_main_process:
        _write_report(run_dir)
    return prepared.result


def _train_and_validate(prepared: PreparedRun, show_progress: bool) -> None:
    """RL (from the checkpoint if resuming), validation before (by the callback) and after, and ``final/``; fills
    the run's result."""
    from agentfly_train.callbacks import AgentCallback

    trainer, settings, checkpoint, result = prepared.trainer, prepared.settings, prepared.checkpoint, prepared.result
    saved = _trainer_state(checkpoint) if checkpoint is not None else None
    callback = AgentCallback(
        trainer,
        settings.test_freq,
        settings.val_before_train and bool(trainer.val_rows),
        show_progress,
        settings.max_ckpt_to_keep,
    )
    callback.replace_console_callbacks()
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
        result.val_after = trainer.validate(progress=show_progress)
        if trainer.accelerator.is_main_process:
            callback.metrics.append(trainer.state.global_step, {"final": True, **result.val_after})
    if trainer.is_fsdp_enabled:  # final/ holds a whole model, whatever the checkpoints' sharding
        trainer.accelerator.state.fsdp_plugin.set_state_dict_type("FULL_STATE_DICT")
    final = Path(settings.default_local_dir) / FINAL_DIR
    trainer.save_model(str(final))
    images = trainer.agent.codec.images
    if images is not None and trainer.accelerator.is_main_process:  # eval of final/ loads it as a VLM
        images.image_processor.save_pretrained(final)


def _write_report(run_dir: Path) -> None:
    """``<run dir>/report.html``; a failure to build it is reported in one line, never fails the finished run."""
    from agentfly_train.report import build_report

    try:
        build_report(run_dir)
    except Exception as error:  # the run's results are saved; a report bug must not turn it into a failure
        print(f"warning: could not write {run_dir / 'report.html'}: {error}")


def _trainer_state(checkpoint: str) -> Any:
    from transformers.trainer import TRAINER_STATE_NAME
    from transformers.trainer_callback import TrainerState

    return TrainerState.load_from_json(str(Path(checkpoint) / TRAINER_STATE_NAME))


def _val_metrics(record: dict[str, Any]) -> dict[str, float]:
    return {key: value for key, value in record.items() if key.startswith("val/")}
