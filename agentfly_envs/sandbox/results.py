"""What the sandbox hands its callers: a call's :class:`Execution`, a pool's :class:`Isolation`, and its errors."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from agentfly_envs.errors import InfrastructureError


class SandboxError(InfrastructureError):
    """The sandbox itself failed (its fork server could not start or stopped answering, no session could be
    started or reached): never for anything the code does, so an env ends the episode instead of blaming the agent."""


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
        seconds: Wall-clock time of the call, from when it had a free worker (a wait for one is not counted).
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
