"""A 2-step training run of the quickstart with ``algorithm.adv_estimator=gigpo`` and a per-turn reward, from the
command line: it trains, and its saved episodes carry their turns' rewards."""

from __future__ import annotations

import json

import pytest

from tests.helpers.processes import run_cli
from tests.helpers.runs import quickstart_command


@pytest.mark.slow
def test_a_gigpo_run_with_a_turn_reward_trains_two_steps(tmp_path):
    done = run_cli(
        quickstart_command(
            "algorithm.adv_estimator=gigpo",
            "algorithm.gigpo.omega=0.5",
            "agent.turn_reward_name=tool_error_penalty",
            "trainer.total_training_steps=2",
            "sft.steps=4",
            "sft.num_demos=16",
            "data.train_batch_size=4",
            "agent.num_chains=4",
            "data.val_size=2",
            "actor_rollout_ref.model.tiny_hidden_size=32",
            "trainer.log_train_generations=4",
            f"trainer.default_local_dir={tmp_path}",
        ),
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    episodes = [
        json.loads(line) for line in (tmp_path / "train_samples" / "step_000002.jsonl").read_text().splitlines()
    ]
    assert episodes and all(len(e["turn_rewards"]) == e["turns"] for e in episodes)
    assert all(e["reward"] == pytest.approx(sum(e["turn_rewards"])) for e in episodes)
