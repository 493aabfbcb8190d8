"""The pool's side of its fork server (see :mod:`.worker`): starting it, taking sessions from it, retiring and
stopping it.

Spare sessions are spawn requests sent ahead on the control socket, answered in order, so they live here with it:
stopping the server drops them.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import time
import weakref
from dataclasses import asdict
from pathlib import Path
from typing import Any

from agentfly_envs.sandbox import protocol
from agentfly_envs.sandbox.limits import SandboxLimits
from agentfly_envs.sandbox.results import Isolation, SandboxError, SandboxUnavailableError

logger = logging.getLogger(__name__)

STARTUP_TIMEOUT_S = 60.0
"""How long the fork server and a new session may take to start, in seconds."""
REMOVAL_RETRY_S = 1.0
"""How long a dead fork server's directory that is not empty yet is tried again, in seconds."""
TOO_MANY_FILES = (errno.EMFILE, errno.ENFILE)
"""The errnos of a process out of file descriptors (its limit, not a failed fork server)."""

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

_WARNED_UNISOLATED = False  # isolation="none" warns once per process


class SessionProcess:
    """The pool's handles on one session: its socket (as a :class:`~.protocol.MessageStream`), its output file, a
    pidfd of its guard and, once it is ready, the session's pid (a child of the guard, so it stays the session's while
    the guard lives) and the CPU time it had used then, in seconds (its start-up: it reports that before any code
    has run, so it is not the code's word)."""

    def __init__(self, sock: socket.socket, output_fd: int, pidfd: int) -> None:
        self.stream, self.output_fd, self.pidfd = protocol.MessageStream(sock), output_fd, pidfd
        self.ready = False
        self.pid = 0
        self.ready_cpu_s = 0.0
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


