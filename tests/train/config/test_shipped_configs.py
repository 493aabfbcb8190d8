"""The seed example configs run end to end through the CLI, on the tiny model and the sample data in data/."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

from agentfly_train.callbacks import MetricsFile
from tests.helpers.processes import noise_lines, run_cli
from tests.helpers.readme import readme_command, runs_readme_command

pytestmark = pytest.mark.slow

TINY_RUN = (
    "actor_rollout_ref.model.path=agentfly:tiny",
    "actor_rollout_ref.model.tiny_hidden_size=32",
    "trainer.total_training_steps=2",
    "trainer.logger=[console]",
    "trainer.n_gpus_per_node=0",
    "data.train_batch_size=2",
    "data.val_size=0",
    "agent.num_chains=2",
    "agent.max_tokens_per_turn=16",
    "actor_rollout_ref.actor.ppo_mini_batch_size=null",
    "actor_rollout_ref.rollout.response_length=128",
    "sft.enable=false",
)
"""What shrinks a seed example to two CPU steps of the tiny model."""


@pytest.mark.parametrize("name", ["react_search_rpp.yaml", "code_grpo.yaml"])
def test_seed_config_trains_two_steps(name, tmp_path):
    command = [sys.executable, "-m", "agentfly_train", "--no-progress", "--config", f"configs/{name}", *TINY_RUN]
    _trains_two_steps(command, tmp_path)


@runs_readme_command(
    "python -m agentfly_train --config configs/gsm8k_calc_grpo.yaml data.train_files=[gsm8k/train.parquet] "
    "data.val_files=[gsm8k/test.parquet] actor_rollout_ref.model.path=Qwen/Qwen2.5-1.5B-Instruct"
)
def test_the_readme_command_of_the_gsm8k_config_trains_two_steps(readme, tmp_path):
    sample = "[data/gsm8k_sample.jsonl]"
    changes = {"data.train_files": sample, "data.val_files": sample, "actor_rollout_ref.model.path": "agentfly:tiny"}
    # Offline, the env's own task source needs a file too (online it loads GSM8K from the Hub at gym.make).
    offline = "agent.env_kwargs={data_files: data/gsm8k_sample.jsonl}"
    _trains_two_steps(readme_command(readme, changes, ["--no-progress", offline, *TINY_RUN]).argv, tmp_path)


def _trains_two_steps(command: list[str], tmp_path: Path) -> None:
    done = run_cli([*command, f"trainer.default_local_dir={tmp_path}"])
    assert done.returncode == 0, done.stderr[-3000:]
    assert noise_lines(done.stdout + done.stderr) == []  # the configs list wandb; the override drops it
    records = MetricsFile(tmp_path / "metrics.jsonl").read()
    assert [record["step"] for record in records] == [1, 2]
    assert all(math.isfinite(record["loss"]) for record in records)
