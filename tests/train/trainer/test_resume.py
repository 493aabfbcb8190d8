"""A run killed mid-step and resumed loses no completed step and repeats none."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from agentfly_train.checkpoints import checkpoint_problem, staging_dir
from tests.helpers.paths import REPO_ROOT
from tests.helpers.processes import run_cli
from tests.helpers.runs import SMALL_RUN as SMALL_CHECKPOINTED_RUN
from tests.helpers.runs import quickstart_command

pytestmark = pytest.mark.slow
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}

SMALL_RUN = [*SMALL_CHECKPOINTED_RUN, "trainer.total_training_steps=4"]


def _command(run_dir: Path, *extra: str) -> list[str]:
    return quickstart_command(*SMALL_RUN, f"trainer.default_local_dir={run_dir}", *extra)


def _steps(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


PPO_WITH_KL_IN_REWARD = (
    "algorithm.adv_estimator=gae",
    "algorithm.use_kl_in_reward=true",
    "algorithm.kl_ctrl.type=adaptive",
    "algorithm.kl_ctrl.horizon=10",
    "critic.optim.lr=1e-3",
)
"""A run whose state is TRL's (policy, optimiser, scheduler, RNG, data position) and ours beyond it (the critic's
weights and optimiser, the adaptive KL controller): GRPO's state is a subset of it."""
COMPARED = ("critic/vf_loss", "critic/values/mean", "actor/reward_kl_penalty_coeff")


@pytest.mark.long
def test_killed_run_resumes_from_its_last_checkpoint_and_a_finished_run_trains_no_more(tmp_path):
    reference, killed = tmp_path / "reference", tmp_path / "killed"
    done = run_cli(_command(reference, *PPO_WITH_KL_IN_REWARD), env=OFFLINE)
    assert done.returncode == 0, done.stderr[-2000:]

    process = subprocess.Popen(
        _command(killed, *PPO_WITH_KL_IN_REWARD),
        cwd=REPO_ROOT,
        env={**os.environ, **OFFLINE},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 240
    while not (killed / "checkpoint-2").exists():  # step 3 is under way after this
        assert process.poll() is None and time.monotonic() < deadline, "the run ended before its second checkpoint"
        time.sleep(0.2)
    process.send_signal(signal.SIGKILL)
    process.wait()

    for run in ("resumed", "finished"):  # the second run finds checkpoint-4 = max_steps, as after a kill in final/
        done = run_cli(_command(killed, *PPO_WITH_KL_IN_REWARD), env=OFFLINE)
        assert done.returncode == 0, (run, done.stderr[-2000:])
        result = json.loads((killed / "result.json").read_text())
        assert result["resumed_from"] is not None and Path(result["resumed_from"]).name.startswith("checkpoint-")
        assert result["steps"] == 4
        steps = [record["step"] for record in _steps(killed)]
        assert steps == [1, 2, 3, 4], run  # no step lost, none logged twice
    assert Path(result["resumed_from"]).name == "checkpoint-4"
    # Model, optimiser, RNG, data position, critic and KL controller were restored: the resumed steps are the
    # uninterrupted run's.
    for ours, theirs in zip(_steps(killed), _steps(reference), strict=True):
        assert ours["reward/mean"] == pytest.approx(theirs["reward/mean"])
        assert ours["episode/response_length"] == pytest.approx(theirs["episode/response_length"])
        assert ours["loss"] == pytest.approx(theirs["loss"], abs=1e-5)
        for name in COMPARED:
            assert ours[name] == pytest.approx(theirs[name], rel=1e-4, abs=1e-6), name


def test_resume_path_must_be_a_complete_checkpoint(tmp_path):
    broken = tmp_path / "checkpoint-3"
    broken.mkdir()
    (broken / "trainer_state.json").write_text('{"global_step": 3, "log_hi')  # cut short
    done = run_cli(
        _command(tmp_path / "run", "trainer.resume_mode=resume_path", f"trainer.resume_from_path={broken}"),
        timeout=120,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"config error: trainer.resume_from_path={str(broken)!r} is not a complete checkpoint (no manifest.json "
        "(killed while saving, or written before checkpoints had manifests)): point it at a checkpoint-N directory "
        "whose manifest.json checks, or set trainer.resume_mode=auto to resume from the newest complete checkpoint "
        "in trainer.default_local_dir"
    )


def _checkpoints(run_dir: Path) -> list[str]:
    return sorted(path.name for path in run_dir.glob("checkpoint-*"))


def test_resume_skips_a_broken_checkpoint_cleans_leftovers_and_keeps_max_ckpt_to_keep(tmp_path):
    run_dir, keep = tmp_path / "run", "trainer.max_ckpt_to_keep=2"
    done = run_cli(_command(run_dir, "trainer.total_training_steps=3", keep), env=OFFLINE)
    assert done.returncode == 0, done.stderr[-2000:]
    assert _checkpoints(run_dir) == ["checkpoint-2", "checkpoint-3"]
    model = run_dir / "checkpoint-3" / "model.safetensors"
    size = model.stat().st_size
    model.write_bytes(b"")  # as a copy cut short leaves it
    leftover = staging_dir(run_dir, 4) / "checkpoint-4"  # as a kill during the save of step 4 leaves it
    leftover.mkdir(parents=True)
    (leftover / "trainer_state.json").write_text("{}")

    done = run_cli(_command(run_dir, keep), env=OFFLINE)
    assert done.returncode == 0, done.stderr[-2000:]
    skipped = f"skipped checkpoint-3: model.safetensors is 0 bytes, manifest says {size:,}"
    assert f"resuming from checkpoint-2 ({skipped})" in done.stderr.splitlines()
    assert "There were missing keys" not in done.stderr  # lm_head.weight is tied to the embeddings
    assert _checkpoints(run_dir) == ["checkpoint-3", "checkpoint-4"]  # step 3 redone, checkpoint-2 pruned
    assert all(checkpoint_problem(run_dir / name) is None for name in _checkpoints(run_dir))
    assert [record["step"] for record in _steps(run_dir)] == [1, 2, 3, 4]


def test_ctrl_c_leaves_no_half_written_checkpoint_and_prints_how_to_resume(tmp_path):
    run_dir, log = tmp_path / "run", tmp_path / "stderr.txt"
    command = _command(run_dir, "trainer.total_training_steps=40")  # never done before the signal, however slow
    with log.open("w") as stderr:
        process = subprocess.Popen(
            command, cwd=REPO_ROOT, env={**os.environ, **OFFLINE}, stdout=subprocess.DEVNULL, stderr=stderr
        )
        deadline = time.monotonic() + 240
        while not (run_dir / "checkpoint-2").is_dir():
            assert process.poll() is None and time.monotonic() < deadline, "the run ended before its second checkpoint"
            time.sleep(0.1)
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=120) == 130, log.read_text()[-2000:]
    output = log.read_text()
    assert "Traceback" not in output
    last = output.strip().splitlines()[-1]
    match = re.fullmatch(r"interrupted at step (\d+); rerun `(.+)` to resume from checkpoint-(\d+)", last)
    assert match, last
    assert match[2] == shlex.join(["python", "-m", "agentfly_train", *command[3:]])
    assert int(match[1]) > int(match[3]) >= 2
    assert checkpoint_problem(run_dir / f"checkpoint-{match[3]}") is None
    assert not list(run_dir.glob("*.tmp*")) and not (run_dir / "result.json").exists()


