"""The process's default pool: the one process-wide sandbox that tools share (like a thread pool), remade after
fork()."""

from __future__ import annotations

import os
import threading

from agentfly_envs.sandbox.pool import SandboxPool

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
    _default, _default_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)
