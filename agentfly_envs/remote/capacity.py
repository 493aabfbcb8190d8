"""How many sessions a server holds: :data:`DEFAULT_MAX_SESSIONS`, how it refuses one more, and the open-files
limit of its process.

Each WebSocket session holds one socket, and a process may open at most ``ulimit -n`` files (often 1,024 by
default); past that a server fails to accept connections without a word (its clients see them reset, and its
``/health`` stops answering), so ``serve`` raises the limit (:func:`raise_open_files_limit`) before it serves.
"""

from __future__ import annotations

DEFAULT_MAX_SESSIONS = 1024
"""Sessions a server holds at once unless told otherwise (about 120 KiB, one thread and one socket each, for
agentfly's calculator env)."""

TRY_AGAIN_LATER = 1013
"""The close code of a WebSocket connection the server refuses because every session is taken (RFC 6455's "try
again later")."""
CAPACITY_REACHED = "CAPACITY_REACHED"
"""OpenEnv's error code for a session refused because every session is taken."""
FILES_BESIDE_SESSIONS = 64
"""Open files a process needs besides its sessions' sockets (its listening socket, imports, HTTP requests)."""


def raise_open_files_limit(sessions: int) -> int:
    """Raises this process's soft limit on open files to make room for ``sessions`` connections (up to the hard
    limit, ``ulimit -Hn``, which only root may raise), and returns how many connections fit under the limit now.

    Args:
        sessions: Connections the process is to hold at once.

    Returns:
        The connections that fit: the soft limit less :data:`FILES_BESIDE_SESSIONS` (``sessions`` where the
        platform has no such limit).
    """
    try:
        import resource
    except ImportError:  # not a POSIX system: no per-process limit to raise
        return sessions
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = sessions + FILES_BESIDE_SESSIONS
    if soft != resource.RLIM_INFINITY and soft < wanted:
        soft = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    if soft == resource.RLIM_INFINITY:
        return sessions
    return max(soft - FILES_BESIDE_SESSIONS, 0)
