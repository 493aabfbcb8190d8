"""``SandboxPool``: runs model-written Python in warm, isolated, resource-limited processes.

A pool owns one fork server (see :mod:`.worker`) and keeps ``spares`` fresh sessions forked ahead
of need, so a call costs a round trip (about a millisecond), not an interpreter start. A
:class:`SandboxSession` is one interpreter with notebook semantics: variables persist from call to
call until it is closed; every session starts from the same clean state. At most ``workers`` calls
run at once; any number of threads may share a pool.

Example:
    >>> with SandboxPool(SandboxLimits(timeout_s=5)) as pool, pool.session() as session:
    ...     _ = session.run("x = 6 * 7")
    ...     session.run("x").output
    '42\\n'
"""

from __future__ import annotations

import atexit
import codecs
import collections
import contextlib
import dataclasses
import enum
import errno
import fcntl
import json
import logging
import os
import resource
import secrets
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import weakref
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from agentfly_envs.errors import AgentflyError
from agentfly_envs.sandbox import protocol
from agentfly_envs.sandbox.limits import SandboxLimits

logger = logging.getLogger(__name__)

GRACE_S = 1.0
"""How long past its timeout a call may take to stop by itself before its interpreter is killed, in seconds."""
STARTUP_TIMEOUT_S = 60.0
"""How long the fork server and a new session may take to start, in seconds."""

# The fork server is started as `python -I -c _BOOT <control fd> <config>`. `-I` ignores the host's
# PYTHON* variables and user site-packages; the stub packages make this package's standard-library-only
# modules importable without running agentfly_envs/__init__.py (and so without gymnasium) in the sandbox.
_BOOT = """
import sys, types
for name, path in {packages!r}:
    module = types.ModuleType(name)
    module.__path__ = [path]
    sys.modules[name] = module
from agentfly_envs.sandbox import worker
worker.main()
"""
_SANDBOX_DIR = Path(__file__).resolve().parent
_PACKAGES = (("agentfly_envs", str(_SANDBOX_DIR.parent)), ("agentfly_envs.sandbox", str(_SANDBOX_DIR)))


class SandboxError(AgentflyError, RuntimeError):
    """The sandbox itself failed (its fork server could not start or stopped answering)."""


class SandboxUnavailableError(SandboxError):
    """``isolation="namespaces"`` was asked for and this machine does not allow it."""


class ExecStatus(enum.StrEnum):
    """How a call ended."""

    OK = "ok"
    """The code ran to its end (or called ``sys.exit(0)``)."""
    ERROR = "error"
    """The code raised an exception; its traceback is in the output."""
    EXIT = "exit"
    """The code called ``sys.exit`` with a non-zero status (``detail``)."""
    TIMEOUT = "timeout"
    """The code ran past ``timeout_s``."""
    CPU_LIMIT = "cpu_limit"
    """The code used more than ``cpu_s`` of CPU time."""
    OUTPUT_LIMIT = "output_limit"
    """The code wrote ``file_bytes`` of output, and writing more failed."""
    CRASHED = "crashed"
    """The interpreter died (a crash, a kill for exceeding a limit, ``os._exit``)."""


@dataclass(frozen=True)
class Execution:
    """The outcome of one call.

    Attributes:
        output: What the code wrote to stdout and stderr, in order, as text; cut in the middle
            (with a marker) past ``limits.output_bytes``; invalid UTF-8 shown as U+FFFD.
        status: How the call ended.
        detail: The exception summary, exit status or failure description ("" when OK).
        restarted: The interpreter was replaced: variables from earlier calls are gone.
        truncated: Part of the output was cut.
        invalid_utf8: The output held bytes that are not UTF-8.
        seconds: Wall-clock time of the call.
        restart_reason: Why the interpreter was replaced after a call that itself ended normally
            (e.g. a thread it started was still running), else "".
    """

    output: str
    status: ExecStatus
    detail: str
    restarted: bool
    truncated: bool
    invalid_utf8: bool
    seconds: float
    restart_reason: str = ""


@dataclass(frozen=True)
class Isolation:
    """What walls off the code in a pool's sessions (beyond the resource limits, which always apply).

    Attributes:
        namespaces: Own pid, network, mount, IPC and UTS namespaces and a root of its own: no network,
            no host sockets, no other processes in sight, nothing of the host's file system but the
            interpreter and its libraries (read-only), an in-memory work dir, ``/tmp`` and ``/dev/shm``.
        separate_user: Each session runs as its own unprivileged uid (the pool runs as root).
        note: Why namespaces are off, when they are (only with ``isolation="none"``).
    """

    namespaces: bool
    separate_user: bool
    note: str


