"""The long-horizon maze in training: the learning-curve benchmark (``benchmarks/long_horizon.py``) runs ``gigpo`` on
``agentfly/Maze-Nav`` for 2 steps through the CLI; the saved episodes carry the progress rewards their steps were
paid, which sum to the episode's return. (Each turn estimator's runs on the maze, on HF and on vLLM, are in
test_turn_credit_runs.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.processes import run_cli
from tests.helpers.readme import readme_command, runs_readme_command

pytestmark = pytest.mark.slow

TINY = (
    "actor_rollout_ref.model.tiny_hidden_size=32",
    "sft.steps=2",
    "sft.num_demos=2",
    "sft.batch_size=2",
    "data.train_batch_size=2",
    "agent.num_chains=2",
    "data.val_size=2",
    "trainer.log_train_generations=4",
    "agent.max_turns=12",
    "agent.max_tokens_per_turn=16",
    "actor_rollout_ref.rollout.response_length=400",
)
"""Sizes of a 2-step run (12 turns, enough for the shortest golden episode of 10 moves and its answer)."""


def assert_episodes_paid_per_turn(run_dir: Path) -> None:
    """The run trained 2 steps, and its saved episodes' turn rewards sum to their returns."""
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "loss" in r] == [1, 2]
    episodes = [json.loads(line) for line in (run_dir / "train_samples" / "step_000002.jsonl").read_text().splitlines()]
    assert episodes and all(len(e["turn_rewards"]) == e["turns"] for e in episodes)
    assert all(e["reward"] == pytest.approx(sum(e["turn_rewards"])) for e in episodes)
    assert all(e["messages"][1]["content"].startswith("Task: Walk from room ") for e in episodes)


def run_benchmark(readme: str, tmp_path: Path, *overrides: str) -> dict:
    """The benchmark's command for ``gigpo``, seed 0 and 2 steps at :data:`TINY` sizes (and ``overrides``), its runs
    kept in ``tmp_path``: its figures, after checking its table and the run's saved episodes."""
    out = tmp_path / "figures.json"
    change = {"--estimators": "gigpo", "--seeds": "0", "--jobs": "1", "--out": str(out)}
    add = ["--steps", "2", "--window", "1", "--runs-dir", str(tmp_path), *TINY, *overrides]
    done = run_cli(readme_command(readme, change, add).argv, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    table = done.stdout.splitlines()[-2:]
    assert table[0].startswith("estimator") and table[1].startswith("gigpo"), done.stdout[-2000:]
    assert_episodes_paid_per_turn(tmp_path / "gigpo-0")
    return json.loads(out.read_text())


@runs_readme_command(
    "python benchmarks/long_horizon.py --estimators grpo,grpo_turns,gigpo --seeds 0,1,2 --jobs 2 "
    "--out benchmarks/results/long_horizon.json"
)
def test_the_benchmark_runs_gigpo_on_the_maze_for_two_steps(readme, tmp_path):
    figures = run_benchmark(readme, tmp_path)
    run = figures["runs"]["gigpo"][0]
    assert len(run["success"]) == len(run["reward"]) == 2 and all(0 <= s <= 1 for s in run["success"])
    assert set(figures["summary"]["gigpo"]) == {
        "first_steps",
        "last_steps",
        "gain",
        "val_before",
        "val_after",
        "seconds",
    }
    assert figures["env"] == "agentfly/Maze-Nav" and figures["steps"] == 2
