"""A run directory holds one run: a run locks it, a second run on it stops in one line, and a run with another
configuration stops too unless ``trainer.overwrite=true`` deletes the run there (agentfly_train/run_dir.py,
``prepare_run``)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from agentfly_train.__main__ import main
from agentfly_train.config import config_keys
from agentfly_train.run_claim import (
    RESUMABLE_KEYS,
    RunDirBusyError,
    clear_run_dir,
    config_differences,
    lock_run_dir,
    saved_config,
)
from agentfly_train.run_dir import LOCK_FILE
from tests.helpers.paths import REPO_ROOT
from tests.helpers.runs import TINY_RUN, quickstart_config

HOLD_LOCK = (
    "import sys; from pathlib import Path; from agentfly_train.run_claim import lock_run_dir; "
    "lock = lock_run_dir(Path(sys.argv[1])); print('locked', flush=True); sys.stdin.read()"
)
"""A process that locks the run directory given as its argument until its stdin closes."""


def _arguments(run_dir: Path, *overrides: str) -> list[str]:
    return ["--no-progress", "--config", "quickstart", *TINY_RUN, f"trainer.default_local_dir={run_dir}", *overrides]


def _config_json(run_dir: Path, *overrides: str) -> dict:
    """The configuration a run of ``_arguments(run_dir, *overrides)`` writes to its ``config.json``."""
    config = quickstart_config([*TINY_RUN, f"trainer.default_local_dir={run_dir}", *overrides])
    return json.loads(json.dumps(asdict(config)))


@pytest.fixture
def finished_run(tmp_path) -> Path:
    """A run directory as a finished run of ``_arguments`` and ``eval`` of its final model leave it."""
    run_dir = tmp_path / "run"
    (run_dir / "final").mkdir(parents=True)
    (run_dir / "final" / "model.safetensors").write_bytes(b"weights")
    (run_dir / "checkpoint-1").mkdir()
    (run_dir / "checkpoint-1" / "trainer_state.json").write_text('{"global_step": 1}')
    (run_dir / "val_samples").mkdir()
    (run_dir / "val_samples" / "step_000001.jsonl").write_text('{"old": true}\n')
    (run_dir / "config.json").write_text(json.dumps(_config_json(run_dir), indent=2))
    (run_dir / "metrics.jsonl").write_text('{"step": 1, "loss": 0.5}\n')
    (run_dir / "eval.jsonl").write_text('{"old": true}\n')
    return run_dir


def _contents(run_dir: Path, but: str | None = None) -> dict[str, bytes | None]:
    """Every file (its bytes) and folder (``None``) under ``run_dir``, but the one named ``but``."""
    entries = (path for path in sorted(run_dir.rglob("*")) if path.name != but)
    return {path.relative_to(run_dir).as_posix(): None if path.is_dir() else path.read_bytes() for path in entries}


def _one_line_exit_2(arguments: list[str], capsys) -> str:
    assert main(arguments) == 2
    err = capsys.readouterr().err
    assert err.startswith("config error: ") and err.count("\n") == 1, err
    return err.removeprefix("config error: ").rstrip("\n")


def test_every_resumable_key_is_a_configuration_key():
    assert set(RESUMABLE_KEYS) <= set(config_keys())


def test_a_resume_may_change_only_the_resumable_keys(tmp_path):
    saved = _config_json(tmp_path)
    resumed = _config_json(
        tmp_path / "moved",
        "trainer.total_training_steps=5",
        "trainer.save_freq=1",
        "trainer.logger=[console,tensorboard]",
        "actor_rollout_ref.rollout.server_port=8123",
    )
    assert config_differences(saved, resumed, config_keys()) == []
    other = _config_json(tmp_path, "trainer.seed=1", "agent.max_turns=2", "trainer.total_training_steps=5")
    assert config_differences(saved, other, config_keys()) == ["agent.max_turns", "trainer.seed"]
    del saved["trainer"]["seed"]  # a run written before the key existed
    assert config_differences(saved, other, config_keys()) == ["agent.max_turns"]


def test_the_lock_is_exclusive_until_released(tmp_path):
    lock = lock_run_dir(tmp_path)
    holder = json.loads((tmp_path / LOCK_FILE).read_text())
    assert (holder["pid"], holder["host"]) == (os.getpid(), socket.gethostname())
    with pytest.raises(RunDirBusyError) as busy:  # another open file of the same process conflicts too
        lock_run_dir(tmp_path)
    assert str(busy.value) == f"pid {os.getpid()} on host {socket.gethostname()} since {holder['since']}"
    lock.release()
    lock.release()  # a second release does nothing
    with lock_run_dir(tmp_path), pytest.raises(RunDirBusyError):
        lock_run_dir(tmp_path)
    lock_run_dir(tmp_path).release()


def test_a_run_on_a_directory_another_run_holds_stops_in_one_line_and_changes_nothing(finished_run, capsys):
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(finished_run)],
        cwd=REPO_ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))},
    )
    try:
        assert holder.stdout.readline() == "locked\n"
        before = _contents(finished_run)
        since = json.loads((finished_run / LOCK_FILE).read_text())["since"]
        # the same configuration: it would resume, but not while the other run writes there
        assert _one_line_exit_2(_arguments(finished_run), capsys) == (
            f"trainer.default_local_dir={finished_run} is in use by another run (pid {holder.pid} on host "
            f"{socket.gethostname()} since {since}): wait for it, or choose another trainer.default_local_dir"
        )
        assert _contents(finished_run) == before
    finally:
        holder.kill()  # the kernel drops the lock of a killed process
        holder.wait()
    lock_run_dir(finished_run).release()


def test_a_different_run_in_the_directory_stops_in_one_line_and_changes_nothing(finished_run, capsys):
    before = _contents(finished_run, but=LOCK_FILE)
    changed = ("agent.max_turns=3", "algorithm.adv_estimator=rloo", "data.shuffle=false", "sft.enable=false",
               "actor_rollout_ref.rollout.temperature=0.7", "trainer.seed=1",
               "trainer.total_training_steps=3")  # fmt: skip
    assert _one_line_exit_2(_arguments(finished_run, *changed), capsys) == (
        f"trainer.default_local_dir={finished_run} holds a different run (its config.json differs in "
        "agent.max_turns, algorithm.adv_estimator, data.shuffle, actor_rollout_ref.rollout.temperature, "
        "trainer.seed and 1 more): choose another trainer.default_local_dir (or trainer.experiment_name), or set "
        "trainer.overwrite=true to delete that run first"
    )
    assert _contents(finished_run, but=LOCK_FILE) == before
    lock_run_dir(finished_run).release()  # the stopped run let go of the directory


def test_resume_mode_disable_in_a_used_directory_stops_in_one_line(finished_run, capsys):
    before = _contents(finished_run, but=LOCK_FILE)
    assert _one_line_exit_2(_arguments(finished_run, "trainer.resume_mode=disable"), capsys) == (
        f"trainer.default_local_dir={finished_run} holds a run (checkpoint-1/, config.json, final/, metrics.jsonl), "
        "and trainer.resume_mode=disable would start another among its files: resume it with "
        "trainer.resume_mode=auto, choose another trainer.default_local_dir, or set trainer.overwrite=true to delete "
        "it first"
    )
    assert _contents(finished_run, but=LOCK_FILE) == before


def test_overwrite_deletes_neither_the_working_directory_nor_the_checkpoint_to_resume_from(
    finished_run, capsys, monkeypatch
):
    before = _contents(finished_run, but=LOCK_FILE)
    checkpoint = finished_run / "checkpoint-1"
    resume = ["trainer.resume_mode=resume_path", f"trainer.resume_from_path={checkpoint}", "trainer.overwrite=true"]
    assert _one_line_exit_2(_arguments(finished_run, *resume), capsys) == (
        f"trainer.overwrite=true would delete trainer.resume_from_path={checkpoint}, which is in "
        f"trainer.default_local_dir={finished_run}: copy the checkpoint elsewhere first, or drop trainer.overwrite"
    )
    monkeypatch.chdir(finished_run / "final")
    assert _one_line_exit_2(_arguments(finished_run, "trainer.overwrite=true"), capsys) == (
        f"trainer.overwrite=true would delete everything in trainer.default_local_dir={finished_run}, which holds "
        "the working directory: give the run a directory of its own"
    )
    assert _contents(finished_run, but=LOCK_FILE) == before


def test_clearing_a_run_directory_keeps_its_lock_and_what_its_links_point_to(finished_run, tmp_path):
    outside = tmp_path / "dataset"
    outside.mkdir()
    (outside / "rows.jsonl").write_text("{}\n")
    (finished_run / "data").symlink_to(outside)
    with lock_run_dir(finished_run):
        clear_run_dir(finished_run)
    assert [path.name for path in finished_run.iterdir()] == [LOCK_FILE]
    assert (outside / "rows.jsonl").read_text() == "{}\n"


@pytest.mark.slow  # one tiny-model training step, ~20 s on 2 cores
def test_overwrite_replaces_the_run_in_the_directory(finished_run, capsys):
    assert main(_arguments(finished_run, "agent.max_turns=3", "trainer.overwrite=true")) == 0
    err = capsys.readouterr().err
    deleted = "checkpoint-1/, config.json, final/, metrics.jsonl"
    assert f"note: trainer.overwrite=true: deleted the previous run in {finished_run} ({deleted})" in err
    assert saved_config(finished_run)["agent"]["max_turns"] == 3
    assert not (finished_run / "eval.jsonl").exists() and not (finished_run / "checkpoint-1").exists()
    assert sorted(path.name for path in (finished_run / "val_samples").iterdir()) == [
        "step_000000.jsonl",
        "step_000001.jsonl",
    ]
    assert '"old"' not in (finished_run / "val_samples" / "step_000001.jsonl").read_text()
    assert [json.loads(line)["step"] for line in (finished_run / "metrics.jsonl").read_text().splitlines()] == [0, 1, 1]
    result = json.loads((finished_run / "result.json").read_text())
    assert (result["steps"], result["resumed_from"]) == (1, None)
    lock_run_dir(finished_run).release()  # the finished run let go of the directory
