"""One call in a session: send the code, wait for the reply under the wall clock and the CPU budget, and judge how
it ended. What the session's process does is read from the host's ``/proc``, never asked of the session, whose code
could lie (its CPU time at start-up, which it reports before any code has run, is the one thing taken from it)."""

from __future__ import annotations

import dataclasses
import os
import secrets
import threading
import time

from agentfly_envs.sandbox import protocol
from agentfly_envs.sandbox.fork_server import STARTUP_TIMEOUT_S, SessionProcess
from agentfly_envs.sandbox.limits import SandboxLimits
from agentfly_envs.sandbox.outcome import classify, read_output
from agentfly_envs.sandbox.protocol import Reply
from agentfly_envs.sandbox.results import Execution, SandboxError

GRACE_S = 1.0
"""How long past its timeout a call may take to stop by itself before its interpreter is killed, in seconds."""
CPU_CHECK_S = 0.1
"""How often the pool checks the CPU time of a running call, in seconds."""
THREAD_GRACE_S = 0.05
"""How long threads a call started (and joined) may take to exit after it ends, in seconds."""
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class Gone(Exception):
    """A session's interpreter was gone before a call could start in it (the code did not run)."""


def run_call(
    process: SessionProcess,
    code: str,
    echo: bool,
    timeout_s: float | None,
    limits: SandboxLimits,
    slots: threading.BoundedSemaphore,
    last: bool = False,
) -> Execution:
    """Runs one call in ``process``; never raises for anything the code does.

    Args:
        process: The session.
        code: Python source.
        echo: Print the value of a final expression.
        timeout_s: Wall-clock limit of this call, in seconds (default: ``limits.timeout_s``).
        limits: The session's limits.
        slots: The pool's calls running at once; the call holds one while it runs.
        last: The session is killed after this call, so threads and processes the code left are not looked for
            (they end with it).

    Raises:
        Gone: the interpreter was gone before the code could run.
        SandboxError: the session could not set itself up.
    """
    timeout_s = limits.timeout_s if timeout_s is None else timeout_s
    if not process.ready:
        _wait_ready(process)
    # A random id, and nothing of a call outlives it (no process, no thread: see threads_left), so no
    # code can answer for a later call; code can still forge the reply to its own call.
    request = {"op": "run", "id": secrets.token_hex(8), "code": code, "echo": echo}
    request.update(timeout_s=timeout_s, cpu_s=limits.cpu_s)
    with slots:
        start = time.monotonic()  # the call's time counts from here: a wait for a free worker is not the code's
        cpu_before = cpu_seconds_if_alive(process)
        if cpu_before is None:  # killed while it waited (a spare): the code has not run, no crash of the agent's
            raise Gone("the interpreter had died before the call")
        try:
            process.stream.send(request)
        except OSError as e:
            raise Gone(f"the interpreter had died ({e})") from None
        process.calls += 1
        cpu_budget = cpu_before + limits.cpu_s + GRACE_S
        reply, detail = _await_reply(process, request["id"], time.monotonic() + timeout_s + GRACE_S, cpu_budget)
    looked_for = reply.answered and not last
    threads = threads_left(process.pid) if looked_for else 0
    processes = processes_left(process.pid, threads) if looked_for else 0
    seconds = time.monotonic() - start
    output = read_output(process.output_fd, limits.output_bytes)
    os.ftruncate(process.output_fd, 0)  # hold no output memory between calls
    execution = classify(reply, detail, output, file_bytes=limits.file_bytes, timeout_s=timeout_s, seconds=seconds)
    counts = ((threads, "thread", "threads"), (processes, "process", "processes"))
    left = [f"{count} {one if count == 1 else many}" for count, one, many in counts if count]
    if left:
        reason = f"{' and '.join(left)} the code started still ran at the end of the call"
        execution = dataclasses.replace(execution, restarted=True, restart_reason=reason)
    return execution


