"""The trainer's memory in a vision-language training step: peak resident set of the training process for a step of
64 two-turn episodes with one screenshot per turn, against the same step with 8 episodes (measured in the same run).

The job: one GRPO step through the CLI on the tiny Qwen2.5-VL (``agentfly:tiny-vl``, HF sampling), on
``agentfly/TestRedOrBlue`` with ``rounds=2`` (a screen per turn, the next screen in the tool message after each
answer) at MiniWoB's screen size, 160 x 210 pixels (48 image tokens); ``agent.max_images`` unset, so each episode's
context keeps both screenshots. No browser runs: the screens are drawn in the process, so the figure is the trainer's
alone (a MiniWoB env's Chromium is measured in ``benchmarks/web_throughput.py``). Each job's peak is that of its own
process (``os.wait4``), model, rollout, log-probabilities, loss and optimiser step included.

    python benchmarks/vlm_memory.py --episodes 64 --baseline-episodes 8 --out benchmarks/results/vlm_memory.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CHAINS = 8
JOB = (
    "actor_rollout_ref.model.path=agentfly:tiny-vl",
    "agent.env=agentfly/TestRedOrBlue",
    "agent.imports=[tests/helpers/red_or_blue.py]",
    "agent.agent_type=gui",
    "agent.template=qwen2_5_vl",
    "agent.env_kwargs={obs: screenshot, rounds: 2, screen_size: [160, 210], num_tasks: 256}",
    "agent.max_turns=2",
    "agent.max_tokens_per_turn=4",
    "actor_rollout_ref.rollout.response_length=160",  # both answers and the second screen's 48 image tokens
    f"agent.num_chains={CHAINS}",
    "algorithm.adv_estimator=grpo",
    "data.val_size=0",
    "sft.enable=false",
    "trainer.total_training_steps=1",
)
"""The CLI overrides of the step (``data.train_batch_size`` is ``episodes / 8``)."""
BUDGET_GIB = 8.0
"""The issue's bound on the trainer's memory for 64 such episodes."""


def peak_rss_mib(episodes: int, directory: Path, extra: list[str]) -> dict[str, float]:
    """Runs the step with ``episodes`` episodes; its process's peak resident set (MiB), its turns and screenshots.

    Raises:
        SystemExit: the run failed (its last line).
    """
    sizes = [f"data.train_batch_size={episodes // CHAINS}", f"trainer.default_local_dir={directory}"]
    command = [sys.executable, "-m", "agentfly_train", "--no-progress", *JOB, *sizes, *extra]
    with tempfile.TemporaryFile("w+") as err:
        process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=err, text=True)
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        if process.returncode != 0:
            err.seek(0)
            raise SystemExit(f"the {episodes}-episode step failed: {err.read().strip().splitlines()[-1]}")
    [step] = [r for r in map(json.loads, (directory / "metrics.jsonl").read_text().splitlines()) if "loss" in r]
    return {
        "episodes": episodes,
        "turns_mean": step["episode/turns"],
        "peak_rss_mib": usage.ru_maxrss / 1024,  # Linux reports KiB
        "step_time": step["step_time"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=64, help="episodes of the measured step (a multiple of 8)")
    parser.add_argument("--baseline-episodes", type=int, default=8, help="episodes of the baseline step")
    parser.add_argument("--out", type=Path, help="write the figures here as JSON")
    parser.add_argument("overrides", nargs="*", help="config overrides of both steps (key=value)")
    args = parser.parse_args()
    if args.episodes % CHAINS or args.baseline_episodes % CHAINS:
        parser.error(f"--episodes and --baseline-episodes must be multiples of {CHAINS} (chains per task)")

    with tempfile.TemporaryDirectory() as scratch:
        runs = [
            peak_rss_mib(n, Path(scratch) / str(n), args.overrides) for n in (args.baseline_episodes, args.episodes)
        ]
    base, measured = runs
    growth = measured["peak_rss_mib"] - base["peak_rss_mib"]
    for run in runs:
        print(f"{run['episodes']:>4} episodes ({run['turns_mean']:.2f} turns each, a screenshot per turn): "
              f"peak RSS {run['peak_rss_mib']:.0f} MiB, step {run['step_time']:.1f} s")  # fmt: skip
    ratio, share = measured["peak_rss_mib"] / base["peak_rss_mib"], measured["peak_rss_mib"] / 1024 / BUDGET_GIB
    print(f"{measured['episodes']} against {base['episodes']} episodes: {ratio:.2f}x (+{growth:.0f} MiB); "
          f"{share:.0%} of the {BUDGET_GIB:.0f} GiB budget")  # fmt: skip
    if args.out:
        args.out.write_text(json.dumps({"overrides": [*JOB, *args.overrides], "runs": runs}, indent=2) + "\n")


if __name__ == "__main__":
    main()
