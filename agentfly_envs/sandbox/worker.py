"""The sandbox's processes: a fork server, and for each session a guard and the interpreter it watches.

:class:`~agentfly_envs.sandbox.pool.SandboxPool` starts :func:`main` in a fresh ``python -I``
process with a minimal environment (none of the host's variables) and talks to it over a control
socket. Standard library only.

    fork server (one per pool; runs as the pool's user; has preloaded common modules)
      └─ guard (one per session; never runs agent code; cleans up after the session)
           └─ session: pid 1 of its own namespaces; runs the agent's code, call after call

For each ``spawn`` request (carrying the session's socket and output file) the fork server forks a
guard and answers with a pidfd of it, which the pool uses to kill the session. The guard enters new
namespaces and forks the session, which isolates itself (see :mod:`.isolation`), says ``ready`` and
serves run requests (see :mod:`.interpreter`). A session dies with its guard (``PR_SET_PDEATHSIG``),
the guard with the fork server. The fork server kills its sessions and exits when the pool says
``shutdown``; when the pool retires it (closes the socket), it spawns no more and exits once its last
session has ended.
"""

from __future__ import annotations

import contextlib
import dataclasses
import faulthandler
import fcntl
import json
import os
import resource
import shutil
import signal
import socket
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from agentfly_envs.sandbox import isolation, linux, protocol
from agentfly_envs.sandbox.interpreter import Interpreter
from agentfly_envs.sandbox.limits import SandboxLimits

PRELOAD = (
    "ast", "bisect", "collections", "datetime", "decimal", "fractions", "functools", "heapq", "itertools",
    "json", "math", "random", "re", "statistics", "string", "textwrap", "typing",
)  # fmt: skip
"""Modules the fork server imports once, so sessions start with them loaded."""


