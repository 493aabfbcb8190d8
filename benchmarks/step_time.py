"""Training step time split (rollout / env / weight sync / update) with the HF and the vLLM rollout engine.

Runs the same short GRPO job through the CLI once per engine (the quickstart preset: tiny model, SFT warm start,
Arith-Calc; vLLM colocated, asynchronous episodes) and prints, per engine, the mean seconds of a training step
and of its parts, from each run's ``metrics.jsonl``: ``timing/rollout_s`` (the weight sync, sampling and env
steps), ``timing/env_s`` (env steps, inside the rollout), ``timing/weight_sync_s`` (handing the policy's weights to
the engine, inside the rollout) and ``timing/update_s`` (the rest of the step: log-prob recomputation, loss,
backward, optimiser). The first step of each run (warm-up) is left out.
Ratios are against the HF run of the same invocation.

    python benchmarks/step_time.py --steps 8 --out benchmarks/results/step_time.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

PARTS = ("step_time", "timing/rollout_s", "timing/env_s", "timing/weight_sync_s", "timing/update_s")
ENGINES = {
    "hf": [],
    "vllm": [
        "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.rollout.kv_cache_memory_bytes=268435456",
        "actor_rollout_ref.rollout.max_model_len=1024",
    ],
}


def step_records(name: str, arguments: list[str], directory: Path) -> list[dict[str, float]]:
    """The per-step records (steps 2..N) of one CLI training run, ``python -m agentfly_train`` with ``arguments``,
    written under ``directory``; exits naming the run (``name``) if it fails."""
    command = [sys.executable, "-m", "agentfly_train", "--no-progress", *arguments,
               f"trainer.default_local_dir={directory}"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the {name} run failed: {done.stderr.strip().splitlines()[-1]}")
    records = [json.loads(line) for line in (directory / "metrics.jsonl").read_text().splitlines()]
    return [record for record in records if "step_time" in record and record["step"] > 1]


def step_arguments(doc: str, default_steps: int) -> argparse.Namespace:
    """``--steps``, ``--out`` and config overrides: the command line of a script comparing the steps of runs (its
    description: the first line of ``doc``)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--steps", type=int, default=default_steps, help="training steps per run (first left out)")
    parser.add_argument("--out", type=Path, help="write the figures here as JSON")
    parser.add_argument("overrides", nargs="*", help="config overrides for both runs (key=value)")
    args = parser.parse_args()
    if args.steps < 2:
        parser.error("--steps must be at least 2 (the first step is left out)")
    return args


def mean_parts(
    names: Sequence[str],
    run: Callable[[str, int, Path, list[str]], list[dict[str, float]]],
    steps: int,
    overrides: list[str],
    parts: Sequence[str],
) -> dict[str, dict[str, float]]:
    """Per job of ``names``, the mean over its step records (``run(name, steps, directory, overrides)``, each job in
    its own scratch directory) of each of ``parts`` (0 where a record lacks one)."""
    figures: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for name in names:
            records = run(name, steps, Path(scratch) / name, overrides)
            figures[name] = {part: statistics.fmean(r.get(part, 0.0) for r in records) for part in parts}
    return figures


def run_job(engine: str, steps: int, directory: Path, extra: list[str]) -> list[dict[str, float]]:
    """The per-step records (steps 2..N) of one CLI training run on ``engine``."""
    arguments = ["--config", "quickstart", f"trainer.total_training_steps={steps}", "trainer.val_before_train=false",
                 "data.val_size=0", *ENGINES[engine], *extra]  # fmt: skip
    return step_records(engine, arguments, directory)


def main() -> None:
    args = step_arguments(__doc__, default_steps=8)

    figures = mean_parts(list(ENGINES), run_job, args.steps, args.overrides, PARTS)
    baseline = figures["hf"]["step_time"]
    print(f"{'engine':>6} {'step s':>7} {'rollout':>8} {'env':>7} {'sync':>7} {'update':>7} {'vs hf':>6}")
    for engine, parts in figures.items():
        print(
            f"{engine:>6} {parts['step_time']:7.2f} {parts['timing/rollout_s']:8.2f} {parts['timing/env_s']:7.2f} "
            f"{parts['timing/weight_sync_s']:7.3f} {parts['timing/update_s']:7.2f} "
            f"{parts['step_time'] / baseline:5.2f}x"
        )
    if args.out:
        args.out.write_text(json.dumps({"steps": args.steps, "overrides": args.overrides, **figures}, indent=2))


if __name__ == "__main__":
    main()
