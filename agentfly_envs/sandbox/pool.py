"""``SandboxPool``: runs model-written Python in warm, isolated, resource-limited processes.

A pool owns one fork server (see :mod:`.worker`) and keeps ``spares`` fresh sessions forked ahead
of need, so a call costs a round trip (about a millisecond), not an interpreter start. A
:class:`SandboxSession` is one interpreter with notebook semantics: variables persist from call to
call until it is closed; every session starts from the same clean state. At most ``workers`` calls
run at once; any number of threads may share a pool.

The pool hands out sessions and keeps their count; its parts live beside it: :mod:`.fork_server` (starting,
retiring and stopping the fork server, spare sessions), :mod:`.call` (one call, watched from ``/proc``),
:mod:`.outcome` (how a call ended), :mod:`.results` (what callers get back) and :mod:`.default` (the process's
shared pool).

Example:
    >>> with SandboxPool(SandboxLimits(timeout_s=5)) as pool, pool.session() as session:
    ...     _ = session.run("x = 6 * 7")
    ...     session.run("x").output
    '42\\n'
"""

from __future__ import annotations

import atexit
import dataclasses
import logging
import os
import resource
import sys
import threading
import weakref

from agentfly_envs.sandbox.call import Gone, run_call
from agentfly_envs.sandbox.fork_server import TOO_MANY_FILES, ForkServerHandle, SessionProcess
from agentfly_envs.sandbox.limits import SandboxLimits
from agentfly_envs.sandbox.protocol import ProtocolError
from agentfly_envs.sandbox.results import Execution, Isolation, SandboxError

logger = logging.getLogger(__name__)


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
        config = {"isolation": isolation, "preload": list(preload)}
        self._fork_server = ForkServerHandle(python or sys.executable, config)
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(self.workers)
        self._live: weakref.WeakSet[SessionProcess] = weakref.WeakSet()  # handed to sessions and not yet killed
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
            return self._fork_server.isolation

    def session(self) -> SandboxSession:
        """A new interpreter with notebook semantics; it starts on its first call. Close it when done."""
        return SandboxSession(self)

    def run(self, code: str, *, timeout_s: float | None = None) -> Execution:
        """Runs ``code`` as a program in a fresh interpreter that is discarded afterwards (with every thread and
        process the code started: the result does not look for them, so it never says ``restarted`` for them)."""
        with self.session() as session:
            return session._run(code, echo=False, timeout_s=timeout_s, last=True)

    def close(self) -> None:
        """Stops the fork server, which kills every session of this pool. The pool cannot be used afterwards."""
        with self._lock:
            self.closed = True
            self._fork_server.close()

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SandboxPool(workers={self.workers}, spares={self.spares}, limits={self.limits})"

    # --------------------------------------------------------------------------------------------
    # Sessions
    # --------------------------------------------------------------------------------------------

    def _take(self) -> SessionProcess:
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
                    if e.errno in TOO_MANY_FILES:  # this process's limit, not a failed fork server
                        raise SandboxError(_out_of_files(e)) from e
                    failure = e
                except ProtocolError as e:
                    failure = e
                if attempt == 2:
                    self._fork_server.stop(retire=True)
                    raise SandboxError(f"the sandbox's fork server failed twice in a row: {failure}") from failure
                logger.warning(
                    "sandbox fork server failed (%s: %s); starting a new one (live sessions keep running)",
                    type(failure).__name__,
                    failure,
                )
                self._fork_server.stop(retire=True)
            self._live.add(process)
            return process

    def _take_locked(self) -> SessionProcess:
        if self._fork_server.died:  # its spares died with it
            self._fork_server.stop(retire=False)
        self._ensure_server()
        return self._fork_server.take(self.limits, self.spares)

    def _ensure_server(self) -> None:
        if os.getpid() != self._owner_pid:
            raise SandboxError(
                "a SandboxPool cannot be used across fork(); create one in each process "
                "(agentfly_envs.sandbox.default_pool() does this for you)"
            )
        if self.closed:
            raise SandboxError("this SandboxPool is closed")
        self._fork_server.start()

    def _forget_after_fork(self) -> None:
        """In a forked child: drop the parent's handles without touching the parent's fork server."""
        self._fork_server.forget_after_fork()
        self._live = weakref.WeakSet()
        self._lock = threading.Lock()


class SandboxSession:
    """One interpreter of a pool, with notebook semantics: each call sees the variables of the ones before.

    Thread-safe (calls on one session run one at a time). If the interpreter dies or must be killed,
    that call's :class:`Execution` says ``restarted`` and the next call runs in a fresh interpreter.
    """

    def __init__(self, pool: SandboxPool) -> None:
        self.pool = pool
        self._process: SessionProcess | None = None
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
        return self._run(code, echo=echo, timeout_s=timeout_s, last=False)

    def _run(self, code: str, *, echo: bool, timeout_s: float | None, last: bool) -> Execution:
        """:meth:`run`; ``last``: the session is closed after this call (see :func:`~.call.run_call`)."""
        with self._lock:
            lost_state = False
            attempts = self.pool.spares + 2  # every spare may have died while it waited, then one fresh fork
            for attempt in range(1, attempts + 1):
                if self._process is None:
                    self._process = self.pool._take()
                try:
                    limits, slots = self.pool.limits, self.pool._slots
                    execution = run_call(self._process, code, echo, timeout_s, limits, slots, last)
                    break
                except Gone as e:  # died between calls (or before starting): a fresh interpreter takes the call
                    lost_state = lost_state or self._process.calls > 0
                    self._discard()
                    if attempt == attempts:
                        raise SandboxError(
                            f"{attempts} sandbox sessions in a row were gone before they ran code: {e}"
                        ) from e
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


def _out_of_files(error: OSError) -> str:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return (
        f"this process is out of file descriptors ({error.strerror}; RLIMIT_NOFILE soft={soft}, hard={hard}); "
        "each live sandbox session holds 3: close sessions when their episode ends, or raise the hard limit "
        "(ulimit -Hn, or LimitNOFILE= in a systemd unit) before starting the trainer"
    )


# Pools are tracked (weakly) only to make them safe across fork() and to stop their fork servers at exit;
# the default pool (see :mod:`.default`) is remade after fork() by a hook of its own.
_POOLS: weakref.WeakSet[SandboxPool] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for pool in list(_POOLS):
        pool._forget_after_fork()


def _close_all() -> None:
    for pool in list(_POOLS):
        if not pool.closed and pool._owner_pid == os.getpid():
            pool.close()


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(_close_all)