class ForkServerHandle:
    """One pool's fork server: the process, its control socket, its spare sessions and the servers it replaced.

    Not thread-safe: the pool calls it under its lock.

    Args:
        python: The interpreter that runs the fork server.
        config: The fork server's config, ``{"isolation": "auto" | "namespaces" | "none", "preload": [...]}``.
    """

    def __init__(self, python: str, config: dict[str, Any]) -> None:
        self.python = python
        self.config = config
        self.process: subprocess.Popen | None = None
        self.root = ""  # the fork server's directory of work dirs, removed if it dies without cleaning up
        self.control: socket.socket | None = None
        self.isolation: Isolation | None = None
        self._pending = 0  # spawn requests sent and not answered yet: the spares
        self._retired: list[tuple[subprocess.Popen, str]] = []  # replaced fork servers and their directories

    @property
    def died(self) -> bool:
        """The fork server was started and has exited (its spares died with it)."""
        return self.process is not None and self.process.poll() is not None

    def start(self) -> None:
        """Starts the fork server unless it runs, and learns how it isolates sessions.

        Raises:
            SandboxError: it did not start.
            SandboxUnavailableError: isolation was asked for and this machine does not allow it.
        """
        if self.process is not None:
            return
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        command = [self.python, "-I", "-c", _BOOT.format(packages=_PACKAGES), str(theirs.fileno())]
        try:
            self.process = subprocess.Popen(
                [*command, json.dumps(self.config)],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                env={"LANG": "C.UTF-8"},
                cwd="/",
                start_new_session=True,
            )
        finally:
            theirs.close()
        self.control = ours
        ours.settimeout(STARTUP_TIMEOUT_S)
        try:
            hello, _ = protocol.receive_control(ours)
        except (protocol.ProtocolError, OSError) as e:
            self.stop(retire=False)
            raise SandboxError(f"the sandbox's fork server did not start ({self.python}): {e}") from e
        self.isolation = Isolation(bool(hello["namespaces"]), os.geteuid() == 0, str(hello["note"]))
        self.root = str(hello["root"])
        if self.config["isolation"] != "none" and not self.isolation.namespaces:
            self.stop(retire=False)
            raise SandboxUnavailableError(
                f"the sandbox cannot isolate sessions here ({hello['note']}), and isolation="
                f"{self.config['isolation']!r} refuses to run code without it. Run as root or enable "
                "unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1), or pass "
                "SandboxPool(isolation='none') to run with resource limits only (no file system or network isolation)"
            )
        global _WARNED_UNISOLATED
        if self.config["isolation"] == "none" and not _WARNED_UNISOLATED:
            _WARNED_UNISOLATED = True
            logger.warning(
                "sandbox: isolation='none': sandboxed code runs with resource limits only; it can use the network "
                "and read and write what this user can (see the README's sandbox section)"
            )

    def take(self, limits: SandboxLimits, spares: int) -> SessionProcess:
        """A forked session, from the spares when there is one; asks for more up to ``spares``. The server must be
        started.

        Raises:
            OSError: ``EMFILE``: this process has no file descriptors left for the session's three.
        """
        if not self._pending:
            self._request_spawn(limits)
        process = self._receive_spawn()
        while self._pending < spares:
            self._request_spawn(limits)
        return process

    def _request_spawn(self, limits: SandboxLimits) -> None:
        protocol.send_control(self.control, _spawn_request(limits))
        self._pending += 1

    def _receive_spawn(self) -> SessionProcess:
        self._pending -= 1
        reply, fds = protocol.receive_control(self.control, max_fds=3)
        if not reply.get("ok") or len(fds) != 3:
            for fd in fds:
                os.close(fd)
            raise SandboxError(f"the sandbox could not start a session: {reply.get('error', reply)}")
        return SessionProcess(socket.socket(fileno=fds[0]), fds[1], fds[2])

    def stop(self, retire: bool) -> None:
        """Stops the fork server: it kills its sessions, or, to ``retire`` it, spawns no more and exits once
        its live sessions have ended (a new one then serves the pool)."""
        self._pending = 0  # their answers die with the control socket (the kernel closes descriptors in flight)
        for server, root in [(server, root) for server, root in self._retired if server.poll() is not None]:
            self._retired.remove((server, root))
            if os.path.exists(root):  # it died before it cleaned up
                _remove_directory(root)
        if retire and self.process is not None and self.process.poll() is None:
            self._retired.append((self.process, self.root))
            self.process, self.root = None, ""
        if self.control is not None and self.process is not None:
            with contextlib.suppress(OSError):
                protocol.send_control(self.control, {"op": "shutdown"})
        if self.process is not None:  # wait before closing: unread replies would reset the connection
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.process = None
        if self.control is not None:
            self.control.close()  # a retired fork server reads end of file
            self.control = None
        if self.root and os.path.exists(self.root):  # the fork server died before it cleaned up
            _remove_directory(self.root)
        self.root = ""

    def close(self) -> None:
        """Stops the fork server and kills the retired ones (their sessions die with them: a guard's death signal)."""
        self.stop(retire=False)
        for server, root in self._retired:
            server.kill()
            server.wait()
            _remove_directory(root)
        self._retired.clear()

    def forget_after_fork(self) -> None:
        """In a forked child: drop the parent's handles without touching the parent's fork server."""
        if self.control is not None:
            self.control.close()
        self._pending = 0
        self._retired = []
        self.control, self.process = None, None


@functools.lru_cache(maxsize=8)
def _spawn_request(limits: SandboxLimits) -> dict[str, Any]:
    """The fork server's request for a session under ``limits`` (the same few limits for a pool's life)."""
    return {"op": "spawn", "limits": asdict(limits)}


def _remove_directory(root: str) -> None:
    """Removes a fork server's directory of work dirs. Its sessions may still be dying and writing into it (each
    learns of its guard's death by a signal), so a directory that is not empty yet is tried again for up to
    :data:`REMOVAL_RETRY_S`; what still cannot be removed is logged."""
    deadline = time.monotonic() + REMOVAL_RETRY_S
    while True:
        try:
            shutil.rmtree(root)
            return
        except FileNotFoundError:
            return
        except OSError as e:
            if e.errno != errno.ENOTEMPTY or time.monotonic() > deadline:
                shutil.rmtree(root, onerror=_warn_not_removed)
                return
        time.sleep(0.02)


def _warn_not_removed(function: Any, path: str, excinfo: Any) -> None:
    logger.warning("sandbox: could not remove %s (%s)", path, excinfo[1])