def _wait_ready(process: SessionProcess) -> None:
    """Reads the guard's message (the session's pid) and the session's ``ready`` with its CPU time so far (or why it
    failed)."""
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while not process.ready:
        try:
            message = process.stream.receive(deadline, protocol.MAX_REPLY_BYTES)
        except (protocol.ProtocolError, TimeoutError) as e:
            raise Gone(f"the session did not start: {e}") from None
        if "pid" in message:
            process.pid = int(message["pid"])
        elif message.get("ready") and process.pid:
            process.ready = True
            process.ready_cpu_s = float(message.get("cpu_s", 0.0))
        else:
            raise SandboxError(f"a sandbox session failed to start: {message.get('error', message)}")


def _await_reply(process: SessionProcess, request_id: str, deadline: float, cpu_budget: float) -> tuple[Reply, str]:
    """Waits for the reply to the request ``request_id``: ``(reply, detail)`` as the session reports it, or
    ``(KILLED | CPU_KILLED | CRASHED, ...)`` when it does not answer in time (``deadline``, ``time.monotonic()``),
    uses more CPU time than ``cpu_budget`` seconds in all (checked every :data:`CPU_CHECK_S`; the code may raise its
    own CPU limit, never this one) or dies."""
    try:
        while True:
            wait = min(deadline - time.monotonic(), CPU_CHECK_S)
            if wait > 0 and not process.stream.wait(wait):
                if cpu_seconds(process.pid) > cpu_budget:
                    return Reply.CPU_KILLED, "it used up its CPU time and did not stop"
                continue
            reply = process.stream.receive(deadline, protocol.MAX_REPLY_BYTES)
            if reply.get("id") == request_id:  # other replies (forged by the code) are skipped
                return Reply.parse(reply.get("status")), str(reply.get("detail", ""))
    except TimeoutError:
        return Reply.KILLED, "it did not stop at its time limit"
    except (protocol.ProtocolError, OSError) as e:
        return Reply.CRASHED, f"the interpreter died ({e})"


def cpu_seconds_if_alive(process: SessionProcess) -> float | None:
    """The CPU time the session's interpreter has used, in seconds, or ``None`` when the session is gone: its guard
    exited (its pidfd turns readable) or the interpreter is gone or a zombie (read from the host's ``/proc``). Before
    its first call no code has run, so the time is what its ``ready`` said and the pidfd alone tells whether it
    lives (a new process's first ``/proc`` reads are the dearest part of a call)."""
    if protocol.wait_readable(process.pidfd, 0):
        return None
    if process.calls == 0:
        return process.ready_cpu_s
    fields = _stat_fields(process.pid)
    if fields is None or fields[0] in (b"Z", b"X"):
        return None
    return _cpu_seconds(fields)


def _stat_fields(pid: int) -> list[bytes] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (``[0]`` is the state), or ``None`` if ``pid`` is
    gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            return file.read().rpartition(b")")[2].split()
    except FileNotFoundError:
        return None


def _cpu_seconds(fields: list[bytes]) -> float:
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS  # utime + stime


def cpu_seconds(pid: int) -> float:
    """CPU time the session's interpreter ``pid`` (all its threads) has used, in seconds; 0 if it is gone."""
    fields = _stat_fields(pid)
    return 0.0 if fields is None else _cpu_seconds(fields)


def processes_left(pid: int, threads: int | None = None) -> int:
    """How many child processes the session's interpreter ``pid`` still has after a call, read from the host's
    ``/proc`` (the sweep that ends them runs inside the session, where the code could switch it off; a process whose
    parent died is the interpreter's child, as pid 1 of its namespace); 0 if the interpreter is gone. ``threads=0``
    (:func:`threads_left` just found the main thread alone) reads only the main thread's children."""
    try:
        tasks = [str(pid)] if threads == 0 else os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return 0
    children: set[str] = set()
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as file:
                children.update(file.read().split())
        except FileNotFoundError:  # a thread that just ended
            continue
    return len(children)


def threads_left(pid: int) -> int:
    """How many threads besides its main one the session's interpreter ``pid`` has after a call (waiting up to
    :data:`THREAD_GRACE_S` for threads that are just exiting)."""
    deadline = time.monotonic() + THREAD_GRACE_S
    while True:
        try:
            threads = len(os.listdir(f"/proc/{pid}/task")) - 1
        except FileNotFoundError:  # died after answering: the next call finds out
            return 0
        if threads == 0 or time.monotonic() > deadline:
            return threads
        time.sleep(0.001)
