"""Learning curves on the long-horizon maze (``agentfly/Maze-Nav``): the success rate per RL step of each advantage
estimator, after the same warm start, over several seeds.

Each (estimator, seed) pair runs the CLI's job (the quickstart preset with :data:`MAZE`: the tiny model warm-started
on the mazes' golden episodes, then RL) with ``algorithm.adv_estimator`` set to the estimator and
``trainer.seed`` to the seed, the same budget for every estimator. The warm start depends on the seed only, so the
estimators of a seed start from the same model. The maze pays its progress at each step (``progress_reward``), so
an estimator that credits turns (``gigpo``) sees per-turn rewards, while the episode's return, what ``grpo``
credits, is 1 for reaching the exit and 0 otherwise.

Printed per estimator: the training success rate (the share of the step's episodes that reached the exit) over the
first and the last ``--window`` steps, and the greedy validation success on the training mazes before and after RL,
each as the mean over seeds with the minimum and maximum; JSON with every run's curve goes to ``--out``.

    python benchmarks/long_horizon.py --estimators grpo,grpo_turns,gigpo --seeds 0,1,2 --jobs 2 \\
        --out benchmarks/results/long_horizon.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from learning_spread import run_job  # this folder is on the path of a script run from it

MAZE = (
    "agent.env=agentfly/Maze-Nav",
    "agent.env_kwargs={num_tasks: 4}",  # four 4 x 4 mazes, 10-15 moves from start to exit
    "data.val_env_kwargs={num_tasks: 4}",  # validation: greedy episodes on the same mazes
    "data.val_size=4",
    "data.train_batch_size=4",
    "agent.num_chains=4",
    "agent.max_turns=20",
    "agent.max_tokens_per_turn=32",  # a move is 25-27 tokens of the tiny tokenizer, its turn end included
    "actor_rollout_ref.rollout.response_length=1200",  # 20 turns of a move and a room (about 20 tokens)
    "actor_rollout_ref.model.tiny_hidden_size=64",
    "sft.steps=300",  # sampled at temperature 1, the policy of 150 steps broke a call in a turn of four
    "sft.lr=2e-3",
    "sft.batch_size=4",
    "sft.num_demos=64",
    "sft.guess_fraction=0",
    "trainer.experiment_name=long_horizon",
)
"""The job's overrides on top of the quickstart preset."""


def run(estimator: str, seed: int, steps: int, directory: Path, overrides: list[str]) -> dict:
    """One CLI run: its per-step training success rate and mean return, the validation success before and after RL,
    and its wall time in seconds."""
    job = [*MAZE, f"algorithm.adv_estimator={estimator}", f"trainer.total_training_steps={steps}", *overrides]
    records, seconds = run_job(seed, directory, job, label=f"{estimator} ")
    train = [r for r in records if "accuracy" in r]
    validation = [r["val/accuracy"] for r in records if "val/accuracy" in r]
    return {"estimator": estimator, "seed": seed, "success": [r["accuracy"] for r in train],
            "reward": [r["reward/mean"] for r in train], "val_before": validation[0], "val_after": validation[-1],
            "seconds": seconds}  # fmt: skip


def spread(values: list[float]) -> dict[str, float]:
    """The mean, minimum and maximum of ``values``."""
    return {"mean": statistics.fmean(values), "min": min(values), "max": max(values)}


def summarise(runs: list[dict], window: int) -> dict[str, dict[str, float]]:
    """One estimator's figures over its seeds: training success over the first and last ``window`` steps, their
    difference, and the validation success before and after RL, each a :func:`spread`."""
    first = [statistics.fmean(r["success"][:window]) for r in runs]
    last = [statistics.fmean(r["success"][-window:]) for r in runs]
    return {
        "first_steps": spread(first),
        "last_steps": spread(last),
        "gain": spread([b - a for a, b in zip(first, last, strict=True)]),
        "val_before": spread([r["val_before"] for r in runs]),
        "val_after": spread([r["val_after"] for r in runs]),
        "seconds": spread([r["seconds"] for r in runs]),
    }


def print_table(summaries: dict[str, dict[str, dict[str, float]]], window: int) -> None:
    """The summaries as a table: mean [min, max] over the seeds."""
    columns = ["first_steps", "last_steps", "gain", "val_before", "val_after"]
    titles = [f"success, first {window}", f"success, last {window}", "gain", "val before", "val after"]
    print(f"{'estimator':<12}" + "".join(f"{title:>24}" for title in titles))
    for estimator, summary in summaries.items():
        cells = [
            "{mean:+.3f} [{min:+.3f}, {max:+.3f}]".format(**summary[c])
            if c == "gain"
            else "{mean:.3f} [{min:.3f}, {max:.3f}]".format(**summary[c])
            for c in columns
        ]
        print(f"{estimator:<12}" + "".join(f"{cell:>24}" for cell in cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--estimators", default="grpo,grpo_turns,gigpo", help="comma-separated estimator names")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated trainer.seed values")
    parser.add_argument("--steps", type=int, default=16, help="RL steps per run (the same budget for each)")
    parser.add_argument("--window", type=int, default=3, help="steps averaged at the start and end of a curve")
    parser.add_argument("--out", type=Path, help="write the figures and curves here as JSON")
    parser.add_argument("--jobs", type=int, default=1, help="runs at a time (their wall times then share the CPUs)")
    parser.add_argument("--runs-dir", type=Path, help="keep the runs' directories here (ESTIMATOR-SEED)")
    parser.add_argument("overrides", nargs="*", help="config overrides for every run (key=value)")
    args = parser.parse_args()
    estimators = [name for name in args.estimators.split(",") if name]
    seeds = [int(seed) for seed in args.seeds.split(",") if seed]
    window = min(args.window, args.steps)

    runs: dict[str, list[dict]] = {estimator: [] for estimator in estimators}
    pairs = [(estimator, seed) for seed in seeds for estimator in estimators]  # seed-major: the first seeds first
    with tempfile.TemporaryDirectory() as scratch, ThreadPoolExecutor(args.jobs) as pool:
        runs_dir = args.runs_dir or Path(scratch)
        futures = [pool.submit(run, e, s, args.steps, runs_dir / f"{e}-{s}", args.overrides) for e, s in pairs]
        for future in futures:
            result = future.result()
            runs[result["estimator"]].append(result)
            print(f"{result['estimator']} seed {result['seed']}: success "
                  f"{' '.join(f'{s:.2f}' for s in result['success'])}; validation {result['val_before']:.3f} -> "
                  f"{result['val_after']:.3f}, {result['seconds']:.0f} s", flush=True)  # fmt: skip
    summaries = {estimator: summarise(estimator_runs, window) for estimator, estimator_runs in runs.items()}
    print_table(summaries, window)
    if args.out:
        figures = {"env": "agentfly/Maze-Nav", "job": [*MAZE, *args.overrides], "steps": args.steps,
                   "window": window, "seeds": seeds, "summary": summaries, "runs": runs}  # fmt: skip
        args.out.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
