"""Env steps on Ray actors (``agentfly_envs.runtime.RayEnvPool``) against env steps in this process.

1. Latency: one env stepped again and again from one thread, in this process and on one Ray actor, for the
   calculator (Arith-Calc) and the python tool (Arith-Calc with ``python_executor``): median ms per step; the
   difference is the remote step's overhead (the round trip to the actor, action and result serialised).
2. Throughput: python-tool env steps/s of a batch of envs stepped turn after turn from threads, as the rollout
   engine steps them: in this process, and on 1, 2 and 4 Ray actors (``--actors``); for a trivial call
   (``print(12*34)``, where the per-step overhead is everything) and for a call computing for about 10 ms.

All in one run, on a fresh local Ray cluster with this machine's CPUs (each actor reserves a quarter of them).

    python benchmarks/env_runtime.py --json benchmarks/results/env_runtime.json
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import gymnasium as gym

import agentfly_envs  # noqa: F401  (registers the envs)
from agentfly_envs.runtime import EnvPool, LocalEnvPool, RayEnvPool

ENV_ID = "agentfly/Arith-Calc"
TOOLS = {
    "calculator": ('{"name": "calculator", "arguments": {"expression": "12*34"}}', {}),
    "python": ('{"name": "python_executor", "arguments": {"code": "print(12*34)"}}', {"tools": ("python_executor",)}),
}
"""Tool -> (the call every step makes, the env's kwargs)."""
WORKLOADS = {"print(12*34)": "print(12*34)", "~10 ms of computation": "print(sum(i * i for i in range(200000)))"}
"""Python-tool throughput workloads: name -> the code every step runs."""
WARMUP_STEPS = 5


def step_latency_ms(env: gym.Env, action: str, steps: int) -> float:
    """Median wall time of one step, ms (after a few untimed ones)."""
    env.reset(seed=0)
    times = []
    for step in range(WARMUP_STEPS + steps):
        start = time.perf_counter()
        _, _, terminated, truncated, _ = env.step(action)
        if step >= WARMUP_STEPS:
            times.append(time.perf_counter() - start)
        assert not (terminated or truncated)
    return 1000 * statistics.median(times)


def steps_per_s(pool: EnvPool, action: str, envs: int, turns: int, repeats: int) -> float:
    """Median env steps/s over ``repeats`` batches: ``envs`` envs, ``turns`` turns each, a turn's steps in threads."""
    batch = pool.take(envs)
    rates = []
    with ThreadPoolExecutor(envs) as executor:
        for repeat in range(repeats + 1):  # the first batch warms the tools up
            for env in batch:
                env.reset(seed=repeat)
            start = time.perf_counter()
            for _ in range(turns):
                results = list(executor.map(lambda env: env.step(action), batch))
                assert not any(result[3] for result in results)
            if repeat:
                rates.append(envs * turns / (time.perf_counter() - start))
    return statistics.median(rates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="timed steps per latency figure")
    parser.add_argument("--envs", type=int, default=16, help="envs per throughput batch")
    parser.add_argument("--turns", type=int, default=20, help="turns per throughput batch")
    parser.add_argument("--repeats", type=int, default=5, help="throughput batches per figure (median)")
    parser.add_argument("--actors", type=int, nargs="+", default=[1, 2, 4], help="Ray actor counts of the throughput")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()

    import ray

    cpus = os.cpu_count() or 1
    ray.init(address="local", num_cpus=cpus, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    max_turns = WARMUP_STEPS + max(args.steps, args.turns) + 1
    results: dict[str, Any] = {
        "machine": {"cpus": cpus, "python": platform.python_version(), "ray": ray.__version__},
        "latency_ms": {},
        "python_steps_per_s": {},
    }
    for tool, (call, kwargs) in TOOLS.items():
        action, env_kwargs = f"<tool_call>{call}</tool_call>", {**kwargs, "max_turns": max_turns}
        pools: dict[str, EnvPool] = {
            "local": LocalEnvPool(ENV_ID, env_kwargs),
            "ray": RayEnvPool(ENV_ID, env_kwargs, num_workers=1, worker_cpus=cpus / 4),
        }
        figures = {name: step_latency_ms(pool.take(1)[0], action, args.steps) for name, pool in pools.items()}
        figures["overhead"] = figures["ray"] - figures["local"]
        results["latency_ms"][tool] = figures
        for pool in pools.values():
            pool.close()
    env_kwargs = {**TOOLS["python"][1], "max_turns": max_turns}
    runtimes: dict[str, Callable[[], EnvPool]] = {"local (threads)": lambda: LocalEnvPool(ENV_ID, env_kwargs)}
    for workers in args.actors:
        runtimes[f"ray, {workers} actor{'s' * (workers > 1)}"] = functools.partial(
            RayEnvPool, ENV_ID, env_kwargs, num_workers=workers, worker_cpus=cpus / 4
        )
    for name, make_pool in runtimes.items():
        pool = make_pool()
        for workload, code in WORKLOADS.items():
            action = f'<tool_call>{{"name": "python_executor", "arguments": {{"code": "{code}"}}}}</tool_call>'
            rate = steps_per_s(pool, action, args.envs, args.turns, args.repeats)
            results["python_steps_per_s"].setdefault(workload, {})[name] = rate
        pool.close()
    ray.shutdown()

    print(f"Latency of one env step, ms (median of {args.steps}):")
    print(f"{'tool':<12}{'local':>10}{'ray':>10}{'overhead':>10}")
    for tool, figures in results["latency_ms"].items():
        print(f"{tool:<12}{figures['local']:>10.2f}{figures['ray']:>10.2f}{figures['overhead']:>10.2f}")
    print(f"\nPython-tool env steps/s ({args.envs} envs x {args.turns} turns, median of {args.repeats} batches):")
    for workload, rates in results["python_steps_per_s"].items():
        print(workload)
        for name, rate in rates.items():
            print(f"  {name:<18}{rate:>10.1f}  ({rate / rates['local (threads)']:.2f}x local)")
    if args.json:
        with open(args.json, "w") as file:
            json.dump(results, file, indent=2)


if __name__ == "__main__":
    main()