class _Gone(Exception):
    """A session's interpreter was gone before a call could start in it (the code did not run)."""


_WARNED_UNISOLATED = False  # isolation="none" warns once per process
THREAD_GRACE_S = 0.05
"""How long threads a call started (and joined) may take to exit after it ends, in seconds."""
_TOO_MANY_FILES = (errno.EMFILE, errno.ENFILE)
CPU_CHECK_S = 0.1
"""How often the pool checks the CPU time of a running call, in seconds."""
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


_ANSWERS = ("ok", "error", "exit", "timeout", "cpu")
"""The statuses a live session reports; anything else means its interpreter is gone."""


class _Process:
    """The pool's handles on one session: its socket, its output file, a pidfd of its guard and, once it is
    ready, the session's pid (a child of the guard, so it stays the session's while the guard lives)."""

    def __init__(self, sock: socket.socket, output_fd: int, pidfd: int) -> None:
        self.sock, self.output_fd, self.pidfd = sock, output_fd, pidfd
        self.ready = False
        self.pid = 0
        self.calls = 0
        self._release = weakref.finalize(self, _kill_and_close, sock, output_fd, pidfd)

    def kill(self) -> None:
        """Kills the session (its guard, which takes the session and its processes along) and closes the handles."""
        self._release()


def _kill_and_close(sock: socket.socket, output_fd: int, pidfd: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    sock.close()
    for fd in (output_fd, pidfd):
        os.close(fd)


class SandboxPool:
    """Warm, isolated Python interpreters for model-written code.

    Args:
        limits: Resource limits of every session (see :class:`SandboxLimits`).
        workers: Most calls running at once (default: the CPUs this process may use).
        spares: Sessions kept forked ahead of need (default: ``workers``).
        isolation: ``"auto"`` or ``"namespaces"`` (namespaces and a root of its own for each session;
            the first call raises :class:`SandboxUnavailableError` where the kernel does not allow them)
            or ``"none"`` (resource limits only, with a warning once per process).
        preload: Extra modules the fork server imports once (e.g. ``("numpy",)``), so sessions start with them.
        python: The interpreter for the sandbox (default: this one); it needs only the standard library.
        max_sessions: Most sessions alive at once (each holds 3 file descriptors in this process and an
            interpreter); one more raises :class:`SandboxError`.

    Creating a pool raises this process's soft limit of open files to its hard limit.
    """

    def __init__(
        self,
        limits: SandboxLimits | None = None,
        *,
        workers: int | None = None,
        spares: int | None = None,
        isolation: str = "auto",
        preload: tuple[str, ...] = (),
        python: str | None = None,
        max_sessions: int = 1024,
    ) -> None:
        if isolation not in ("auto", "namespaces", "none"):
            raise ValueError(f"isolation must be 'auto', 'namespaces' or 'none', got {isolation!r}")
        self.limits = limits or SandboxLimits()
        self.workers = len(os.sched_getaffinity(0)) if workers is None else workers
        self.spares = self.workers if spares is None else spares
        self.max_sessions = max_sessions
        if self.workers < 1 or self.spares < 0 or max_sessions < 1:
            raise ValueError(
                f"workers and max_sessions must be >= 1 and spares >= 0, got {self.workers}, {max_sessions} and "
                f"{self.spares}"
            )
        _, most_files = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (most_files, most_files))
        self._config = {"isolation": isolation, "preload": list(preload)}
        self._python = python or sys.executable
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(self.workers)
        self._server: subprocess.Popen | None = None
        self._server_root = ""  # the fork server's directory of work dirs, removed if it dies without cleaning up
        self._control: socket.socket | None = None
        self._isolation: Isolation | None = None
        self._pending: collections.deque[tuple[socket.socket, int]] = collections.deque()
        self._live: weakref.WeakSet[_Process] = weakref.WeakSet()  # handed to sessions and not yet killed
        self._retired: list[tuple[subprocess.Popen, str]] = []  # replaced fork servers and their directories
        self._owner_pid = os.getpid()
        self.closed = False
        _POOLS.add(self)

    # --------------------------------------------------------------------------------------------
    # Public API
    # --------------------------------------------------------------------------------------------

    @property
    def isolation(self) -> Isolation:
        """What isolates this pool's sessions (starts the fork server if needed)."""
        with self._lock:
            self._ensure_server()
            return self._isolation

    def session(self) -> SandboxSession:
        """A new interpreter with notebook semantics; it starts on its first call. Close it when done."""
        return SandboxSession(self)

    def run(self, code: str, *, timeout_s: float | None = None) -> Execution:
        """Runs ``code`` as a program in a fresh interpreter that is discarded afterwards."""
        with self.session() as session:
            return session.run(code, echo=False, timeout_s=timeout_s)

    def close(self) -> None:
        """Stops the fork server, which kills every session of this pool. The pool cannot be used afterwards."""
        with self._lock:
            self.closed = True
            self._stop_server(retire=False)
            for server, root in self._retired:  # their sessions die with them (a guard's death signal)
                server.kill()
                server.wait()
                shutil.rmtree(root, onerror=_warn_not_removed)
            self._retired.clear()

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SandboxPool(workers={self.workers}, spares={self.spares}, limits={self.limits})"

    # --------------------------------------------------------------------------------------------
    # Sessions
    # --------------------------------------------------------------------------------------------

    def _take(self) -> _Process:
        """A forked session, from the spares when there is one; tops the spares up.

        Raises:
            SandboxError: ``max_sessions`` are alive, this process is out of file descriptors, or the fork
                server failed twice in a row.
        """
        with self._lock:
            if len(self._live) >= self.max_sessions:
                raise SandboxError(
                    f"this sandbox pool already has {len(self._live)} live sessions (max_sessions="
                    f"{self.max_sessions}); close sessions when their episode ends (session.close(), or the "
                    "tool's end_episode()) or pass a larger SandboxPool(max_sessions=...)"
                )
            for attempt in (1, 2):
                try:
                    process = self._take_locked()
                    break
                except OSError as e:
                    if e.errno in _TOO_MANY_FILES:  # this process's limit, not a failed fork server
                        raise SandboxError(_out_of_files(e)) from e
                    failure = e
                except protocol.ProtocolError as e:
                    failure = e
                if attempt == 2:
                    self._stop_server(retire=True)
                    raise SandboxError(f"the sandbox's fork server failed twice in a row: {failure}") from failure
                logger.warning(
                    "sandbox fork server failed (%s: %s); starting a new one (live sessions keep running)",
                    type(failure).__name__,
                    failure,
                )
                self._stop_server(retire=True)
            self._live.add(process)
            return process

    def _take_locked(self) -> _Process:
        if self._server is not None and self._server.poll() is not None:  # its spares died with it
            self._stop_server(retire=False)
        self._ensure_server()
        if not self._pending:
            self._request_spawn()
        process = self._receive_spawn()
        try:
            while len(self._pending) < self.spares:
                self._request_spawn()
        except OSError as e:
            if e.errno not in _TOO_MANY_FILES:
                raise
            # Out of descriptors for a spare: the session in hand still serves; the next take says so.
        return process

    def _request_spawn(self) -> None:
        ours, theirs = socket.socketpair()
        output_fd = os.memfd_create("agentfly-sandbox-output")
        try:
            fcntl.fcntl(output_fd, fcntl.F_SETFL, fcntl.fcntl(output_fd, fcntl.F_GETFL) | os.O_APPEND)
            message = {"op": "spawn", "limits": asdict(self.limits)}
            protocol.send_control(self._control, message, [theirs.fileno(), output_fd])
        except BaseException:
            ours.close()
            os.close(output_fd)
            raise
        finally:
            theirs.close()
        self._pending.append((ours, output_fd))

    def _receive_spawn(self) -> _Process:
        ours, output_fd = self._pending.popleft()
        try:
            reply, fds = protocol.receive_control(self._control, max_fds=1)
        except BaseException:
            ours.close()
            os.close(output_fd)
            raise
        if not reply.get("ok") or len(fds) != 1:
            ours.close()
            os.close(output_fd)
            for fd in fds:
                os.close(fd)
            raise SandboxError(f"the sandbox could not start a session: {reply.get('error', reply)}")
        return _Process(ours, output_fd, fds[0])

    def _execute(self, process: _Process, code: str, echo: bool, timeout_s: float | None) -> Execution:
        """Runs one call in ``process``; never raises for anything the code does.

        Raises:
            _Gone: the interpreter was gone before the code could run.
            SandboxError: the session could not set itself up.
        """
        timeout_s = self.limits.timeout_s if timeout_s is None else timeout_s
        start = time.monotonic()
        if not process.ready:
            self._wait_ready(process)
        # A random id, and nothing of a call outlives it (no process, no thread: see _threads_left), so no
        # code can answer for a later call; code can still forge the reply to its own call.
        request = {"op": "run", "id": secrets.token_hex(8), "code": code, "echo": echo}
        request.update(timeout_s=timeout_s, cpu_s=self.limits.cpu_s)
        with self._slots:
            try:
                protocol.send(process.sock, request)
            except OSError as e:
                raise _Gone(f"the interpreter had died ({e})") from None
            process.calls += 1
            cpu_budget = _cpu_seconds(process) + self.limits.cpu_s + GRACE_S
            status, detail = self._await_reply(
                process, request["id"], time.monotonic() + timeout_s + GRACE_S, cpu_budget
            )
        threads = _threads_left(process) if status in _ANSWERS else 0
        execution = self._outcome(process, status, detail, timeout_s, time.monotonic() - start)
        if threads:
            reason = f"{threads} thread{'s' * (threads > 1)} the code started still ran at the end of the call"
            execution = dataclasses.replace(execution, restarted=True, restart_reason=reason)
        return execution

    @staticmethod
    def _wait_ready(process: _Process) -> None:
        """Reads the guard's message (the session's pid) and the session's ``ready`` (or why it failed)."""
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not process.ready:
            try:
                message = protocol.receive(process.sock, deadline)
            except (protocol.ProtocolError, TimeoutError) as e:
                raise _Gone(f"the session did not start: {e}") from None
            if "pid" in message:
                process.pid = int(message["pid"])
            elif message.get("ready") and process.pid:
                process.ready = True
            else:
                raise SandboxError(f"a sandbox session failed to start: {message.get('error', message)}")

    @staticmethod
    def _await_reply(process: _Process, request_id: str, deadline: float, cpu_budget: float) -> tuple[str, str]:
        """Waits for the reply to the request ``request_id``: ``(status, detail)`` as the session reports it,
        or ``("killed" | "crashed", ...)`` when it does not answer in time (``deadline``, ``time.monotonic()``),
        uses more CPU time than ``cpu_budget`` seconds in all (checked every :data:`CPU_CHECK_S`; the code
        may raise its own CPU limit, never this one) or dies."""
        try:
            while True:
                wait = min(deadline - time.monotonic(), CPU_CHECK_S)
                if wait > 0 and not select.select([process.sock], [], [], wait)[0]:
                    if _cpu_seconds(process) > cpu_budget:
                        return "cpu_killed", "it used up its CPU time and did not stop"
                    continue
                reply = protocol.receive(process.sock, deadline)
                if reply.get("id") == request_id:  # other replies (forged by the code) are skipped
                    return str(reply.get("status")), str(reply.get("detail", ""))
        except TimeoutError:
            return "killed", "it did not stop at its time limit"
        except (protocol.ProtocolError, OSError) as e:
            return "crashed", f"the interpreter died ({e})"

    def _outcome(self, process: _Process, reply: str, detail: str, timeout_s: float, seconds: float) -> Execution:
        output, truncated, invalid_utf8, size = read_output(process.output_fd, self.limits.output_bytes)
        os.ftruncate(process.output_fd, 0)  # hold no output memory between calls
        status = {
            "ok": ExecStatus.OK,
            "error": ExecStatus.ERROR,
            "timeout": ExecStatus.TIMEOUT,
            "killed": ExecStatus.TIMEOUT,
            "cpu": ExecStatus.CPU_LIMIT,
            "cpu_killed": ExecStatus.CPU_LIMIT,
        }.get(reply, ExecStatus.CRASHED)
        if reply == "exit":
            status = ExecStatus.OK if detail == "0" else ExecStatus.EXIT
        if size >= self.limits.file_bytes and status in (ExecStatus.OK, ExecStatus.ERROR):
            status, detail = ExecStatus.OUTPUT_LIMIT, f"the output reached {self.limits.file_bytes} bytes"
        if reply == "timeout":
            detail = f"it ran longer than {timeout_s:g} s"
        restarted = reply not in _ANSWERS  # killed at its deadline, or died
        return Execution(output, status, detail, restarted, truncated, invalid_utf8, seconds)

    # --------------------------------------------------------------------------------------------
    # Fork server
    # --------------------------------------------------------------------------------------------

    def _ensure_server(self) -> None:
        if os.getpid() != self._owner_pid:
            raise SandboxError(
                "a SandboxPool cannot be used across fork(); create one in each process "
                "(agentfly_envs.sandbox.default_pool() does this for you)"
            )
        if self.closed:
            raise SandboxError("this SandboxPool is closed")
        if self._server is not None:
            return
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        command = [self._python, "-I", "-c", _BOOT.format(packages=_PACKAGES), str(theirs.fileno())]
        try:
            self._server = subprocess.Popen(
                [*command, json.dumps(self._config)],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                env={"LANG": "C.UTF-8"},
                cwd="/",
                start_new_session=True,
            )
        finally:
            theirs.close()
        self._control = ours
        ours.settimeout(STARTUP_TIMEOUT_S)
        try:
            hello, _ = protocol.receive_control(ours)
        except (protocol.ProtocolError, OSError) as e:
            self._stop_server(retire=False)
            raise SandboxError(f"the sandbox's fork server did not start ({self._python}): {e}") from e
        self._isolation = Isolation(bool(hello["namespaces"]), os.geteuid() == 0, str(hello["note"]))
        self._server_root = str(hello["root"])
        if self._config["isolation"] != "none" and not self._isolation.namespaces:
            self._stop_server(retire=False)
            raise SandboxUnavailableError(
                f"the sandbox cannot isolate sessions here ({hello['note']}), and isolation="
                f"{self._config['isolation']!r} refuses to run code without it. Run as root or enable "
                "unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1), or pass "
                "SandboxPool(isolation='none') to run with resource limits only (no file system or network isolation)"
            )
        global _WARNED_UNISOLATED
        if self._config["isolation"] == "none" and not _WARNED_UNISOLATED:
            _WARNED_UNISOLATED = True
            logger.warning(
                "sandbox: isolation='none': sandboxed code runs with resource limits only; it can use the network "
                "and read and write what this user can (see the README's sandbox section)"
            )

    def _stop_server(self, retire: bool) -> None:
        """Stops the fork server: it kills its sessions, or, to ``retire`` it, spawns no more and exits once
        its live sessions have ended (a new one then serves the pool)."""
        while self._pending:
            ours, output_fd = self._pending.popleft()
            ours.close()
            os.close(output_fd)
        for server, root in [(server, root) for server, root in self._retired if server.poll() is not None]:
            self._retired.remove((server, root))
            if os.path.exists(root):  # it died before it cleaned up
                shutil.rmtree(root, onerror=_warn_not_removed)
        if retire and self._server is not None and self._server.poll() is None:
            self._retired.append((self._server, self._server_root))
            self._server, self._server_root = None, ""
        if self._control is not None and self._server is not None:
            with contextlib.suppress(OSError):
                protocol.send_control(self._control, {"op": "shutdown"})
        if self._server is not None:  # wait before closing: unread replies would reset the connection
            try:
                self._server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._server.kill()
                self._server.wait()
            self._server = None
        if self._control is not None:
            self._control.close()  # a retired fork server reads end of file
            self._control = None
        if self._server_root and os.path.exists(self._server_root):  # the fork server died before it cleaned up
            shutil.rmtree(self._server_root, onerror=_warn_not_removed)
        self._server_root = ""

    def _forget_after_fork(self) -> None:
        """In a forked child: drop the parent's handles without touching the parent's fork server."""
        if self._control is not None:
            self._control.close()
        for ours, output_fd in self._pending:
            ours.close()
            os.close(output_fd)
        self._pending.clear()
        self._retired, self._live = [], weakref.WeakSet()
        self._lock = threading.Lock()
        self._control, self._server = None, None


