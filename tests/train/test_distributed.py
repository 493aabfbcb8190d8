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
from agentfly_train.report.charts import chart_data
from tests.train.conftest import run_cli
from tests.train.test_resume import PPO_WITH_KL_IN_REWARD, SMALL_RUN

pytestmark = pytest.mark.slow


def test_ppo_with_kl_in_reward_trains_on_two_processes(tmp_path):
    launcher = shutil.which("accelerate", path=os.path.dirname(sys.executable)) or shutil.which("accelerate")
    assert launcher, "accelerate's launcher is part of the train extra"
    overrides = [*SMALL_RUN, *PPO_WITH_KL_IN_REWARD, "actor_rollout_ref.actor.use_kl_loss=true"]
    command = [
        launcher,
        "launch",
        "--cpu",
        "--num_processes",
        "2",
        "-m",
        "agentfly_train",
        "--no-progress",
        "--config",
        "quickstart",
    ]
    done = run_cli([*command, *overrides, f"trainer.default_local_dir={tmp_path}"])
    assert done.returncode == 0, done.stderr[-3000:]
    records = MetricsFile(tmp_path / "metrics.jsonl").read()
    assert [record["step"] for record in records] == [1, 2, 3, 4]
    for record in records:
        assert all(math.isfinite(record[key]) for key in ("loss", "critic/vf_loss", "actor/kl_loss"))
    state = json.loads((tmp_path / "checkpoint-4" / "algorithm_state.json").read_text())
    assert state["kl_ctrl"]["value"] < records[-1]["actor/reward_kl_penalty_coeff"]  # updated after step 4's use
    _critic_checkpoint_resumes_on_one_process(tmp_path / "checkpoint-4" / "critic")
    # The run report, written once by the main process, plots the critic and both KL terms.
    assert (tmp_path / "report.html").is_file() and "could not write" not in done.stdout
    charts = {chart["title"]: chart for group in chart_data(records) for chart in group["charts"]}
    assert {"critic/vf_loss"} == {series["key"] for series in charts["Critic loss"]["series"]}
    assert {"actor/kl_loss", "actor/reward_kl_penalty"} <= {series["key"] for series in charts["KL"]["series"]}
    assert "Explained variance" in charts


def _critic_checkpoint_resumes_on_one_process(directory) -> None:
    """The critic checkpoint of the two-process run (whole state dicts) loads into a one-process critic."""
    import torch
    from accelerate import Accelerator
    from transformers import AutoModelForTokenClassification

    from agentfly_train.critic import Critic, CriticSettings

    critic = Critic(AutoModelForTokenClassification.from_pretrained(directory), CriticSettings(lr=1.0), Accelerator())
    critic.load(str(directory))
    saved = torch.load(directory / "optimizer.pt", weights_only=True)
    names = [name for name, _ in critic.model.named_parameters()]
    assert sorted(saved["state"]) == sorted(names)  # keyed by parameter name, not by position
    steps = {float(state["step"]) for state in critic.optimizer.state.values()}
    assert len(critic.optimizer.state) == len(names) and len(steps) == 1 and steps.pop() >= 4
    assert critic.optimizer.param_groups[0]["lr"] == 1e-3  # the run's critic.optim.lr, restored
