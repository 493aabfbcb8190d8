"""Each advantage estimator learns: on two fixed one-step multiplications, the mean reward of a warm-started tiny
policy over the last 3 steps of a 12-step run clearly exceeds the first 3 steps'; PPO's critic comes to explain
part of the returns (explained variance above 0 over the second half). The README's "Algorithms" section
reports these figures. Runs are seeded: the figures repeat exactly on the same software."""

from __future__ import annotations

import statistics

import pytest

from agentfly_train.callbacks import MetricsFile
from agentfly_train.config import load_config
from agentfly_train.train import run
from tests.train.conftest import LEARNING_TASKS, WARM_START_STEPS

pytestmark = pytest.mark.slow

LEARNING_RUN = (
    *LEARNING_TASKS,
    "agent.num_chains=16",
    "data.train_batch_size=2",
    "actor_rollout_ref.actor.optim.lr=5e-4",
    "trainer.total_training_steps=12",
    "sft.enable=false",
)
"""The RL run every estimator learns with: 2 prompts x 16 rollouts per step (after a warm start)."""
ESTIMATORS = {
    "grpo": (WARM_START_STEPS, ()),
    "rloo": (WARM_START_STEPS, ()),
    "reinforce_plus_plus": (WARM_START_STEPS, ("actor_rollout_ref.actor.optim.lr=3e-4",)),
    "reinforce_plus_plus_baseline": (WARM_START_STEPS, ()),
    # ReMax's baseline is the greedy episode's reward. After 60 SFT steps greedy decoding solves a task that
    # sampling rarely does, and the all-negative advantages of that group collapse the tiny policy; after 40 it
    # solves neither, and ReMax learns from the sampled successes.
    "remax": (40, ()),
    "gae": (WARM_START_STEPS, ("critic.optim.lr=2e-3", "critic.ppo_mini_batch_size=1")),
}
"""Estimator -> (SFT steps of its warm start, extra overrides)."""


def _mean(values: list[float]) -> float:
    return statistics.fmean(values)


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_mean_reward_rises(estimator, warm_policies, tmp_path):
    warm_start_steps, extra = ESTIMATORS[estimator]
    overrides = [
        *LEARNING_RUN,
        *extra,
        f"algorithm.adv_estimator={estimator}",
        f"actor_rollout_ref.model.path={warm_policies(warm_start_steps)}",
        f"trainer.default_local_dir={tmp_path}",
    ]
    run(load_config(overrides), show_progress=False)
    records = MetricsFile(tmp_path / "metrics.jsonl").read()
    rewards = [record["reward/mean"] for record in records]
    assert len(rewards) == 12
    first, last = _mean(rewards[:3]), _mean(rewards[-3:])
    assert last >= first + 0.15, f"{estimator}: mean reward {first:.2f} over steps 1-3, {last:.2f} over 10-12"
    if estimator == "gae":
        explained = [record["critic/vf_explained_var"] for record in records]
        assert _mean(explained[6:]) > 0, f"explained variance over steps 7-12: {explained[6:]}"
