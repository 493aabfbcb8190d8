"""2-step training runs of the quickstart with each estimator that credits turns (``gigpo`` and those of
``agentfly_train/algorithms/turn_estimators.py``) and a per-turn reward, from the command line: each trains
(``gae_turns`` its critic too), and its saved episodes carry each turn's reward and advantage."""

from __future__ import annotations

import json
import math

import pytest

from tests.helpers.processes import run_cli
from tests.helpers.runs import LEARNING_TASKS, quickstart_command


@pytest.mark.slow
@pytest.mark.parametrize(
    ("estimator", "setting"),
    [
        ("gigpo", "algorithm.gigpo.omega=0.5"),
        ("grpo_turns", "algorithm.norm_adv_by_std_in_grpo=false"),
        ("rloo_turns", "algorithm.turn_gamma=0.9"),
        ("reinforce_plus_plus_turns", "algorithm.turn_gamma=0.9"),
        ("gae_turns", "algorithm.lam=0.95"),
    ],
)
def test_a_turn_credit_run_with_a_turn_reward_trains_two_steps(warm_policy, tmp_path, estimator, setting):
    """On the warm-started tiny policy (two-turn episodes: a calculator call, then the answer)."""
    done = run_cli(
        quickstart_command(
            *LEARNING_TASKS,
            f"actor_rollout_ref.model.path={warm_policy}",
            "sft.enable=false",
            f"algorithm.adv_estimator={estimator}",
            setting,
            "agent.turn_reward_name=tool_error_penalty",
            "trainer.total_training_steps=2",
            "data.train_batch_size=2",
            "agent.num_chains=4",
            "trainer.log_train_generations=8",
            f"trainer.default_local_dir={tmp_path}",
        ),
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    trained = [m for m in metrics if "actor/pg_loss" in m]
    assert len(trained) == 2 and all(math.isfinite(m["actor/pg_loss"]) for m in trained)
    if estimator == "gae_turns":
        assert all(math.isfinite(m["critic/vf_loss"]) for m in trained)
    episodes = [
        json.loads(line) for line in (tmp_path / "train_samples" / "step_000002.jsonl").read_text().splitlines()
    ]
    assert len(episodes) == 8
    for episode in episodes:
        assert len(episode["turn_advantages"]) == len(episode["turn_rewards"]) == episode["turns"]
        assert all(a is None or math.isfinite(a) for a in episode["turn_advantages"])
        assert episode["reward"] == pytest.approx(sum(episode["turn_rewards"]))