class SandboxSession:
    """One interpreter of a pool, with notebook semantics: each call sees the variables of the ones before.

    Thread-safe (calls on one session run one at a time). If the interpreter dies or must be killed,
    that call's :class:`Execution` says ``restarted`` and the next call runs in a fresh interpreter.
    """

    def __init__(self, pool: SandboxPool) -> None:
        self.pool = pool
        self._process: _Process | None = None
        self._lock = threading.Lock()

    def run(self, code: str, *, echo: bool = True, timeout_s: float | None = None) -> Execution:
        """Runs ``code`` in this session.

        Args:
            code: Python source.
            echo: Print the value of a final expression, as a notebook does.
            timeout_s: Wall-clock limit of this call (default: the pool's ``limits.timeout_s``).

        Raises:
            SandboxError: the sandbox itself failed (never for anything the code does).
        """
        with self._lock:
            lost_state = False
            for attempt in (1, 2):
                if self._process is None:
                    self._process = self.pool._take()
                try:
                    execution = self.pool._execute(self._process, code, echo, timeout_s)
                    break
                except _Gone as e:  # died between calls (or before starting): a fresh interpreter takes the call
                    lost_state = lost_state or self._process.calls > 0
                    self._discard()
                    if attempt == 2:
                        raise SandboxError(f"two sandbox sessions in a row were gone before they ran code: {e}") from e
                except SandboxError:
                    self._discard()
                    raise
            if execution.restarted:
                self._discard()
            return dataclasses.replace(execution, restarted=True) if lost_state else execution

    def _discard(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process = None

    def close(self) -> None:
        """Kills the interpreter and every process it started."""
        with self._lock:
            self._discard()

    def __enter__(self) -> SandboxSession:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _cpu_seconds(process: _Process) -> float:
    """CPU time the session's interpreter (all its threads) has used, in seconds; 0 if it is gone."""
    try:
        with open(f"/proc/{process.pid}/stat", "rb") as file:
            fields = file.read().rpartition(b")")[2].split()
    except FileNotFoundError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS  # utime + stime


def _threads_left(process: _Process) -> int:
    """How many threads besides its main one the session has after a call (waiting up to
    :data:`THREAD_GRACE_S` for threads that are just exiting). Read from the host's ``/proc``, not asked
    of the session, whose code could lie."""
    deadline = time.monotonic() + THREAD_GRACE_S
    while True:
        try:
            threads = len(os.listdir(f"/proc/{process.pid}/task")) - 1
        except FileNotFoundError:  # died after answering: the next call finds out
            return 0
        if threads == 0 or time.monotonic() > deadline:
            return threads
        time.sleep(0.001)


def _out_of_files(error: OSError) -> str:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return (
        f"this process is out of file descriptors ({error.strerror}; RLIMIT_NOFILE soft={soft}, hard={hard}); "
        "each live sandbox session holds 3: close sessions when their episode ends, or raise the hard limit "
        "(ulimit -Hn, or LimitNOFILE= in a systemd unit) before starting the trainer"
    )


def _warn_not_removed(function: Any, path: str, excinfo: Any) -> None:
    logger.warning("sandbox: could not remove %s (%s)", path, excinfo[1])


def read_output(fd: int, limit: int) -> tuple[str, bool, bool, int]:
    """Reads a session's output file: ``(text, truncated, invalid_utf8, size in bytes)``.

    Output longer than ``limit`` bytes keeps its first 3/4 and last 1/4 around a marker.
    """
    size = os.fstat(fd).st_size
    if size <= limit:
        text, invalid = _decode(os.pread(fd, size, 0), cut_before=False, cut_after=False)
        return text, False, invalid, size
    head_size = limit * 3 // 4
    head, head_invalid = _decode(os.pread(fd, head_size, 0), cut_before=False, cut_after=True)
    tail, tail_invalid = _decode(os.pread(fd, limit - head_size, size - (limit - head_size)), True, False)
    marker = f"\n[... {size - limit} bytes of output cut ...]\n"
    return head + marker + tail, True, head_invalid or tail_invalid, size


def _decode(data: bytes, cut_before: bool, cut_after: bool) -> tuple[str, bool]:
    """UTF-8 text of ``data`` and whether it held invalid bytes; a character split by a cut is dropped."""
    if cut_before:
        skip = 0
        while skip < min(3, len(data)) and data[skip] & 0xC0 == 0x80:
            skip += 1
        data = data[skip:]
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        return decoder.decode(data, final=not cut_after), False
    except UnicodeDecodeError:
        return data.decode("utf-8", errors="replace"), True


# Pools are tracked (weakly) only to make them safe across fork() and to stop their fork servers at exit;
# the default pool is the one process-wide resource tools share (like a thread pool), remade after fork().
_POOLS: weakref.WeakSet[SandboxPool] = weakref.WeakSet()
_default: SandboxPool | None = None
_default_lock = threading.Lock()


def default_pool() -> SandboxPool:
    """The process's shared pool with default limits, started on first use (one per process, also after fork)."""
    global _default
    with _default_lock:
        if _default is None or _default.closed:
            _default = SandboxPool()
        return _default


def _after_fork_in_child() -> None:
    global _default, _default_lock
    for pool in list(_POOLS):
        pool._forget_after_fork()
    _default, _default_lock = None, threading.Lock()


def _close_all() -> None:
    for pool in list(_POOLS):
        if not pool.closed and pool._owner_pid == os.getpid():
            pool.close()


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(_close_all)
