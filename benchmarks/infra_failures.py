"""The quickstart's learning when a share of its tool calls fail for reasons that are not the agent's: those failures
left out of training (replayed, else excluded) against the same failures scored as the agent's errors.

Each run is the embedded quickstart job through the CLI on ``chaos/Arith-Calc``: ``agentfly/Arith-Calc`` whose
calculator fails on a share ``--rates`` of its calls (drawn at random) as a dead worker would. Under ``infra`` the
failure is an :class:`~agentfly_envs.InfrastructureError` (the episode is replayed, ``rollout.retries``, else left
out); under ``scored`` the same failure is an ``Error:`` observation the episode goes on from and is scored with,
as every infrastructure failure was before agentfly told them apart. Printed per run: the greedy validation
accuracy after the warm start and after RL, the last step's training reward and the failures counted.

    python benchmarks/infra_failures.py --rates 0 0.1 0.3 --out benchmarks/results/infra_failures.json
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from learning_spread import run_seed

CHAOS = """
import functools
import random

import gymnasium as gym

from agentfly_envs import InfrastructureError
from agentfly_envs.tools import Tool, ToolError

RATE, FAILURE = {rate}, {failure}
_faults = random.Random(0)


def chaos_arith(**kwargs):
    \"\"\"Arith-Calc whose calculator (a tool of this env only) fails on a share RATE of its calls.\"\"\"
    env = gym.make("agentfly/Arith-Calc", **kwargs).unwrapped
    compute = env.tools["calculator"].function

    @functools.wraps(compute)
    def calculator(*args, **kwargs):
        if _faults.random() < RATE:
            raise FAILURE("the calculator's worker died")
        return compute(*args, **kwargs)

    env.tools["calculator"] = Tool(calculator, name="calculator")
    return env


gym.register("chaos/Arith-Calc", entry_point=chaos_arith)
"""
MODES = {"infra": "InfrastructureError", "scored": "ToolError"}
"""How a failure reaches the trainer: left out of training, or scored as the agent's error."""


def run(rate: float, mode: str, seed: int, scratch: Path, overrides: list[str]) -> dict[str, float | str]:
    """One quickstart run with calculator failures at ``rate`` reaching the trainer as ``mode`` says."""
    chaos = scratch / f"chaos_{mode}_{rate}.py"
    chaos.write_text(CHAOS.format(rate=rate, failure=MODES[mode]))
    directory = scratch / f"{mode}_{rate}"
    chaotic = ["agent.env=chaos/Arith-Calc", f"agent.imports=[{chaos}]", *overrides]
    figures: dict[str, float | str] = {"rate": rate, "mode": mode, **run_seed(seed, directory, chaotic)}
    records = [json.loads(line) for line in (directory / "metrics.jsonl").read_text().splitlines()]
    steps = [record for record in records if "rollout/infra_failures" in record and "reward/mean" in record]
    figures["final_reward"] = steps[-1]["reward/mean"]
    figures["infra_failures"] = sum(record["rollout/infra_failures"] for record in steps)
    figures["excluded"] = sum(record["rollout/excluded"] for record in steps)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", type=float, nargs="+", default=[0.0, 0.1, 0.3], help="shares of calls failing")
    parser.add_argument("--seed", type=int, default=0, help="trainer.seed of every run")
    parser.add_argument("--out", type=Path, help="write the figures here as JSON")
    parser.add_argument("overrides", nargs="*", help="config overrides for every run (key=value)")
    args = parser.parse_args()

    row = "{rate:>5.2f} {mode:>7} {before:>11.3f} {after:>10.3f} {final_reward:>7.3f} {infra_failures:>9.0f} "
    row += "{excluded:>9.0f}"
    runs = []
    print(f"{'rate':>5} {'mode':>7} {'val before':>11} {'val after':>10} {'reward':>7} {'failures':>9} {'excluded':>9}")
    with tempfile.TemporaryDirectory() as scratch:
        for rate in args.rates:
            for mode in MODES if rate > 0 else ["infra"]:  # without failures the two are one run
                runs.append(run(rate, mode, args.seed, Path(scratch), args.overrides))
                print(row.format(**runs[-1]), flush=True)
    if args.out:
        args.out.write_text(json.dumps({"seed": args.seed, "overrides": args.overrides, "runs": runs}, indent=2) + "\n")


if __name__ == "__main__":
    main()
