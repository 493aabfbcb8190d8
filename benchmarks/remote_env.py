"""Remote env steps (``agentfly/Remote`` on ``python -m agentfly_envs serve``'s server, loopback) against local ones.

For 1, 16 and 256 concurrent sessions (one thread each, each replaying golden episodes of agentfly/Arith-Calc, the
calculator env), prints the p50 and p99 of one step's wall time locally and remotely and the added time per step;
then the server's resident memory with that many sessions open and idle, per session. The server runs in a
subprocess (its own interpreter and GIL, as in deployment).

    python benchmarks/remote_env.py --sessions 1 16 256 --steps 300
"""

from __future__ import annotations

import argparse
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


def step_times(envs: list[gym.Env], steps: int, actions: dict[int, list[str]]) -> list[float]:
    """Per-step wall times (s) of ``steps`` steps in each env, all envs stepping at once from their own threads."""
    times: list[float] = []
    lock = threading.Lock()

    def play(env: gym.Env, seed: int) -> None:
        mine, episode = [], seed
        while len(mine) < steps:
            env.reset(options={"index": episode % 1000})
            for action in actions[episode % 1000]:
                start = time.perf_counter()
                env.step(action)
                mine.append(time.perf_counter() - start)
            episode += 1
        with lock:
            times.extend(mine)

    threads = [threading.Thread(target=play, args=(env, index)) for index, env in enumerate(envs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return times


def rss_mib(pid: int) -> float:
    """Resident memory of process ``pid``, MiB (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def quantile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q * 100) - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, nargs="+", default=[1, 16, 256])
    parser.add_argument("--steps", type=int, default=300, help="steps per session")
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args()
    golden = gym.make("agentfly/Arith-Calc", **KWARGS).unwrapped
    actions = {index: golden.golden_actions(golden.tasks.row(index)) for index in range(1000)}
    command = [sys.executable, "-m", "agentfly_envs", "serve", "agentfly/Arith-Calc", "--port", str(args.port)]
    command += ["--max-sessions", str(max(args.sessions) + 1), "--env-kwargs", '{"level": "easy"}']
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{args.port}"
    try:
        while True:
            try:
                urllib.request.urlopen(url + "/health", timeout=5).close()
                break
            except OSError:
                time.sleep(0.5)
        base = rss_mib(server.pid)
        print(f"server: {base:.0f} MiB resident with no session")
        print("sessions  local p50/p99 ms  remote p50/p99 ms  added p50/p99 ms")
        for count in args.sessions:
            rows = {}
            for kind, make in (
                ("local", lambda: gym.make("agentfly/Arith-Calc", **KWARGS)),
                ("remote", lambda: gym.make("agentfly/Remote", url=url)),
            ):
                envs = [make() for _ in range(count)]
                steps = max(args.steps // max(count // 16, 1), 20)
                times = step_times(envs, steps, actions)
                rows[kind] = (quantile(times, 0.5) * 1e3, quantile(times, 0.99) * 1e3)
                if kind == "remote":
                    idle = rss_mib(server.pid)
                    print(f"          (server {idle:.0f} MiB with {count} idle sessions: "
                          f"{(idle - base) * 1024 / count:.0f} KiB per session)")  # fmt: skip
                for env in envs:
                    env.close()
            (lp50, lp99), (rp50, rp99) = rows["local"], rows["remote"]
            print(f"{count:8d}  {lp50:6.2f} / {lp99:6.2f}  {rp50:7.2f} / {rp99:7.2f}  "
                  f"{rp50 - lp50:6.2f} / {rp99 - lp99:6.2f}")  # fmt: skip
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
