"""Sandbox latency and throughput: calls on a warm ``SandboxPool``.

Prints the p50/p99 latency of a trivial call and of a 50 ms computation in a warm notebook session
(directly, and through the ``python_executor`` tool), of a trivial program in a fresh interpreter
per call (the ``python`` tool), and the throughput of the 50 ms computation and of trivial calls
with 1 and 2 workers (threads with a session each share one pool).

    python benchmarks/sandbox_latency.py --json benchmarks/results/sandbox_latency.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import threading
import time
from collections.abc import Callable, Sequence

import agentfly_envs  # noqa: F401  (registers the tools)
from agentfly_envs.sandbox import ExecStatus, SandboxPool, SandboxSession
from agentfly_envs.tools import get_tool

TRIVIAL = "x = 1"
COMPUTE_50MS = "import time\nstart = time.thread_time()\nwhile time.thread_time() - start < 0.05:\n    pass"


def percentiles(samples: Sequence[float]) -> dict[str, float]:
    """p50 and p99 of ``samples`` (seconds), in milliseconds."""
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {"p50_ms": statistics.median(ordered) * 1e3, "p99_ms": p99 * 1e3, "calls": len(ordered)}


def timed(call: Callable[[], object], repeats: int) -> dict[str, float]:
    """Latency percentiles of ``repeats`` calls of ``call``."""
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return percentiles(samples)


def checked(session: SandboxSession, code: str) -> Callable[[], object]:
    def call() -> object:
        result = session.run(code)
        if result.status is not ExecStatus.OK:
            raise RuntimeError(f"benchmark call failed: {result}")
        return result

    return call


def latencies(pool: SandboxPool, repeats: int) -> dict[str, dict[str, float]]:
    """Latency of the three kinds of call on a warm pool."""
    with pool.session() as session:
        for _ in range(20):  # warm up: the session, the allocator, the CPU caches
            session.run(TRIVIAL)
        results = {
            "trivial call (warm session)": timed(checked(session, TRIVIAL), repeats),
            "50 ms computation (warm session)": timed(checked(session, COMPUTE_50MS), max(10, repeats // 10)),
        }
    tool = get_tool("python_executor").for_env(pool=pool)
    tool.begin_episode({})
    tool({"code": TRIVIAL})
    results["trivial call (python_executor tool)"] = timed(lambda: tool({"code": TRIVIAL}), repeats)
    tool.end_episode()
    program = get_tool("python").for_env(pool=pool)
    results["trivial program (fresh interpreter, python tool)"] = timed(
        lambda: program({"code": TRIVIAL}), max(20, repeats // 5)
    )
    return results


def throughput(workers: int, threads: int, code: str, seconds: float) -> float:
    """Calls per second of ``code`` from ``threads`` threads (a session each) on a pool of ``workers``."""
    with SandboxPool(workers=workers) as pool:
        sessions = [pool.session() for _ in range(threads)]
        for session in sessions:
            session.run(TRIVIAL)
        counts = [0] * threads
        stop = time.perf_counter() + seconds

        def loop(index: int) -> None:
            while time.perf_counter() < stop:
                sessions[index].run(code)
                counts[index] += 1

        start = time.perf_counter()
        pool_threads = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
        for thread in pool_threads:
            thread.start()
        for thread in pool_threads:
            thread.join()
        elapsed = time.perf_counter() - start
        for session in sessions:
            session.close()
    return sum(counts) / elapsed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=500, help="trivial calls timed per latency row")
    parser.add_argument("--seconds", type=float, default=5.0, help="duration of each throughput run")
    parser.add_argument("--threads", type=int, default=4, help="client threads in the throughput runs")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="pool sizes for throughput")
    parser.add_argument("--json", help="write the results to this file")
    args = parser.parse_args(argv)

    with SandboxPool(workers=max(args.workers)) as pool:
        isolation = pool.isolation
        results: dict = {"latency": latencies(pool, args.repeats)}
    results["throughput_calls_per_s"] = {
        f"{label}, {workers} worker{'s' * (workers > 1)}": throughput(workers, args.threads, code, args.seconds)
        for label, code in (("50 ms computation", COMPUTE_50MS), ("trivial call", TRIVIAL))
        for workers in args.workers
    }
    results["machine"] = {
        "cpus": len(os.sched_getaffinity(0)),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "isolation": {"namespaces": isolation.namespaces, "separate_user": isolation.separate_user},
        "threads": args.threads,
        "load_average_1min": os.getloadavg()[0],  # other jobs on the machine stretch the figures
    }

    print(f"sandbox isolation: namespaces={isolation.namespaces}, own uid per session={isolation.separate_user}")
    print(f"{'call':52} {'p50 ms':>9} {'p99 ms':>9} {'calls':>6}")
    for name, row in results["latency"].items():
        print(f"{name:52} {row['p50_ms']:9.2f} {row['p99_ms']:9.2f} {row['calls']:6d}")
    print(f"\nthroughput ({args.threads} threads, a session each, one pool)")
    for name, rate in results["throughput_calls_per_s"].items():
        print(f"{name:52} {rate:9.1f} calls/s")
    if args.json:
        with open(args.json, "w") as file:
            json.dump(results, file, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
