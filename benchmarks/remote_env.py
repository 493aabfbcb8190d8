"""Sessions on one ``python -m agentfly_envs serve`` process (OpenEnv's WebSocket protocol, loopback) against the
same env stepped directly in this process.

For each number of concurrent sessions N, the sessions open at once from ``--clients`` client processes (asyncio,
one WebSocket connection per session, the messages ``agentfly/Remote`` sends) and replay golden episodes of
agentfly/Arith-Calc (the calculator env) from their first reset; the baseline, measured in the same run, steps N
local envs of the same episodes in this process. Printed per row: one step's wall time (p50, p99) locally and
remotely, the time the server adds (remote less local, at p50 and at p99), the CPU time per step of the server
process and of the clients, the errors (failed opens, error answers, lost connections: the target is none), the
longest wait for a session to open, the server's resident memory per idle session (its growth from no session to
N sessions open and idle, over N), the sessions still open on the server once every client has closed its own
(the target is none), and, at the largest N (the server's ``--max-sessions``), whether one more session is refused
with the server's message. ``--think-ms`` makes each session wait before each step, as a policy's turn does (with
none, every session queues at the server at once: the worst case). The server runs in a subprocess (its own
interpreter and GIL, as in deployment).

    python benchmarks/remote_env.py --steps 300 --json benchmarks/results/remote_env.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import gymnasium as gym

import agentfly_envs  # noqa: F401  (registers the env ids)
from agentfly_envs.remote.capacity import TRY_AGAIN_LATER, raise_open_files_limit

KWARGS = {"level": "easy"}
TASKS = 1000
"""Golden episodes replayed: session ``i`` starts at task ``i % TASKS``."""


async def session(url: str, first: int, steps: int, think: float, actions: dict[int, list[str]]) -> dict[str, Any]:
    """One session: opens its connection, plays golden episodes from task ``first`` until it has stepped ``steps``
    times (waiting ``think`` seconds before each step), and stays open. Returns its connection, step wall times
    (s), open time (s) and error (``None``: none)."""
    import websockets

    result: dict[str, Any] = {"ws": None, "times": [], "open_s": 0.0, "error": None}
    try:
        start = time.perf_counter()
        ws = result["ws"] = await websockets.connect(url, open_timeout=600, compression=None, max_size=None)
        result["open_s"] = time.perf_counter() - start
        episode = first
        while len(result["times"]) < steps:
            await ws.send(json.dumps({"type": "reset", "data": {"index": episode % TASKS}}))
            answer = json.loads(await ws.recv())
            if answer["type"] != "observation":
                raise RuntimeError(f"reset refused: {answer['data']['message']}")
            for action in actions[episode % TASKS][: steps - len(result["times"])]:
                await asyncio.sleep(think)
                start = time.perf_counter()
                await ws.send(json.dumps({"type": "step", "data": {"text": action}}))
                answer = json.loads(await ws.recv())
                result["times"].append(time.perf_counter() - start)
                if answer["type"] != "observation":
                    raise RuntimeError(f"step refused: {answer['data']['message']}")
            episode += 1
    except Exception as error:  # counted and shown: the target is none
        result["error"] = f"{type(error).__name__}: {error}"
    return result


async def drive(pipe: Connection, url: str, firsts: range, steps: int, think: float, actions: dict) -> None:
    """A client process's sessions (``firsts``: their first tasks): plays them, reports, and on the parent's word
    closes them and reports again."""
    cpu = time.process_time()
    results = await asyncio.gather(*(session(url, first, steps, think, actions) for first in firsts))
    pipe.send(
        {
            "times": [t for result in results for t in result["times"]],
            "opens": [result["open_s"] for result in results],
            "errors": [result["error"] for result in results if result["error"]],
            "cpu_s": time.process_time() - cpu,
        }
    )
    await asyncio.to_thread(pipe.recv)  # the parent has measured the idle sessions
    await asyncio.gather(*(result["ws"].close() for result in results if result["ws"] is not None))
    pipe.send("closed")


def client_process(pipe: Connection, url: str, firsts: range, steps: int, think: float, actions: dict) -> None:
    """A client process's body (see :func:`drive`), with room for its connections under the open-files limit."""
    raise_open_files_limit(len(firsts))
    asyncio.run(drive(pipe, url, firsts, steps, think, actions))


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


