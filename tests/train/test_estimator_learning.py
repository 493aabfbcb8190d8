"""Each advantage estimator learns: on two fixed one-step multiplications, the mean reward of a warm-started tiny
policy over the last 3 steps of a run clearly exceeds the first 3 steps'; PPO's critic comes to explain part of
the returns (explained variance above 0 over the second half of its run). The README's "Algorithms" section
reports these figures. Runs are seeded: the figures repeat exactly on the same software."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import pytest

from agentfly_train.callbacks import MetricsFile
from agentfly_train.train import run
from tests.train.conftest import WARM_START_STEPS, learning_tasks, quickstart_config

pytestmark = pytest.mark.slow

LEARNING_RUN = (
    "agent.num_chains=16",
    "data.train_batch_size=2",
    "actor_rollout_ref.actor.optim.lr=5e-4",
    "sft.enable=false",
)
"""The RL run every estimator learns with: 2 prompts x 16 rollouts per step (after a warm start)."""


@dataclass(frozen=True)
class Setting:
    """How one estimator is shown to learn: the task set, the warm start, the run."""

    steps: int = 12
    warm_start_steps: int = WARM_START_STEPS
    num_tasks: int = 2
    extra: tuple[str, ...] = ()


ESTIMATORS = {
    "grpo": Setting(),
    "rloo": Setting(),
    "reinforce_plus_plus": Setting(),
    "reinforce_plus_plus_baseline": Setting(),
    "remax": Setting(steps=16),
    "opo": Setting(),
    "gpg": Setting(steps=16),
    # Pass@k credits only a group's best episode, and only when it alone succeeds: with 16 chains at a success
    # rate of 0.4 that almost never happens. Groups of 4 over 8 tasks give it a signal.
    "grpo_passk": Setting(steps=36, num_tasks=8, extra=("agent.num_chains=4", "data.train_batch_size=8")),
    # The critic can only explain returns where an episode's tokens tell its outcome: after 60 SFT steps nearly
    # every failure is a wrong operand of the right format, after 40 some are visible format slips. It starts
    # from the policy's backbone with a fresh head and needs a few dozen steps to get past predicting the mean.
    "gae": Setting(steps=48, warm_start_steps=40, extra=("critic.optim.lr=1e-3", "critic.ppo_mini_batch_size=1")),
}
"""Estimator -> its :class:`Setting`."""


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_mean_reward_rises(estimator, warm_policies, tmp_path):
    setting = ESTIMATORS[estimator]
    steps = setting.steps
    overrides = [
        *learning_tasks(setting.num_tasks),
        *LEARNING_RUN,
        *setting.extra,
        f"trainer.total_training_steps={steps}",
        f"algorithm.adv_estimator={estimator}",
        f"actor_rollout_ref.model.path={warm_policies(setting.warm_start_steps, setting.num_tasks)}",
        f"trainer.default_local_dir={tmp_path}",
    ]
    run(quickstart_config(overrides), show_progress=False)
    records = MetricsFile(tmp_path / "metrics.jsonl").read()
    rewards = [record["reward/mean"] for record in records]
    assert len(rewards) == steps
    first, last = statistics.fmean(rewards[:3]), statistics.fmean(rewards[-3:])
    print(f"{estimator}: mean reward {first:.2f} over the first 3 steps, {last:.2f} over the last 3")  # README figures
    assert last >= first + 0.2, f"{estimator}: mean reward {first:.2f} over the first 3 steps, {last:.2f} the last 3"
    if estimator == "gae":
        # A median: a batch whose episodes all have the same return has Var(R) = 0 and an unbounded ratio.
        explained = [record["critic/vf_explained_var"] for record in records]
        early, late = statistics.median(explained[:3]), statistics.median(explained[steps // 2 :])
        print(f"gae: explained variance {early:.2f} (steps 1-3), {late:.2f} (second half)")
        assert early < 0 < late, f"explained variance: median {early:.2f} over steps 1-3, {late:.2f} second half"
