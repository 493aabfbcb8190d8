"""A TextWorldExpress env plugs into the trainer: two RL steps of the tiny model on TWX-Coin through the CLI, after
a warm start on the world's gold paths, with validation on the dev split."""

from __future__ import annotations

import json
import math

import pytest

from tests.helpers.processes import run_cli
from tests.helpers.readme import readme_command, runs_readme_command
from tests.helpers.runs import step_records
from tests.helpers.skips import needs_textworld_express

pytestmark = [pytest.mark.slow, needs_textworld_express]


@runs_readme_command(
    "python -m agentfly_train --config quickstart agent.env=agentfly/TWX-Coin 'agent.env_kwargs={num_tasks: 8}' "
    "'data.val_env_kwargs={split: dev}' data.val_size=2 agent.max_turns=3 agent.num_chains=2 "
    "agent.max_tokens_per_turn=16 data.train_batch_size=2 actor_rollout_ref.model.tiny_hidden_size=32 "
    "actor_rollout_ref.rollout.response_length=128 sft.steps=2 sft.num_demos=2 trainer.total_training_steps=2 "
    "'trainer.logger=[console]'"
)
def test_tiny_model_trains_two_steps_on_twx_coin(readme, tmp_path):
    command = readme_command(readme, add=["--no-progress", f"trainer.default_local_dir={tmp_path}"])
    done = run_cli(command.argv)
    assert done.returncode == 0, done.stderr[-3000:]
    records = step_records(tmp_path)
    assert [record["step"] for record in records] == [1, 2]
    assert all(math.isfinite(record["loss"]) for record in records)
    samples = [json.loads(line) for line in (tmp_path / "val_samples" / "step_000002.jsonl").read_text().splitlines()]
    assert len(samples) == 2
    for sample in samples:
        assert sample["messages"][1]["content"].startswith("Task: Your task is to search the environment")
        assert set(sample["reward_components"]) == {"success", "score", "moves", "world_error"}
    assert "SFT warm start: mean loss" in done.stdout
