"""Each example and benchmark script runs end to end with a tiny budget."""

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT, needs_scienceworld, needs_textarena, needs_textworld_express, skip_without_vllm


def run_script(*args: str, timeout: int = 600) -> str:
    # The scripts import this checkout's packages, whatever copy of them is installed.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, cwd=REPO_ROOT, timeout=timeout, check=False, env=env
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


def test_env_demo_main_job():
    out = run_script("-m", "agentfly_envs", "--episodes", "50")
    assert "--- a golden episode ---" in out and "[tool] Error: unknown tool 'calculater'" in out
    assert "50 golden episodes: 100.0% solved" in out


def test_gymnasium_loop_golden_policy(gsm8k_sample):
    out = run_script(
        "examples/gymnasium_loop.py", "--env-id", "agentfly/GSM8K-Calc", "--data-files", str(gsm8k_sample),
        "--episodes", "4",
    )  # fmt: skip
    assert "mean return over 4 episodes: 1.000" in out


@pytest.mark.slow
def test_gymnasium_loop_hf_policy_with_tiny_model():
    pytest.importorskip("torch")
    out = run_script("examples/gymnasium_loop.py", "--policy", "hf", "--episodes", "2", "--max-turns", "2",
                     "--max-new-tokens", "16")  # fmt: skip
    assert "mean return over 2 episodes" in out


@pytest.mark.slow
def test_stock_trl_example(tmp_path):
    pytest.importorskip("trl")
    out = run_script("examples/trl_grpo.py", "grpo.max_steps=1", f"grpo.output_dir={tmp_path}", "env.num_rows=4")
    assert "rewards/ArithCalcTRLEnvironment/mean" in out


def test_env_throughput_benchmark(tmp_path, gsm8k_sample):
    result_file = tmp_path / "bench.json"
    out = run_script(
        "benchmarks/env_throughput.py", "--gsm8k", str(gsm8k_sample), "--arith-episodes", "50",
        "--vector-steps", "20", "--python-episodes", "1", "--repeats", "1", "--json", str(result_file),
    )  # fmt: skip
    results = json.loads(result_file.read_text())
    assert set(results) == {"Arith-Calc (hard)", "GSM8K-Calc", "Arith, python tool"}
    assert results["GSM8K-Calc"]["single"]["golden_solved"] == 1.0
    assert results["GSM8K-Calc"]["calculator_matches_annotation"] == 1.0
    assert results["Arith-Calc (hard)"]["single"]["env_steps_per_s"] > 0
    assert "env steps/s" in out


@needs_textworld_express
def test_env_demo_on_a_world():
    out = run_script("-m", "agentfly_envs", "--env-id", "agentfly/TWX-Coin", "--episodes", "20")
    assert "[tool] You take the coin.\n\n[The task is complete.]" in out
    assert "[tool] Error: unknown tool 'calculater'; available tools: act" in out
    assert "20 golden episodes: 100.0% solved" in out


@needs_textworld_express
def test_world_throughput_benchmark(tmp_path):
    result_file = tmp_path / "world.json"
    out = run_script(
        "benchmarks/world_throughput.py", "--games", "Coin", "SimonSays", "--episodes", "10", "--vector-steps", "20",
        "--repeats", "1", "--json", str(result_file),
    )  # fmt: skip
    results = json.loads(result_file.read_text())
    assert set(results) == {"Coin", "SimonSays"}
    for result in results.values():
        assert result["bare_world"]["golden_solved"] == result["single"]["golden_solved"] == 1.0
        assert result["single"]["env_steps_per_s"] > 0 and result["first_game_s"] > result["reset_s"] > 0
    assert "env steps/s" in out and "JVM start + first game" in out


@needs_textarena
def test_world_throughput_benchmark_on_puzzles(tmp_path):
    result_file = tmp_path / "puzzles.json"
    out = run_script(
        "benchmarks/world_throughput.py", "--games", "--puzzles", "Mastermind", "FrozenLake", "--episodes", "5",
        "--vector-steps", "20", "--repeats", "1", "--json", str(result_file),
    )  # fmt: skip
    results = json.loads(result_file.read_text())
    assert set(results) == {"TextArena-Mastermind", "TextArena-FrozenLake"}
    for result in results.values():
        assert result["bare_world"]["golden_solved"] == result["single"]["golden_solved"] == 1.0
        assert result["sync_x2"]["golden_solved"] == 1.0 and result["reset_s"] > 0
    assert "agentfly/TextArena-Mastermind: 5 golden episodes" in out and "first game" in out