def get(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.loads(response.read())


def local_steps(count: int, steps: int, actions: dict[int, list[str]]) -> list[float]:
    """The baseline: ``count`` envs made here, each stepped ``steps`` times through the same golden episodes as
    the remote sessions (one step at a time, round robin); returns each step's wall time (s)."""
    envs = [gym.make("agentfly/Arith-Calc", **KWARGS) for _ in range(count)]
    episodes = list(range(count))
    queues: list[list[str]] = [[] for _ in range(count)]
    times: list[float] = []
    for _ in range(steps):
        for index, env in enumerate(envs):
            if not queues[index]:
                env.reset(options={"index": episodes[index] % TASKS})
                queues[index] = list(actions[episodes[index] % TASKS])
                episodes[index] += 1
            start = time.perf_counter()
            env.step(queues[index].pop(0))
            times.append(time.perf_counter() - start)
    for env in envs:
        env.close()
    return times


def refused(url: str) -> str:
    """The server's answer to one session more than it holds: its close reason (code 1013), else what came."""
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    with connect(url, open_timeout=60) as ws:
        first = json.loads(ws.recv(timeout=60))
        try:
            ws.recv(timeout=60)
        except ConnectionClosed as closed:
            if closed.rcvd is not None and closed.rcvd.code == TRY_AGAIN_LATER:
                return closed.rcvd.reason
        return f"not refused: {first}"


def measure(
    count: int, steps: int, clients: int, url: str, server: tuple[int, float], actions: dict, think: float, probe: bool
) -> dict[str, Any]:
    """One row: ``count`` sessions over ``clients`` client processes, then the baseline (times in ms, memory in
    KiB per session; ``server``: its pid and its resident MiB with no session; ``probe``: try one session more,
    expecting a refusal)."""
    ws_url = url.replace("http://", "ws://") + "/ws"
    server_pid, base_mib = server
    server_cpu = process_cpu_s(server_pid)
    context = multiprocessing.get_context("fork")
    pipes, processes = [], []
    for part in range(clients):
        ours, theirs = context.Pipe()
        firsts = range(part, count, clients)
        process = context.Process(target=client_process, args=(theirs, ws_url, firsts, steps, think, actions))
        process.start()
        pipes.append(ours)
        processes.append(process)
    reports = [pipe.recv() for pipe in pipes]
    server_cpu = process_cpu_s(server_pid) - server_cpu
    times = [t for report in reports for t in report["times"]]
    errors = [error for report in reports for error in report["errors"]]
    done = max(len(times), 1)
    row: dict[str, Any] = {
        "sessions": count,
        "steps": len(times),
        "remote_p50_ms": quantile(times, 0.5) * 1e3,
        "remote_p99_ms": quantile(times, 0.99) * 1e3,
        "server_cpu_ms": server_cpu / done * 1e3,
        "client_cpu_ms": sum(report["cpu_s"] for report in reports) / done * 1e3,
        "errors": len(errors),
        "longest_open_s": max(open_s for report in reports for open_s in report["opens"]),
        "open_sessions": get(url + "/info")["sessions"],
        "server_mib_idle": rss_mib(server_pid),
    }
    row["kib_per_idle_session"] = (row["server_mib_idle"] - base_mib) * 1024 / count
    for error in sorted(set(errors))[:3]:
        print(f"          error: {error}")
    if probe:
        row["refusal"] = refused(ws_url)
    for pipe in pipes:
        pipe.send("close")
    for pipe, process in zip(pipes, processes, strict=True):
        pipe.recv()
        process.join()
    deadline = time.monotonic() + 30
    while get(url + "/info")["sessions"] and time.monotonic() < deadline:
        time.sleep(0.1)
    row["leaked_sessions"] = get(url + "/info")["sessions"]
    local = local_steps(count, steps, actions)
    row["local_p50_ms"] = quantile(local, 0.5) * 1e3
    row["local_p99_ms"] = quantile(local, 0.99) * 1e3
    row["added_p50_ms"] = row["remote_p50_ms"] - row["local_p50_ms"]
    row["added_p99_ms"] = row["remote_p99_ms"] - row["local_p99_ms"]
    return row


def line(row: dict[str, Any]) -> str:
    """``row`` under the table's header."""
    return (
        f"{row['sessions']:8d}  {row['local_p50_ms']:6.3f} / {row['local_p99_ms']:6.3f}  "
        f"{row['remote_p50_ms']:8.2f} / {row['remote_p99_ms']:8.2f}  "
        f"{row['added_p50_ms']:8.2f} / {row['added_p99_ms']:8.2f}  "
        f"{row['server_cpu_ms']:6.3f} / {row['client_cpu_ms']:6.3f}  {row['errors']:6d}  "
        f"{row['longest_open_s']:8.2f} s  {row['kib_per_idle_session']:8.0f}  {row['leaked_sessions']:6d}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, nargs="+", default=[1, 16, 256, 1000])
    parser.add_argument("--steps", type=int, default=300, help="steps per session (1/16 of it per 16 sessions)")
    parser.add_argument("--clients", type=int, default=2, help="client processes the sessions are spread over")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--think-ms", type=float, default=0.0, help="wait before each step (the policy's turn)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    golden = gym.make("agentfly/Arith-Calc", **KWARGS).unwrapped
    actions = {index: golden.golden_actions(golden.tasks.row(index)) for index in range(TASKS)}
    most = max(args.sessions)
    command = [sys.executable, "-m", "agentfly_envs", "serve", "agentfly/Arith-Calc", "--port", str(args.port)]
    command += ["--max-sessions", str(most), "--env-kwargs", json.dumps(KWARGS)]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{args.port}"
    rows = []
    try:
        while True:
            try:
                get(url + "/health")
                break
            except OSError:
                if server.poll() is not None:
                    raise SystemExit(f"the server exited with status {server.returncode}") from None
                time.sleep(0.5)
        base = rss_mib(server.pid)
        print(f"server: {base:.0f} MiB resident with no session; --max-sessions {most}; {args.clients} clients")
        measure(1, 20, 1, url, (server.pid, base), actions, 0.0, False)  # warm-up: one-time costs on both sides
        base = rss_mib(server.pid)  # memory the first session's imports and caches kept
        print("sessions  local p50/p99 ms  remote p50/p99 ms     added p50/p99 ms  CPU ms/step: server / clients  "
              "errors  longest open  KiB/idle session  leaked")  # fmt: skip
        for count in sorted(args.sessions):
            steps = max(args.steps // max(count // 16, 1), min(20, args.steps))
            think = args.think_ms / 1e3
            row = measure(count, steps, args.clients, url, (server.pid, base), actions, think, count == most)
            rows.append(row)
            print(line(row), flush=True)
    finally:
        server.terminate()
        server.wait()
    top = rows[-1]
    print(
        f"server: {top['server_mib_idle']:.0f} MiB with {top['sessions']} idle sessions, {base:.0f} MiB with none "
        f"after the warm-up; one more session: {top.get('refusal', 'not tried')}"
    )
    if args.json:
        figures = {"think_ms": args.think_ms, "clients": args.clients, "server_mib_no_session": base, "rows": rows}
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
