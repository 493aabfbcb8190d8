"""A run killed mid-step and resumed loses no completed step and repeats none."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.train.conftest import run_cli

pytestmark = pytest.mark.slow
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}

SMALL_RUN = [
    "agent.env_kwargs.level=single",
    "agent.num_chains=2",
    "agent.max_tokens_per_turn=16",
    "data.train_batch_size=2",
    "data.val_size=0",
    "actor_rollout_ref.rollout.response_length=64",
    "actor_rollout_ref.model.tiny_hidden_size=32",
    "actor_rollout_ref.actor.optim.lr=1e-3",
    "sft.enable=false",
    "trainer.total_training_steps=4",
    "trainer.save_freq=1",
]


def _command(run_dir: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "agentfly_train",
        "--no-progress",
        "--config",
        "quickstart",
        *SMALL_RUN,
        f"trainer.default_local_dir={run_dir}",
        *extra,
    ]


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
    while not (killed / "checkpoint-2" / "trainer_state.json").exists():  # step 3 is under way after this
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


def test_resume_path_must_be_a_checkpoint(tmp_path):
    done = run_cli(
        _command(tmp_path / "run", "trainer.resume_mode=resume_path", f"trainer.resume_from_path={tmp_path}"),
        timeout=120,
    )
    assert done.returncode == 2 and "is not a checkpoint" in done.stderr


def test_auto_resume_skips_a_checkpoint_left_half_written(tmp_path):
    from agentfly_train.train import resume_checkpoint
    from tests.train.conftest import quickstart_config

    complete, half_written = ("model.safetensors", "trainer_state.json"), ("model.safetensors",)
    for step, files in ((2, complete), (10, complete), (11, half_written)):
        (tmp_path / f"checkpoint-{step}").mkdir()
        for name in files:
            (tmp_path / f"checkpoint-{step}" / name).write_text("{}")
    (tmp_path / "checkpoint-final").mkdir()
    config = quickstart_config([f"trainer.default_local_dir={tmp_path}"])
    assert resume_checkpoint(config) == str(tmp_path / "checkpoint-10")  # 11 was killed mid-save; 10 > 2 numerically
    assert resume_checkpoint(quickstart_config([f"trainer.default_local_dir={tmp_path / 'new'}"])) is None