@needs_scienceworld
def test_world_throughput_benchmark_on_scienceworld(tmp_path):
    result_file = tmp_path / "scienceworld.json"
    out = run_script(
        "benchmarks/world_throughput.py", "--games", "--scienceworld", "find-animal", "lifespan-longest-lived",
        "--episodes", "2", "--vector-steps", "10", "--repeats", "1", "--json", str(result_file),
    )  # fmt: skip
    result = json.loads(result_file.read_text())["ScienceWorld"]
    assert result["bare_world"]["golden_solved"] == result["single"]["golden_solved"] == 1.0
    assert result["first_game_s"] > result["reset_s"] > 0
    assert "agentfly/ScienceWorld: 2 golden episodes" in out and "JVM start + first game" in out


@pytest.mark.slow
def test_rollout_throughput_benchmark_with_vllm_and_a_slow_tool(tmp_path):
    skip_without_vllm()
    result_file = tmp_path / "rollout.json"
    out = run_script(
        "benchmarks/rollout_throughput.py", "--vllm", "--episodes", "4", "--chains", "2", "--repeats", "1",
        "--sft-steps", "2", "--response-length", "64", "--max-turns", "2", "--tool-latency-ms", "1", "2",
        "--json", str(result_file),
    )  # fmt: skip
    summary = json.loads(result_file.read_text())["summary"]
    assert {"agentfly", "agentfly-vllm-sync", "agentfly-vllm-async", "trl"} <= set(summary)
    for name in ("agentfly-vllm-sync", "agentfly-vllm-async"):
        assert summary[name]["tokens_per_s"] > 0 and 0 <= summary[name]["engine_idle_fraction"] < 1
    assert "ratio agentfly-vllm-async/trl" in out


@pytest.mark.slow
def test_step_time_benchmark(tmp_path):
    skip_without_vllm()
    result_file = tmp_path / "step_time.json"
    out = run_script(
        "benchmarks/step_time.py", "--steps", "2", "--out", str(result_file), "sft.steps=2", "sft.num_demos=8",
        "data.train_batch_size=2", "agent.num_chains=2", "agent.max_tokens_per_turn=16",
    )  # fmt: skip
    figures = json.loads(result_file.read_text())
    for engine in ("hf", "vllm"):
        parts = figures[engine]
        assert parts["step_time"] > 0 and parts["timing/rollout_s"] > parts["timing/env_s"] > 0
        assert parts["timing/update_s"] > 0
    # only the vLLM engine has its own copy of the weights to load; HF samples the policy itself
    assert figures["vllm"]["timing/weight_sync_s"] > 10 * figures["hf"]["timing/weight_sync_s"]
    assert "vs hf" in out and "vllm" in out


@pytest.mark.slow
def test_vllm_step_cost_benchmark():
    skip_without_vllm()
    out = run_script("benchmarks/vllm_step_cost.py", "--sizes", "2", "8", "--new-tokens", "4", "--repeats", "1")
    rows = [line.split() for line in out.splitlines() if line.split() and line.split()[0] == "0"]
    assert [int(row[1]) for row in rows] == [2, 8] and all(float(row[3]) > 0 for row in rows)


def test_sandbox_latency_benchmark(tmp_path):
    result_file = tmp_path / "sandbox.json"
    out = run_script(
        "benchmarks/sandbox_latency.py", "--repeats", "20", "--seconds", "0.3", "--threads", "2",
        "--json", str(result_file),
    )  # fmt: skip
    results = json.loads(result_file.read_text())
    assert results["latency"]["trivial call (warm session)"]["p50_ms"] < 30
    assert 45 < results["latency"]["50 ms computation (warm session)"]["p50_ms"] < 500
    rates = results["throughput_calls_per_s"]
    assert len(rates) == 4 and all(rate > 0 for rate in rates.values())
    assert "p50 ms" in out and "calls/s" in out


@pytest.mark.slow
def test_env_runtime_benchmark(tmp_path):
    pytest.importorskip("ray")
    result_file = tmp_path / "runtime.json"
    out = run_script(
        "benchmarks/env_runtime.py", "--steps", "10", "--envs", "4", "--turns", "2", "--repeats", "1",
        "--json", str(result_file),
    )  # fmt: skip
    results = json.loads(result_file.read_text())
    for figures in results["latency_ms"].values():
        assert figures["ray"] > figures["local"] > 0 and figures["overhead"] == figures["ray"] - figures["local"]
    assert len(results["python_steps_per_s"]) == 2
    for rates in results["python_steps_per_s"].values():
        assert set(rates) == {"local (threads)", "ray, 1 actor", "ray, 2 actors", "ray, 4 actors"}
        assert all(rate > 0 for rate in rates.values())
    assert "Latency of one env step" in out and "Python-tool env steps/s" in out
