"""Env throughput: replays golden demonstrations through GSM8K-Calc and Arith-Calc.

Prints, for each env: env steps/s and episodes/s in one process and with ``make_vec`` async over
several workers, the calculator calls/s inside those steps, the fraction of golden episodes that
score 1.0, and how often the calculator reproduces the dataset's ``<<expr=value>>`` annotation.
Speeds are also given as ratios to a baseline measured in the same run (bare ``calculator()``
calls in a tight loop), because absolute timings on a shared machine are noisy.

    python benchmarks/env_throughput.py --gsm8k ../shared/data/gsm8k/test.jsonl --workers 2

Without ``--gsm8k`` only Arith-Calc runs (it needs no data). With ``--baseline-rev REV`` the one-env replays of the
calculator envs are also timed side by side with the ``agentfly_envs`` of git revision ``REV``, in subprocesses,
interleaved over ``--ab-rounds`` rounds (see ``side_by_side.py``), and the two sides' transcripts of a golden and
a sloppy replay are compared (see ``transcripts.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
from side_by_side import REPO_ROOT, export_revision, interleaved, ratio_summary, run_child
from transcripts import transcript_digest

import agentfly_envs  # noqa: F401  (registers the envs)
from agentfly_envs.tasks import TaskSource
from agentfly_envs.tools import ToolError
from agentfly_envs.tools.calculator import calculator


@dataclass
class ReplayStats:
    """Counts and wall time of one replay run (and, for a one-env replay, the CPU time of the env's process: the
    time a step costs besides what it waits for, such as the sandbox's interpreters, which are other processes)."""

    steps: int = 0
    calculator_calls: int = 0
    episodes: int = 0
    solved: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0

    def row(self) -> dict[str, float]:
        return {
            "env_steps_per_s": self.steps / self.seconds,
            "calculator_calls_per_s": self.calculator_calls / self.seconds,
            "episodes_per_s": self.episodes / self.seconds,
            "golden_solved": self.solved / max(self.episodes, 1),
        }


def _matches_annotation(output: str, annotated: str) -> bool:
    """Whether the calculator's output equals the annotation at the annotation's printed precision."""
    try:
        value, expected = float(output), float(annotated.replace(",", "").rstrip("."))
    except ValueError:
        return output.strip() == annotated.strip()
    decimals = len(annotated.partition(".")[2]) if "." in annotated else 0
    return math.isclose(round(value, decimals), expected, rel_tol=1e-9, abs_tol=10**-decimals / 2)


def median_run(runs: list[ReplayStats]) -> ReplayStats:
    """The run with the median env steps/s (repeats damp the noise of a shared machine)."""
    return sorted(runs, key=lambda run: run.steps / run.seconds)[len(runs) // 2]


def baseline_calculator_calls_per_s(expressions: Sequence[str], seconds: float = 1.0) -> float:
    """Bare ``calculator(expression)`` calls per second over ``expressions`` (the same-run baseline)."""
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for expression in expressions:
            with contextlib.suppress(ToolError):
                calculator(expression)
        calls += len(expressions)
    return calls / (time.perf_counter() - start)


def annotation_agreement(tasks: TaskSource) -> tuple[int, int]:
    """(calculator outputs equal to the data's ``<<expr=value>>`` annotation, annotations) over all tasks."""
    matches = total = 0
    for index in range(len(tasks)):
        golden = tasks.golden(tasks.row(index))
        for expression, annotated in zip(golden.expressions, golden.results, strict=True):
            total += 1
            with contextlib.suppress(ToolError):
                matches += _matches_annotation(calculator(expression), annotated)
    return matches, total


def golden_plans(planner: gym.Env) -> list[list]:
    """The golden actions of every task of the (unwrapped) env ``planner``, by task index."""
    return [planner.golden_actions(planner.tasks.row(index)) for index in range(len(planner.tasks))]


def replay_single(env_id: str, plans: Sequence[list], pause_s: float = 0.0, **kwargs) -> ReplayStats:
    """Replays ``plans[i]`` (the golden actions of task ``i``) for every task in one env; times only reset/step,
    after one untimed reset (which may start a process, such as a world's JVM). ``pause_s``: seconds slept before
    each step (in the wall time, not in the CPU time)."""
    env = gym.make(env_id, **kwargs)
    env.reset(options={"index": 0})
    stats = ReplayStats()
    start, cpu_start = time.perf_counter(), time.process_time()
    for index, actions in enumerate(plans):
        env.reset(options={"index": index})
        for action in actions:
            if pause_s:
                time.sleep(pause_s)
            _, reward, _, _, info = env.step(action)
            stats.steps += 1
            stats.calculator_calls += len(info["tool_calls"])
        stats.episodes += 1
        stats.solved += reward == 1.0
    stats.seconds, stats.cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    env.close()
    return stats


def replay_vector(
    env_id: str, plans: Sequence[list], num_envs: int, num_steps: int, mode: str = "async", **kwargs
) -> ReplayStats:
    """Steps ``make_vec(..., mode)`` for ``num_steps`` batched steps, every sub-env following
    ``plans[i]`` for whatever task ``i`` it drew (Gymnasium's next-step autoreset), so the timed
    loop is the vector env plus list lookups."""
    envs = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode=mode, **kwargs)
    _, infos = envs.reset(seed=0)

    def plan(i: int) -> list:
        return list(plans[int(infos["task_index"][i])])

    queues = [plan(i) for i in range(num_envs)]
    stats = ReplayStats()
    start = time.perf_counter()
    for _ in range(num_steps):
        actions = [queue.pop(0) if queue else "" for queue in queues]
        _, rewards, terminated, truncated, infos = envs.step(actions)
        for i in range(num_envs):
            if "task_index" in infos and infos["_task_index"][i]:  # this sub-env was just reset
                queues[i] = plan(i)
                continue
            stats.steps += 1
            stats.calculator_calls += len(infos["tool_calls"][i])
            if terminated[i] or truncated[i]:
                stats.episodes += 1
                stats.solved += rewards[i] == 1.0
    stats.seconds = time.perf_counter() - start
    envs.close()
    return stats


def side_by_side_line(result: dict[str, Any]) -> str:
    """One line of a :func:`side_by_side` result."""
    ratio, cpu = result["ratio"], result["cpu_ratio"]
    median = {key: statistics.median(result[key]) for key in result if key.startswith(("current_", "baseline_"))}
    floor = ""
    if "beyond_floor_ratio" in result:
        beyond = result["beyond_floor_ratio"]
        floor = (
            f"; floor (a calculator step after as long a wait) {median['current_floor_cpu_us_per_step']:.1f} vs "
            f"{median['baseline_floor_cpu_us_per_step']:.1f} us/step, CPU beyond it {beyond['median']:.2f}x less "
            f"(min {beyond['min']:.2f}x, max {beyond['max']:.2f}x)"
        )
    return (
        f"one env vs {result['revision']} (medians of {result['rounds']} interleaved rounds): "
        f"{median['current_steps_per_s']:.0f} vs {median['baseline_steps_per_s']:.0f} env steps/s, ratio min "
        f"{ratio['min']:.2f}x, median {ratio['median']:.2f}x, max {ratio['max']:.2f}x; env process CPU "
        f"{median['current_cpu_us_per_step']:.1f} vs {median['baseline_cpu_us_per_step']:.1f} us/step, "
        f"{cpu['median']:.2f}x less (min {cpu['min']:.2f}x, max {cpu['max']:.2f}x); "
        f"transcripts identical: {'yes' if result['transcripts_identical'] else 'NO'}{floor}"
    )


def markdown_table(results: dict, workers: int) -> str:
    """The results as the README's table (one row per run and mode)."""
    lines = [
        "| run | mode | env steps/s | tool calls/s | episodes/s | golden episodes scoring 1.0 |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for label, result in results.items():
        for mode, name in (("single", "one env"), (f"sync_x{workers}", f"`make_vec` sync ×{workers}"),
                           (f"async_x{workers}", f"`make_vec` async ×{workers}")):  # fmt: skip
            row = result[mode]
            solved = f"{row['golden_solved']:.2%}"
            first = f"{label} ({result['episodes']} episodes)" if mode == "single" else ""
            lines.append(
                f"| {first} | {name} | {row['env_steps_per_s']:,.0f} | {row['calculator_calls_per_s']:,.0f} | "
                f"{row['episodes_per_s']:,.1f} | {solved} |"
            )
    return "\n".join(lines)


def child_run(spec: dict[str, Any]) -> dict[str, Any]:
    """One side of a side-by-side round, in the process that ``--child SPEC`` starts: ``spec["passes"]`` one-env
    golden replays of ``spec["env_id"]`` made with ``spec["kwargs"]``, and with ``spec["transcript"]`` the
    :func:`~transcripts.transcript_digest` of the env's golden and sloppy replays. With ``spec["floor"]`` (an env
    whose ``kwargs`` name its ``tools``) also the floor of its steps' CPU time: the same tasks on the env's default
    tools (the calculator), each step after a sleep as long as an average step of the timed pass. A step that
    follows a wait of milliseconds costs several times the CPU time of one that follows another step at once (its
    caches gone cold), whatever the wait was for: the floor is what any step of the env costs after the wait that
    the tool's own process imposes, so the tool's overhead is the CPU time beyond it.

    Returns:
        ``{"env_steps_per_s": the passes' median, "cpu_us_per_step": that pass's CPU time of this process per step
        (microseconds), "golden_solved": fraction, "transcript": hex digest or None}``, and with ``spec["floor"]``
        ``"floor_cpu_us_per_step"`` (microseconds).
    """
    env_id, kwargs = spec["env_id"], spec["kwargs"]
    plans = golden_plans(gym.make(env_id, **kwargs).unwrapped)
    run = median_run([replay_single(env_id, plans, **kwargs) for _ in range(spec["passes"])])
    result = {
        "env_steps_per_s": run.steps / run.seconds,
        "cpu_us_per_step": run.cpu_seconds / run.steps * 1e6,
        "golden_solved": run.solved / run.episodes,
        "transcript": transcript_digest(env_id, plans, **kwargs) if spec["transcript"] else None,
    }
    if spec.get("floor"):
        default_tools = {key: value for key, value in kwargs.items() if key != "tools"}
        floor_plans = golden_plans(gym.make(env_id, **default_tools).unwrapped)
        floor = replay_single(env_id, floor_plans, pause_s=run.seconds / run.steps, **default_tools)
        result["floor_cpu_us_per_step"] = floor.cpu_seconds / floor.steps * 1e6
    return result


def side_by_side(
    env_id: str, kwargs: dict[str, Any], revision: str, baseline_root: Path, rounds: int, passes: int
) -> dict[str, Any]:
    """One-env golden replay steps/s, and the env process's CPU time per step, of this checkout and of
    ``revision`` (its ``agentfly_envs`` exported into ``baseline_root``), in interleaved subprocess rounds.

    Returns:
        ``{"revision", "rounds", "current_steps_per_s": [per round], "baseline_steps_per_s": [per round],
        "ratio": {"min", "median", "max"} of current / baseline steps/s over the rounds, "current_cpu_us_per_step",
        "baseline_cpu_us_per_step": [per round], "cpu_ratio": {"min", "median", "max"} of baseline / current CPU
        time per step, "transcripts_identical": bool, "golden_solved": {"current", "baseline"}}``; for an env whose
        ``kwargs`` name its tools, also each side's ``"current_floor_cpu_us_per_step"`` and
        ``"baseline_floor_cpu_us_per_step"`` (see :func:`child_run`) and ``"beyond_floor_ratio"``, the
        ``{"min", "median", "max"}`` of baseline / current CPU time per step beyond each side's floor.
    """
    script = Path(__file__).resolve()
    floor = "tools" in kwargs

    def side(root: Path) -> Any:
        def run(number: int) -> dict[str, Any]:
            spec = {"env_id": env_id, "kwargs": kwargs, "passes": passes, "transcript": number == 0, "floor": floor}
            return run_child(script, root, ["--child", json.dumps(spec)])

        return run

    pairs = interleaved(side(REPO_ROOT), side(baseline_root), rounds)
    current, baseline = ([pair[side]["env_steps_per_s"] for pair in pairs] for side in (0, 1))
    current_cpu, baseline_cpu = ([pair[side]["cpu_us_per_step"] for pair in pairs] for side in (0, 1))
    floors = {}
    if floor:
        current_floor, baseline_floor = ([pair[side]["floor_cpu_us_per_step"] for pair in pairs] for side in (0, 1))
        beyond = zip(current_cpu, current_floor, baseline_cpu, baseline_floor, strict=True)
        floors = {
            "current_floor_cpu_us_per_step": current_floor,
            "baseline_floor_cpu_us_per_step": baseline_floor,
            "beyond_floor_ratio": ratio_summary([(b - b_floor) / (a - a_floor) for a, a_floor, b, b_floor in beyond]),
        }
    return {
        "revision": revision,
        "rounds": rounds,
        "current_steps_per_s": current,
        "baseline_steps_per_s": baseline,
        "ratio": ratio_summary([a / b for a, b in zip(current, baseline, strict=True)]),
        "current_cpu_us_per_step": current_cpu,
        "baseline_cpu_us_per_step": baseline_cpu,
        "cpu_ratio": ratio_summary([b / a for a, b in zip(current_cpu, baseline_cpu, strict=True)]),
        "transcripts_identical": pairs[0][0]["transcript"] == pairs[0][1]["transcript"],
        "golden_solved": {"current": pairs[0][0]["golden_solved"], "baseline": pairs[0][1]["golden_solved"]},
        **floors,
    }


def measure(runs: list[tuple], args: argparse.Namespace, baseline_root: Path | None) -> dict[str, dict[str, Any]]:
    """Every figure of every run ``(label, env id, make kwargs, vector steps, repeats)``, by label; with
    ``baseline_root`` (the ``--baseline-rev`` package) also the side-by-side timing."""
    results = {}
    for label, env_id, kwargs, vector_steps, repeats in runs:
        planner = gym.make(env_id, **kwargs).unwrapped
        plans = golden_plans(planner)
        single = median_run([replay_single(env_id, plans, **kwargs) for _ in range(repeats)])
        rows = [planner.tasks.row(i) for i in range(min(200, len(planner.tasks)))]
        expressions = [e for row in rows for e in planner.tasks.golden(row).expressions]
        baseline = statistics.median_low(baseline_calculator_calls_per_s(expressions, 0.5) for _ in range(repeats))
        matches, annotations = annotation_agreement(planner.tasks)
        result = {
            "env_id": env_id,
            "kwargs": kwargs,
            "episodes": single.episodes,
            "annotations": annotations,
            "baseline_bare_calculator_calls_per_s": baseline,
            "single": single.row(),
            "single_cpu_us_per_step": single.cpu_seconds / single.steps * 1e6,
            "calculator_matches_annotation": matches / max(annotations, 1),
            "repeats": repeats,
        }
        for mode in ("sync", "async"):
            vector = median_run(
                [replay_vector(env_id, plans, args.workers, vector_steps, mode=mode, **kwargs) for _ in range(repeats)]
            )
            result[f"{mode}_x{args.workers}"] = vector.row()
        if baseline_root is not None:
            result["side_by_side"] = side_by_side(
                env_id, kwargs, args.baseline_rev, baseline_root, args.ab_rounds, repeats
            )
        results[label] = result
    return results


def main(argv: Sequence[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gsm8k", help="GSM8K-format JSONL/JSON/parquet file (e.g. ../shared/data/gsm8k/test.jsonl)")
    parser.add_argument("--arith-episodes", type=int, default=2000, help="Arith-Calc episodes to replay")
    parser.add_argument("--workers", type=int, default=2, help="sub-envs of the vector envs")
    parser.add_argument("--vector-steps", type=int, default=1000, help="batched steps of each vector env")
    parser.add_argument("--python-episodes", type=int, default=40, help="episodes of the python-tool run (0: skip)")
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats per figure; the median is reported")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument(
        "--baseline-rev", help="git revision whose agentfly_envs the calculator envs' one-env replay is timed against"
    )
    parser.add_argument("--ab-rounds", type=int, default=5, help="interleaved rounds of --baseline-rev's timing")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # one side of a --baseline-rev round (a JSON spec)
    args = parser.parse_args(argv)
    if args.child:
        result = child_run(json.loads(args.child))
        print(json.dumps(result))
        return result

    # (label, env id, make kwargs: every task of the env is one golden episode, batched vector steps, repeats)
    arith, repeats = {"level": "hard", "num_tasks": args.arith_episodes}, args.repeats
    runs = [("Arith-Calc (hard)", "agentfly/Arith-Calc", arith, args.vector_steps, repeats)]
    if args.gsm8k:
        runs.append(("GSM8K-Calc", "agentfly/GSM8K-Calc", {"data_files": args.gsm8k}, args.vector_steps, repeats))
    if args.python_episodes:
        slow = {"level": "hard", "num_tasks": args.python_episodes, "tools": ("python",)}
        runs.append(("Arith, python tool", "agentfly/Arith-Calc", slow, 4 * args.python_episodes, 1))
    with tempfile.TemporaryDirectory(prefix="agentfly-baseline-") as folder:
        baseline_root = export_revision(args.baseline_rev, Path(folder)) if args.baseline_rev else None
        results = measure(runs, args, baseline_root)

    for label, result in results.items():
        print(f"\n{label}: {result['episodes']} golden episodes, {result['annotations']} calculator annotations")
        single_steps = result["single"]["env_steps_per_s"]
        for mode in ("single", f"sync_x{args.workers}", f"async_x{args.workers}"):
            row = result[mode]
            print(
                f"  {mode:>8}: {row['env_steps_per_s']:8.0f} env steps/s "
                f"({row['env_steps_per_s'] / single_steps:4.2f}x single) "
                f"{row['calculator_calls_per_s']:8.0f} tool calls/s {row['episodes_per_s']:7.1f} episodes/s  "
                f"golden solved {row['golden_solved']:.4f}"
            )
        ratio = result["single"]["calculator_calls_per_s"] / result["baseline_bare_calculator_calls_per_s"]
        print(
            f"  baseline, bare calculator() calls: {result['baseline_bare_calculator_calls_per_s']:.0f}/s "
            f"(env tool calls/s = {ratio:.2f}x baseline); "
            f"calculator = annotation on {result['calculator_matches_annotation']:.4f} of calls"
        )
        print(f"  one env: this process's CPU time {result['single_cpu_us_per_step']:.1f} us per step")
        if "side_by_side" in result:
            print("  " + side_by_side_line(result["side_by_side"]))
    print("\n" + markdown_table(results, args.workers))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2, default=float)
    return results


if __name__ == "__main__":
    main()
