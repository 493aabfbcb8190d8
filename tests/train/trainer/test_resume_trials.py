"""Issue #40 item 5: runs killed with SIGKILL at random moments resume from their last complete checkpoint and end
with every step logged once, on the synchronous and the off-policy schedule (``benchmarks/resume_trials.py``; its
20 trials are in docs/benchmarks.md). Here: the script's own checks, then two of its trials."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

from agentfly_train.checkpoints import write_manifest
from tests.helpers.paths import REPO_ROOT
from tests.helpers.processes import run_cli
from tests.helpers.readme import readme_command, runs_readme_command

SCRIPT = REPO_ROOT / "benchmarks" / "resume_trials.py"
SEED = 224
"""Draws the kill moments 0.06 and 0.08 of the window for the sync trial (its first run, then its resume: a kill
during a resume) and 0.23 for the async one: early enough after a checkpoint to land before the run ends."""


def _script() -> ModuleType:
    """``benchmarks/resume_trials.py`` imported (registered first: its dataclasses look their module up)."""
    spec = importlib.util.spec_from_file_location("resume_trials", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _checkpoint(run_dir: Path, step: int, complete: bool = True) -> Path:
    """A ``checkpoint-<step>`` in ``run_dir`` holding one file, with its manifest if ``complete``."""
    path = run_dir / f"checkpoint-{step}"
    path.mkdir(parents=True)
    (path / "model.safetensors").write_bytes(b"weights")
    if complete:
        write_manifest(path)
    return path


def _log_steps(run_dir: Path, *steps: int, tail: str = "") -> None:
    """Writes ``metrics.jsonl`` with a training record per step in ``steps``, then ``tail``."""
    lines = [json.dumps({"step": step, "loss": 0.1}) + "\n" for step in steps]
    (run_dir / "metrics.jsonl").write_text("".join(lines) + tail)


def test_a_kill_is_classed_by_what_it_left_on_disk(tmp_path):
    kill_phase, run_dir = _script().kill_phase, tmp_path / "run"
    run_dir.mkdir()
    assert kill_phase(run_dir, 4, time.time(), 0) == "start-up"
    _checkpoint(run_dir, 1)
    _log_steps(run_dir, 1, 2)
    assert kill_phase(run_dir, 4, time.time() - 60, 1) == "mid-step"  # this attempt logged step 2
    assert kill_phase(run_dir, 4, time.time() + 60, 1) == "start-up"  # an earlier attempt did
    (run_dir / "checkpoint-2.tmp" / "checkpoint-2").mkdir(parents=True)
    assert kill_phase(run_dir, 4, time.time() - 60, 1) == "during a save"
    assert kill_phase(run_dir, 4, time.time() + 60, 1) == "start-up"  # an earlier attempt's, deleted as a run starts
    os.rmdir(run_dir / "checkpoint-2.tmp" / "checkpoint-2")
    os.rmdir(run_dir / "checkpoint-2.tmp")
    _checkpoint(run_dir, 4)
    assert kill_phase(run_dir, 4, time.time() - 60, 1) == "finishing"


def test_a_run_is_checked_for_each_way_a_crash_could_spoil_it(tmp_path):
    run_dir = tmp_path / "run"
    _checkpoint(run_dir, 1)
    _checkpoint(run_dir, 2, complete=False)
    (run_dir / "checkpoint-3.tmp").mkdir()
    _log_steps(run_dir, 1, 2, 2, tail='{"step": 3, "lo')
    (run_dir / "result.json").write_text(json.dumps({"steps": 2, "resumed_from": None}))
    metrics = run_dir / "metrics.jsonl"
    assert _script().run_problems(run_dir, 3, 1) == [
        "result.json says 2 steps, not 3",
        f"resumed from None, not the newest complete checkpoint {run_dir / 'checkpoint-1'}",
        f"{metrics} line 4 is not a JSON object (the last line: still being written, or the run was killed "
        "mid-write); skipped",
        "metrics.jsonl logs the steps [1, 2, 2], not 1..3 once each",
        "the newest checkpoint is checkpoint-2, not 3",
        "checkpoint-2: no manifest.json (killed while saving, or written before checkpoints had manifests)",
        "final/ has no model.safetensors",
        "left over: checkpoint-3.tmp",
    ]


@pytest.mark.slow  # about 2 minutes on 2 idle cores: two uninterrupted runs, then five runs of two trials
@runs_readme_command("python benchmarks/resume_trials.py --json benchmarks/results/resume_trials.json")
def test_killed_runs_resume_on_both_schedules(readme, tmp_path):
    result_file = tmp_path / "trials.json"
    trials = ["--trials", "2", "--window", "after-checkpoint", "--seed", str(SEED)]
    command = readme_command(readme, {"--json": str(result_file)}, trials)
    done = run_cli(command.argv, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    figures = json.loads(result_file.read_text())
    assert [trial["schedule"] for trial in figures["trials"]] == ["sync", "async"]
    assert figures["passed"] == 2 and not any(reference["problems"] for reference in figures["references"])
    kills = [attempt for trial in figures["trials"] for attempt in trial["attempts"] if attempt["killed_at_s"]]
    assert kills and all(kill["checkpoint"] >= 1 for kill in kills)  # the resume path, not a fresh start
    assert "2 of 2 trials passed" in done.stdout
