"""Remote env steps (``agentfly/Remote`` on ``python -m agentfly_envs serve``'s server, loopback) against local ones.

For each number of concurrent sessions (one thread each, each replaying golden episodes of agentfly/Arith-Calc, the
calculator env, from its first reset, so all the sessions open at once), prints one step's wall time (p50, p99)
locally and remotely, the time added per step, and the CPU time per step: the server process's, the client
process's, and the local env's (CPU times hold on a loaded machine, where wall times do not). Then the errors (resets
that raised, steps that came back as ``Error:`` observations: the target is none), the longest wait for a session to
open, and the server's resident memory with that many sessions open and idle (per session: the growth from the
first row's count; allocators keep some memory after the first sessions close). Last, the fewest sessions whose
remote p99 is more than twice the 1-session p99. ``--think-ms`` makes each session wait before each step, as a
policy's turn does (with none, every session queues at the server at once: the worst case). The server runs in a
subprocess (its own interpreter and GIL, as in deployment).

    python benchmarks/remote_env.py --steps 300 --json benchmarks/results/remote_env.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import gymnasium as gym

import agentfly_envs  # noqa: F401  (registers the env ids)

KWARGS = {"level": "easy"}


class Run:
    """What ``N`` sessions stepping at once measured: step wall times (s), errors, and each session's open time."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.opens: list[float] = []
        self.errors: list[str] = []
        self.lock = threading.Lock()


def play(envs: list[gym.Env], steps: int, actions: dict[int, list[str]], think: float = 0.0) -> Run:
    """``steps`` steps in each env, all envs stepping at once from their own threads, each waiting ``think``
    seconds before each step (the policy's turn)."""
    run = Run()

    def one(env: gym.Env, seed: int) -> None:
        mine, episode, opened = [], seed, None
        try:
            while len(mine) < steps:
                start = time.perf_counter()
                env.reset(options={"index": episode % 1000})
                opened = time.perf_counter() - start if opened is None else opened
                for action in actions[episode % 1000]:
                    time.sleep(think)
                    start = time.perf_counter()
                    _, _, _, _, info = env.step(action)
                    mine.append(time.perf_counter() - start)
                    if "remote_failure" in info:
                        raise RuntimeError(f"step lost: {info['remote_failure']}")
                episode += 1
        except Exception as error:  # counted and shown: the target is none
            with run.lock:
                run.errors.append(f"{type(error).__name__}: {error}")
        with run.lock:
            run.times.extend(mine)
            run.opens.append(opened or 0.0)

    threads = [threading.Thread(target=one, args=(env, index)) for index, env in enumerate(envs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return run


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    """Resident memory of process ``pid``, MiB (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def quantile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q * 100) - 1]


def measure(
    count: int, steps: int, url: str, server_pid: int, actions: dict[int, list[str]], think: float = 0.0
) -> dict[str, float]:
    """One row: ``count`` sessions, locally then remotely (times in ms, memory in MiB; ``think``: see :func:`play`)."""
    row: dict[str, float] = {"sessions": count}
    for kind, make in (
        ("local", lambda: gym.make("agentfly/Arith-Calc", **KWARGS)),
        ("remote", lambda: gym.make("agentfly/Remote", url=url)),
    ):
        envs = [make() for _ in range(count)]
        server_before, client_before = process_cpu_s(server_pid), time.process_time()
        run = play(envs, steps, actions, think)
        done = max(len(run.times), 1)
        row[f"{kind}_p50_ms"] = quantile(run.times, 0.5) * 1e3
        row[f"{kind}_p99_ms"] = quantile(run.times, 0.99) * 1e3
        row[f"{kind}_client_cpu_ms"] = (time.process_time() - client_before) / done * 1e3
        if kind == "remote":
            row["server_cpu_ms"] = (process_cpu_s(server_pid) - server_before) / done * 1e3
            row["errors"] = len(run.errors)
            row["longest_open_s"] = max(run.opens)
            row["server_mib_idle"] = rss_mib(server_pid)
            for error in sorted(set(run.errors))[:3]:
                print(f"          error: {error}")
        for env in envs:
            env.close()
    return row


def line(row: dict[str, float]) -> str:
    """``row`` under the table's header."""
    return (
        f"{row['sessions']:8d}  {row['local_p50_ms']:6.2f} / {row['local_p99_ms']:6.2f}  "
        f"{row['remote_p50_ms']:7.2f} / {row['remote_p99_ms']:7.2f}  "
        f"{row['remote_p50_ms'] - row['local_p50_ms']:8.2f}  "
        f"{row['server_cpu_ms']:17.3f} {row['remote_client_cpu_ms']:6.3f} {row['local_client_cpu_ms']:5.3f}  "
        f"{row['errors']:6d}  {row['longest_open_s']:10.2f} s  {row['kib_per_idle_session']:8.0f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64, 128, 256])
    parser.add_argument("--steps", type=int, default=300, help="steps per session (1/16 of it per 16 sessions)")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--think-ms", type=float, default=0.0, help="wait before each step (the policy's turn)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    golden = gym.make("agentfly/Arith-Calc", **KWARGS).unwrapped
    actions = {index: golden.golden_actions(golden.tasks.row(index)) for index in range(1000)}
    command = [sys.executable, "-m", "agentfly_envs", "serve", "agentfly/Arith-Calc", "--port", str(args.port)]
    command += ["--max-sessions", str(max(args.sessions)), "--env-kwargs", json.dumps(KWARGS)]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{args.port}"
    rows = []
    try:
        while True:
            try:
                urllib.request.urlopen(url + "/health", timeout=5).close()
                break
            except OSError:
                time.sleep(0.5)
        base = rss_mib(server.pid)
        print(f"server: {base:.0f} MiB resident with no session")
        measure(1, 20, url, server.pid, actions)  # warm-up: the first session's one-time costs, on both sides
        print("sessions  local p50/p99 ms  remote p50/p99 ms  added p50  CPU ms/step: server client local  "
              "errors  longest open  KiB/idle session")  # fmt: skip
        for count in args.sessions:
            steps = max(args.steps // max(count // 16, 1), 20)
            row = measure(count, steps, url, server.pid, actions, args.think_ms / 1e3)
            rows.append(row)
            first = rows[0]  # the growth from there: allocations that stay after the first sessions close
            grown = count - first["sessions"]
            row["kib_per_idle_session"] = (
                (row["server_mib_idle"] - first["server_mib_idle"]) * 1024 / grown if grown else 0
            )
            print(line(row))
    finally:
        server.terminate()
        server.wait()
    if len(rows) > 1:
        top = rows[-1]
        print(
            f"server memory: {top['server_mib_idle']:.0f} MiB with {top['sessions']} idle sessions, "
            f"{top['kib_per_idle_session']:.0f} KiB per session beyond the first"
        )
    single = next((row["remote_p99_ms"] for row in rows if row["sessions"] == 1), None)
    if single is not None:
        doubled = next((int(row["sessions"]) for row in rows if row["remote_p99_ms"] > 2 * single), None)
        print(f"p99 at 1 session: {single:.2f} ms; more than twice that from {doubled or 'no measured'} sessions")
    if args.json:
        figures = {"think_ms": args.think_ms, "server_mib_no_session": base, "rows": rows}
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
