"""Two CPU processes under ``accelerate launch``: rows gathered across processes for the advantages, KL
controller and loss denominators, the critic prepared for DDP, and its checkpoint written once."""

from __future__ import annotations

import json
import math
import os
import shutil
import sys

import pytest

from agentfly_train.callbacks import MetricsFile
from tests.train.conftest import run_cli
from tests.train.test_resume import PPO_WITH_KL_IN_REWARD, SMALL_RUN

pytestmark = pytest.mark.slow


def test_ppo_with_kl_in_reward_trains_on_two_processes(tmp_path):
    launcher = shutil.which("accelerate", path=os.path.dirname(sys.executable)) or shutil.which("accelerate")
    assert launcher, "accelerate's launcher is part of the train extra"
    overrides = [*SMALL_RUN, *PPO_WITH_KL_IN_REWARD, "actor_rollout_ref.actor.use_kl_loss=true"]
    command = [launcher, "launch", "--cpu", "--num_processes", "2", "-m", "agentfly_train", "--no-progress"]
    done = run_cli([*command, *overrides, f"trainer.default_local_dir={tmp_path}"])
    assert done.returncode == 0, done.stderr[-3000:]
    records = MetricsFile(tmp_path / "metrics.jsonl").read()
    assert [record["step"] for record in records] == [1, 2, 3, 4]
    for record in records:
        assert all(math.isfinite(record[key]) for key in ("loss", "critic/vf_loss", "actor/kl_loss"))
    state = json.loads((tmp_path / "checkpoint-4" / "algorithm_state.json").read_text())
    assert state["kl_ctrl"]["value"] < records[-1]["actor/reward_kl_penalty_coeff"]  # updated after step 4's use
    assert (tmp_path / "checkpoint-4" / "critic" / "optimizer.pt").is_file()
