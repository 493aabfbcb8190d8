"""Checkpoint manifests, resume selection and pruning on checkpoint directories laid out as the trainer writes them
(the training runs that write, break and resume real ones are in ``trainer/test_resume.py``)."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from agentfly_train.checkpoints import (
    checkpoint_problem,
    prune,
    publish,
    remove_leftovers,
    resume_checkpoint,
    staging_dir,
)
from agentfly_train.config import ConfigError
from tests.helpers.runs import quickstart_config

MODEL_BYTES = 4096


def _checkpoint(run_dir: Path, step: int) -> Path:
    """``run_dir/checkpoint-<step>`` published as the trainer does: written into its staging directory, then
    given its manifest and renamed."""
    staged = staging_dir(run_dir, step) / f"checkpoint-{step}"
    (staged / "critic").mkdir(parents=True)
    (staged / "model.safetensors").write_bytes(bytes(range(256)) * (MODEL_BYTES // 256))
    (staged / "trainer_state.json").write_text(f'{{"global_step": {step}, "log_history": []}}')
    (staged / "critic" / "optimizer.pt").write_bytes(b"critic state")
    publish(staged, run_dir / f"checkpoint-{step}")
    return run_dir / f"checkpoint-{step}"


def _resume(run_dir: Path, *overrides: str) -> tuple[str | None, str | None]:
    return resume_checkpoint(quickstart_config([f"trainer.default_local_dir={run_dir}", *overrides]).trainer)


def _flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[100] ^= 0xFF
    path.write_bytes(bytes(data))


BREAKAGES = {
    "a zero-byte model.safetensors": (
        lambda ckpt: (ckpt / "model.safetensors").write_bytes(b""),
        f"model.safetensors is 0 bytes, manifest says {MODEL_BYTES:,}",
    ),
    "a truncated trainer_state.json": (
        lambda ckpt: (ckpt / "trainer_state.json").write_text('{"global_step": 6, "log_hi'),
        "trainer_state.json is 26 bytes, manifest says 37",
    ),
    "a missing manifest": (
        lambda ckpt: (ckpt / "manifest.json").unlink(),
        "no manifest.json (killed while saving, or written before checkpoints had manifests)",
    ),
    "a missing file": (lambda ckpt: (ckpt / "critic" / "optimizer.pt").unlink(), "critic/optimizer.pt is missing"),
    "a corrupted byte": (
        lambda ckpt: _flip_a_byte(ckpt / "model.safetensors"),
        "model.safetensors does not match its checksum in manifest.json",
    ),
    "an unreadable manifest": (lambda ckpt: (ckpt / "manifest.json").write_text("{"), "manifest.json is unreadable"),
}


@pytest.mark.parametrize("breakage", BREAKAGES)
def test_auto_resume_takes_the_newest_complete_checkpoint_and_says_what_it_skipped(tmp_path, breakage):
    damage, problem = BREAKAGES[breakage]
    for step in (2, 4, 6):
        _checkpoint(tmp_path, step)
    damage(tmp_path / "checkpoint-6")
    assert checkpoint_problem(tmp_path / "checkpoint-6") == problem
    checkpoint, note = _resume(tmp_path)
    assert checkpoint == str(tmp_path / "checkpoint-4")
    assert note == f"resuming from checkpoint-4 (skipped checkpoint-6: {problem})"


def test_auto_resume_ignores_a_checkpoint_a_kill_left_in_its_staging_directory(tmp_path):
    _checkpoint(tmp_path, 2)
    _checkpoint(tmp_path, 10)  # 10 > 2 numerically, not as text
    leftover = staging_dir(tmp_path, 11) / "checkpoint-11"
    leftover.mkdir(parents=True)
    (leftover / "trainer_state.json").write_text("{}")
    (tmp_path / "checkpoint-final").mkdir()
    assert _resume(tmp_path) == (str(tmp_path / "checkpoint-10"), "resuming from checkpoint-10")
    assert _resume(tmp_path / "new") == (None, None)
    assert _resume(tmp_path, "trainer.resume_mode=disable") == (None, None)


def test_a_run_with_no_complete_checkpoint_starts_over_and_says_why(tmp_path):
    (tmp_path / "checkpoint-3").mkdir()
    assert _resume(tmp_path) == (
        None,
        "no complete checkpoint, starting from step 0 (skipped checkpoint-3: no manifest.json (killed while saving, "
        "or written before checkpoints had manifests))",
    )


def test_resume_path_to_a_broken_checkpoint_is_a_config_error_naming_the_problem(tmp_path):
    good = _checkpoint(tmp_path, 4)
    assert _resume(tmp_path, "trainer.resume_mode=resume_path", f"trainer.resume_from_path={good}") == (
        str(good),
        f"resuming from {good}",
    )
    (_checkpoint(tmp_path, 6) / "model.safetensors").write_bytes(b"")
    with pytest.raises(ConfigError, match=r"is not a complete checkpoint \(model.safetensors is 0 bytes, manifest"):
        _resume(tmp_path, "trainer.resume_mode=resume_path", f"trainer.resume_from_path={tmp_path / 'checkpoint-6'}")


def test_publish_replaces_an_incomplete_checkpoint_of_the_same_step(tmp_path):
    (tmp_path / "checkpoint-3").mkdir()
    (tmp_path / "checkpoint-3" / "model.safetensors").write_bytes(b"")
    checkpoint = _checkpoint(tmp_path, 3)
    assert checkpoint_problem(checkpoint) is None
    assert sorted(path.name for path in tmp_path.iterdir()) == ["checkpoint-3"]  # no staging directory left


def test_prune_keeps_the_newest_complete_checkpoints(tmp_path):
    for step in (1, 2, 3, 4):
        _checkpoint(tmp_path, step)
    (tmp_path / "checkpoint-0").mkdir()  # incomplete and older than every kept one
    (tmp_path / "checkpoint-5").mkdir()  # incomplete, newer: a later save of step 5 replaces it
    prune(tmp_path, None)
    assert len(list(tmp_path.iterdir())) == 6
    prune(tmp_path, 2)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["checkpoint-3", "checkpoint-4", "checkpoint-5"]


@pytest.mark.parametrize("value", [0, -1])
def test_max_ckpt_to_keep_must_be_positive(value):
    with pytest.raises(ConfigError, match=rf"trainer.max_ckpt_to_keep must be >= 1 .*got {value}"):
        quickstart_config([f"trainer.max_ckpt_to_keep={value}"])
    assert quickstart_config(["trainer.max_ckpt_to_keep=1"]).trainer.max_ckpt_to_keep == 1


def test_the_trainer_hooks_the_atomic_save_relies_on_keep_their_signatures():
    """``AgentGRPOTrainer`` points ``_get_output_dir`` at the staging directory while the ``Trainer`` saves, and
    filters the tied weights out of ``_issue_warnings_after_load``'s warning."""
    from transformers import Trainer

    assert list(inspect.signature(Trainer._get_output_dir).parameters) == ["self", "trial"]
    assert list(inspect.signature(Trainer._issue_warnings_after_load).parameters) == ["self", "load_result"]
    assert "self._get_output_dir(trial=trial)" in inspect.getsource(Trainer._save_checkpoint)


