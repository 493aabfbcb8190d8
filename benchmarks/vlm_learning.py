"""A vision-language policy learns from screenshots with RL: greedy accuracy before and after, per seed and spread.

The task (``agentfly/TestRedOrBlue``, ``tests/helpers/red_or_blue.py``): one turn, a screen with a red or a blue square
and the same question every time, "Red (1) or blue (2)?", so only the image tells the answer. Per seed: the tiny
Qwen2.5-VL is warm-started in this process on an imperfect demonstrator (it says ``1`` to every red square and to
3 of 5 blue ones; greedy, the policy then says ``1`` to everything, accuracy 1/2), then GRPO runs through the CLI
(``agent_type=gui``, ``template=qwen2_5_vl``, ``obs=screenshot``, HF sampling) and validates greedily on 32 screens it
never trains on, before and after. Prints per seed the accuracies and the gain, then the gains' spread.

    python benchmarks/vlm_learning.py --seeds 0 1 2 3 4 --out benchmarks/results/vlm_learning.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from learning_spread import print_seed, print_spread, run_seed  # this folder is on the path of a script run from it

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: the task's module
from tests.helpers.red_or_blue import RL_JOB, warm_start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4], help="trainer.seed values")
    parser.add_argument("--warm-start-steps", type=int, default=32, help="supervised batches before RL")
    parser.add_argument("--out", type=Path, help="write the figures here as JSON")
    parser.add_argument("overrides", nargs="*", help="config overrides of the RL run (key=value)")
    args = parser.parse_args()

    runs = []
    with tempfile.TemporaryDirectory() as scratch:
        for seed in args.seeds:
            start = time.perf_counter()
            model = warm_start(Path(scratch) / f"warm-{seed}", seed, steps=args.warm_start_steps)
            warm_seconds = time.perf_counter() - start
            job = [*RL_JOB, f"actor_rollout_ref.model.path={model}", *args.overrides]
            runs.append({**run_seed(seed, Path(scratch) / str(seed), job, preset=None), "warm_start_s": warm_seconds})
            print_seed(runs[-1])
    summary = print_spread(runs)
    if args.out:
        figures = {"engine": "hf", "warm_start_steps": args.warm_start_steps, "overrides": [*RL_JOB, *args.overrides],
                   "runs": runs, "gain": summary}  # fmt: skip
        args.out.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