@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB tmpfs: room for one checkpoint of the tiny model (0.6 MB), not two."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no mount command")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount_point)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs (needs root): {done.stderr.decode().strip()}")
    yield mount_point
    subprocess.run(["umount", str(mount_point)], check=True)


def test_a_full_disk_fails_in_one_line_and_the_same_command_resumes_once_there_is_space(small_disk):
    run_dir = small_disk / "run"
    command = _command(run_dir, "trainer.total_training_steps=2")
    done = run_cli(command, env=OFFLINE)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1] == (
        f"error: no space left on device while writing checkpoint-2 in {run_dir}; the previous checkpoint "
        "checkpoint-1 is intact; free space and rerun the same command to resume"
    )
    assert _checkpoints(run_dir) == ["checkpoint-1"] and checkpoint_problem(run_dir / "checkpoint-1") is None

    subprocess.run(["mount", "-o", "remount,size=64m", str(small_disk)], check=True)
    done = run_cli(command, env=OFFLINE)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "resuming from checkpoint-1" in done.stderr.splitlines()
    assert [record["step"] for record in _steps(run_dir)] == [1, 2]


def test_a_run_restarted_before_its_first_checkpoint_logs_each_step_once(tmp_path):
    command = _command(
        tmp_path / "run",
        "data.val_size=2",
        "trainer.val_before_train=true",
        "trainer.total_training_steps=1",
        "trainer.save_freq=-1",
    )
    for attempt in (1, 2):
        done = run_cli(command, env=OFFLINE)
        assert done.returncode == 0, done.stderr[-2000:]
        records = _steps(tmp_path / "run")
        assert [(record["step"], "final" in record) for record in records] == [(0, False), (1, False), (1, True)]
        assert "val/accuracy" in records[0], attempt  # the validation before training
