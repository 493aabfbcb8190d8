"""2-step training runs on the long-horizon maze (``agentfly/Maze-Nav``, each move paid its progress) with each
estimator that credits turns (``gigpo`` and those of ``agentfly_train/algorithms/turn_estimators.py``), from the command
line, on the HF backend and on vLLM: each trains (``gae_turns`` its critic too), and its saved episodes, which walk
several rooms, carry each turn's reward and advantage."""

from __future__ import annotations

import json
import math

import pytest

from tests.helpers.processes import run_cli
from tests.helpers.runs import MAZE_TASKS, SMALL_VLLM_ENGINE, quickstart_command
from tests.helpers.skips import skip_without_vllm

ESTIMATORS = [
    ("gigpo", "algorithm.gigpo.omega=0.5"),
    ("grpo_turns", "algorithm.norm_adv_by_std_in_grpo=false"),
    ("rloo_turns", "algorithm.turn_gamma=0.9"),
    ("reinforce_plus_plus_turns", "algorithm.turn_gamma=0.9"),
    ("gae_turns", "algorithm.lam=0.95"),
]
SHORT_WALKS = (
    "agent.max_turns=6",
    "actor_rollout_ref.rollout.response_length=384",
    "data.train_batch_size=2",
    "agent.num_chains=2",
    "data.val_size=0",
)
"""Two groups of two walks of up to six moves a step (the mazes need 11 and 13; each move is paid its progress)."""
BACKENDS = {"hf": (), "vllm": ("actor_rollout_ref.rollout.name=vllm", *SMALL_VLLM_ENGINE)}


@pytest.mark.slow
@pytest.mark.parametrize("backend", list(BACKENDS))
@pytest.mark.parametrize(("estimator", "setting"), ESTIMATORS)
def test_a_turn_credit_run_on_the_maze_trains_two_steps(maze_policy, tmp_path, estimator, setting, backend):
    if backend == "vllm":
        skip_without_vllm()
    done = run_cli(
        quickstart_command(
            *MAZE_TASKS,
            *BACKENDS[backend],
            f"actor_rollout_ref.model.path={maze_policy}",
            "sft.enable=false",
            f"algorithm.adv_estimator={estimator}",
            setting,
            *SHORT_WALKS,
            "trainer.total_training_steps=2",
            "trainer.log_train_generations=4",
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
    assert len(episodes) == 4 and all(e["messages"][1]["content"].startswith("Task: Walk from room ") for e in episodes)
    assert max(e["turns"] for e in episodes) >= 3  # the warm-started policy walks: turns to credit apart
    for episode in episodes:
        assert len(episode["turn_advantages"]) == len(episode["turn_rewards"]) == episode["turns"]
        assert all(a is None or math.isfinite(a) for a in episode["turn_advantages"])
        assert episode["reward"] == pytest.approx(sum(episode["turn_rewards"]))