def test_the_ctrl_c_line_says_what_rerunning_the_same_command_does(tmp_path):
    from agentfly_train.__main__ import _interrupted

    argv = ["--config", "quickstart", f"trainer.default_local_dir={tmp_path}", "agent.env_kwargs={level: single}"]
    config = quickstart_config(argv[2:])
    rerun = (
        f"rerun `python -m agentfly_train --config quickstart trainer.default_local_dir={tmp_path} "
        "'agent.env_kwargs={level: single}'`"
    )
    assert _interrupted(config, argv, 1) == f"interrupted at step 1; {rerun} to start over"
    _checkpoint(tmp_path, 2)
    (tmp_path / "checkpoint-3").mkdir()  # incomplete
    assert _interrupted(config, argv, 4) == f"interrupted at step 4; {rerun} to resume from checkpoint-2"


def test_a_run_starts_by_deleting_the_files_a_kill_left_half_written(tmp_path):
    """The report, metrics.jsonl and sample screenshots are written beside their names and renamed over them; a
    kill between the two leaves the ``.tmp`` file, which the next start deletes (and nothing else)."""
    leftovers = [".report.html.17009.tmp", "metrics.jsonl.tmp", "train_samples/.3f2a.123.tmp"]
    kept = ["report.html", "metrics.jsonl", "train_samples/step_000001.jsonl", "checkpoint-2/model.safetensors"]
    for name in [*leftovers, *kept]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    remove_leftovers(tmp_path)
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()) == sorted(kept)