def session_environment(workdir: str, tmpdir: str) -> dict[str, str]:
    """The environment variables the code sees: nothing of the host's."""
    return {
        "PATH": f"{os.path.dirname(sys.executable)}:/usr/local/bin:/usr/bin:/bin",
        "HOME": workdir,
        "TMPDIR": tmpdir,
        "LANG": "C.UTF-8",
        "PYTHONIOENCODING": "utf-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }


@dataclass(frozen=True)
class SessionSpec:
    """How to start one session.

    Attributes:
        workdir: Its working directory (created by the fork server); with namespaces, the mount point of
            its own root, in which it works in :data:`.isolation.WORKDIR`.
        limits: Its resource limits.
        namespaces: Whether to isolate it with namespaces.
        sandbox_uid: Its own uid when the pool runs as root (set by its guard), else ``None``.
    """

    workdir: str
    limits: SandboxLimits
    namespaces: bool
    sandbox_uid: int | None


# ------------------------------------------------------------------------------------------------
# Session (grandchild of the fork server)
# ------------------------------------------------------------------------------------------------


def _session(sock_fd: int, output_fd: int, lifeline: int, spec: SessionSpec) -> None:
    """Isolates this process, says ``ready`` (or why not) and serves calls; never returns.

    ``lifeline`` is the read end of a pipe whose write end only the guard holds: the guard writes a
    byte once it has told the pool the session's pid, and it reads as end of file once the guard is gone.
    """
    stream = protocol.MessageStream(socket.socket(fileno=sock_fd))
    workdir, tmpdir = (isolation.WORKDIR, "/tmp") if spec.namespaces else (spec.workdir, spec.workdir)
    try:
        if spec.namespaces:
            isolation.build_root(spec.workdir, spec.limits.disk_bytes, spec.sandbox_uid)
        os.chdir(workdir)
        null = os.open(os.devnull, os.O_RDONLY)
        for target, source in ((0, null), (1, output_fd), (2, output_fd)):
            os.dup2(source, target)
        os.close(null)
        os.close(output_fd)
        isolation.apply_limits(spec.limits)
        isolation.drop_privileges(spec.sandbox_uid, in_user_namespace=spec.namespaces and spec.sandbox_uid is None)
        _die_with_guard(lifeline)
        os.environ.clear()
        os.environ.update(session_environment(workdir, tmpdir))
        tempfile.tempdir = None
        sys.argv = [""]
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes past RLIMIT_FSIZE fail instead of killing
        interpreter = Interpreter(sweep=spec.namespaces)
        faulthandler.enable(sys.stderr)  # a crash leaves its trace in the output
    except BaseException as e:
        with contextlib.suppress(OSError):
            stream.send({"error": f"session setup failed: {type(e).__name__}: {e}"})
        os._exit(1)
    try:
        stream.send({"ready": True, "cpu_s": time.process_time()})  # no model code has run: the pool's baseline
        interpreter.serve(stream)
    finally:
        os._exit(0)


def _die_with_guard(lifeline: int) -> None:
    """Asks for SIGKILL when the guard dies (set after the last change of uid, which would clear it), waits
    until the guard has sent the session's pid, and exits at once if the guard is already gone."""
    linux.prctl(linux.PR_SET_PDEATHSIG, signal.SIGKILL)
    if not os.read(lifeline, 1):
        os._exit(1)
    os.close(lifeline)


# ------------------------------------------------------------------------------------------------
# Guard (child of the fork server)
# ------------------------------------------------------------------------------------------------


def _guard(sock_fd: int, output_fd: int, spec: SessionSpec, server_pid: int) -> None:
    """Enters the session's namespaces, forks the session and waits for it; never returns."""
    try:
        linux.prctl(linux.PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != server_pid:
            os._exit(1)
        os.setsid()
        _close_fds_except(sock_fd, output_fd)
        if os.geteuid() == 0:
            uid = isolation.session_uid(os.getpid())
            os.chown(spec.workdir, uid, uid)
            spec = dataclasses.replace(spec, sandbox_uid=uid)
        try:
            if spec.namespaces:
                isolation.enter_namespaces()
            lifeline, alive = os.pipe()
            pid = os.fork()
        except OSError as e:
            with contextlib.suppress(OSError):
                error = {"error": f"cannot isolate the session: {e}"}
                protocol.MessageStream(socket.socket(fileno=sock_fd)).send(error)
            os._exit(1)
        if pid == 0:
            os.close(alive)
            _session(sock_fd, output_fd, lifeline, spec)
        with contextlib.suppress(OSError):  # the pool gave up on the session: it finds out by itself
            protocol.MessageStream(socket.socket(fileno=sock_fd)).send({"pid": pid})  # host pid: CPU time, threads
        os.write(alive, b".")
        for fd in (output_fd, lifeline):
            os.close(fd)
        os.waitpid(pid, 0)
    finally:
        os._exit(0)


def _close_fds_except(*keep: int) -> None:
    """Closes every file descriptor above 2 but ``keep`` (the fork server's control socket above all), and
    makes ``keep`` close-on-exec, so no program the code starts inherits them."""
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2 and fd not in keep:
            with contextlib.suppress(OSError):  # the directory listing's own descriptor, already gone
                os.close(fd)
    for fd in keep:
        os.set_inheritable(fd, False)


# ------------------------------------------------------------------------------------------------
# Fork server
# ------------------------------------------------------------------------------------------------


@dataclass
class ForkServer:
    """Forks sessions on request and cleans up after them.

    Attributes:
        control: The socket to the pool.
        root: The directory holding the sessions' working directories.
        namespaces: Whether sessions are isolated with namespaces.
    """

    control: socket.socket
    root: str
    namespaces: bool
    _guards: dict[int, str] = field(default_factory=dict)  # guard pid -> workdir
    _count: int = 0

    def serve(self) -> bool:
        """Answers spawn requests until the pool says ``shutdown`` (returns ``True``: kill the sessions) or
        closes the socket (returns ``False``: the pool retired this server; its sessions live on)."""
        while True:
            readable = protocol.wait_readable(self.control, 0.2)
            self._reap(block=False)
            if not readable:
                continue
            try:
                message, _ = protocol.receive_control(self.control, max_fds=0)
            except protocol.ProtocolError:
                return False
            if message.get("op") != "spawn":
                return True
            try:
                self._spawn(message)
            except OSError:  # the pool closed its end while we forked: nobody is left to answer
                return False

    def start_session(self, sock_fd: int, output_fd: int, limits: SandboxLimits, namespaces: bool) -> int:
        """Forks the guard of a new session and returns its pid; the two descriptors pass to the session."""
        try:
            self._count += 1
            workdir = os.path.join(self.root, f"session-{self._count}")
            os.mkdir(workdir, 0o700)
            spec = SessionSpec(workdir, limits, namespaces, sandbox_uid=None)
            server_pid = os.getpid()
            pid = os.fork()
            if pid == 0:
                _guard(sock_fd, output_fd, spec, server_pid)
        finally:
            os.close(sock_fd)
            os.close(output_fd)
        self._guards[pid] = workdir
        return pid

    def _spawn(self, message: dict[str, Any]) -> None:
        """Starts a session and sends the pool its three descriptors: its end of the session's socket, the output
        file (a memfd in append mode) and a pidfd of the guard (made here, so the pool's process makes none)."""
        ours, theirs = socket.socketpair()
        output_fd = os.memfd_create("agentfly-sandbox-output")
        try:
            fcntl.fcntl(output_fd, fcntl.F_SETFL, fcntl.fcntl(output_fd, fcntl.F_GETFL) | os.O_APPEND)
            limits = SandboxLimits(**message["limits"])
            pid = self.start_session(theirs.detach(), os.dup(output_fd), limits, self.namespaces)
            pidfd = os.pidfd_open(pid)
        except Exception as e:  # answer the pool instead of dying; it raises the error where it can be seen
            protocol.send_control(self.control, {"ok": False, "error": f"{type(e).__name__}: {e}"})
        else:
            protocol.send_control(self.control, {"ok": True, "pid": pid}, [ours.fileno(), output_fd, pidfd])
            os.close(pidfd)
        finally:
            theirs.close()
            ours.close()
            os.close(output_fd)

    def _reap(self, block: bool) -> None:
        """Reaps finished children (guards, and orphans of sessions, as the server is their subreaper);
        with ``block``, waits until every guard has finished."""
        while True:
            try:
                pid, _ = os.waitpid(-1, 0 if block and self._guards else os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid in self._guards:
                self._clean_up(pid, self._guards.pop(pid))

    def _clean_up(self, guard_pid: int, workdir: str) -> None:
        """Kills what is left of a finished session (its process group, which the guard led, and as root without
        namespaces every process of its uid) and removes its directory; a failure is reported on stderr."""
        try:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(guard_pid, signal.SIGKILL)
            if os.geteuid() == 0 and not self.namespaces:
                _kill_all_of_user(isolation.session_uid(guard_pid))
            shutil.rmtree(workdir, onerror=_make_writable_and_retry)
        except Exception as e:
            print(f"agentfly sandbox: cleaning up {workdir} failed: {type(e).__name__}: {e}", file=sys.stderr)

    def shut_down(self, kill: bool, pool_pid: int) -> None:
        """Waits for every session to end and removes the working directories; kills them first if ``kill``,
        or once the pool's process (``pool_pid``) is gone, since nobody is left to stop them."""
        while self._guards and not kill:
            time.sleep(0.1)
            self._reap(block=False)
            kill = os.getppid() != pool_pid
        for pid in list(self._guards) if kill else ():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self._reap(block=True)
        shutil.rmtree(self.root, ignore_errors=True)


def _make_writable_and_retry(function: Any, path: str, _: Any) -> None:
    """``shutil.rmtree`` error handler: code may leave directories without write permission."""
    os.chmod(os.path.dirname(path), 0o700)
    function(path)


def _kill_all_of_user(uid: int) -> None:
    """Kills every process of ``uid`` (a session's own uid), from a child that takes that uid."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setresuid(uid, uid, uid)
            for _ in range(1000):  # processes forked meanwhile are caught by the next round; once none is
                os.kill(-1, signal.SIGKILL)  # left, kill raises ProcessLookupError and the helper exits
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def _probe(server: ForkServer) -> str:
    """Starts one session with namespace isolation; returns ``""`` if it came up, else why it did not."""
    ours, theirs = socket.socketpair()
    output_fd = os.memfd_create("agentfly-probe")
    pid = server.start_session(theirs.detach(), output_fd, SandboxLimits(), namespaces=True)
    probe = protocol.MessageStream(ours)
    try:
        reply = probe.receive(deadline=time.monotonic() + 30)
        if "pid" in reply:  # the guard's message; the session's comes next
            reply = probe.receive(deadline=time.monotonic() + 30)
    except (protocol.ProtocolError, TimeoutError) as e:
        reply = {"error": f"the probe session did not start: {e}"}
    finally:
        probe.close()
        os.kill(pid, signal.SIGKILL)
    return "" if reply.get("ready") else str(reply.get("error"))


def main() -> None:
    """Entry point of the fork server: ``argv[1]`` is the control socket's fd, ``argv[2]`` a JSON config
    ``{"isolation": "auto" | "namespaces" | "none", "preload": [module, ...]}``."""
    control = socket.socket(fileno=int(sys.argv[1]))
    config = json.loads(sys.argv[2])
    linux.prctl(linux.PR_SET_CHILD_SUBREAPER, 1)  # orphans of sessions come back here to be reaped
    _, most_files = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (most_files, most_files))  # sessions get their own limit
    for module in (*PRELOAD, *config.get("preload", ())):
        __import__(module)
    root = tempfile.mkdtemp(prefix="agentfly-sandbox-")
    os.chmod(root, 0o711)  # sessions with their own uid must reach their directories
    server = ForkServer(control, root, namespaces=False)
    kill, pool_pid = True, os.getppid()
    try:
        note = "turned off (isolation='none')" if config["isolation"] == "none" else _probe(server)
        server.namespaces = not note
        hello = {"hello": True, "namespaces": server.namespaces, "note": note, "root": root}
        protocol.send_control(control, hello)
        kill = server.serve()
    finally:
        server.shut_down(kill, pool_pid)
