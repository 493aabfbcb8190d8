"""How a sandbox session is walled off: namespaces, mounts, resource limits, privileges.

Runs inside the sandbox's worker processes (standard library only). With namespace isolation the
guard process calls :func:`enter_namespaces` and the session process, pid 1 of the new namespaces
and still privileged there, calls :func:`isolate_filesystem`; every session then applies
:func:`apply_limits` and :func:`drop_privileges` before it runs any code.

When the pool runs as root, each session runs as its own unprivileged uid (``SANDBOX_UID_BASE`` +
slot), so ``RLIMIT_NPROC`` counts that session's processes only; as another user, the session's
processes are counted in their own user namespace.
"""

from __future__ import annotations

import os
import resource
import sys

from agentfly_envs.sandbox import linux
from agentfly_envs.sandbox.limits import SandboxLimits

SANDBOX_UID_BASE = 1_500_000_000
"""Sessions of a pool running as root get uid/gid ``SANDBOX_UID_BASE + slot`` (no passwd entry needed)."""

_NAMESPACES = linux.CLONE_NEWNS | linux.CLONE_NEWPID | linux.CLONE_NEWNET | linux.CLONE_NEWIPC | linux.CLONE_NEWUTS


def enter_namespaces() -> None:
    """Moves the calling process into new mount, pid, network, IPC and UTS namespaces.

    Root creates them directly; another user creates a user namespace with them, in which it is
    root (uid and gid 0 mapped to its own). The caller's next child is pid 1 of the new pid namespace.
    """
    if os.geteuid() == 0:
        linux.unshare(_NAMESPACES)
        return
    uid, gid = os.geteuid(), os.getegid()
    linux.unshare(linux.CLONE_NEWUSER | _NAMESPACES)
    for name, content in (("uid_map", f"0 {uid} 1"), ("setgroups", "deny"), ("gid_map", f"0 {gid} 1")):
        with open(f"/proc/self/{name}", "w") as file:
            file.write(content)


def isolate_filesystem(workdir: str, disk_bytes: int, sandbox_uid: int | None) -> None:
    """Gives the session a file system of its own (call as pid 1 of new namespaces, before dropping privileges).

    Mounts stop propagating to the host; the interpreter's directories stay reachable for
    ``sandbox_uid``; ``workdir`` becomes an empty in-memory file system of ``disk_bytes``; ``/proc``
    shows only the session's processes; everything but ``workdir`` becomes read-only.
    """
    linux.mount(None, "/", None, linux.MS_REC | linux.MS_PRIVATE)
    if sandbox_uid is not None:
        _expose_python(sandbox_uid)
    owner = f",uid={sandbox_uid},gid={sandbox_uid}" if sandbox_uid is not None else ""
    linux.mount("tmpfs", workdir, "tmpfs", linux.MS_NOSUID | linux.MS_NODEV, f"size={disk_bytes},mode=0700{owner}")
    linux.mount("proc", "/proc", "proc", linux.MS_NOSUID | linux.MS_NODEV | linux.MS_NOEXEC)
    linux.set_read_only("/", True, recursive=True)
    linux.set_read_only(workdir, False, recursive=False)


def _expose_python(sandbox_uid: int) -> None:
    """Keeps the interpreter importable for ``sandbox_uid`` when it lives under a directory other users
    cannot enter (e.g. ``/root/.pyenv``): that directory is covered with an empty file system in which only
    the interpreter's own directories are bound back (so the rest of it, e.g. ``/root``, stays hidden)."""
    hidden = _python_dirs_closed_to_others()
    handles = {path: os.open(path, os.O_PATH | os.O_DIRECTORY) for path in hidden}
    for top in sorted({_topmost_closed_ancestor(path) for path in hidden}):
        linux.mount("tmpfs", top, "tmpfs", linux.MS_NOSUID | linux.MS_NODEV, "size=1m,mode=0755")
    for path, handle in handles.items():
        os.makedirs(path, mode=0o755, exist_ok=True)
        linux.mount(f"/proc/self/fd/{handle}", path, None, linux.MS_BIND | linux.MS_REC)
        os.close(handle)


def _python_dirs_closed_to_others() -> list[str]:
    """The interpreter's prefixes and import directories that users other than their owner cannot reach."""
    candidates = (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, *sys.path)
    paths = set()
    for path in filter(None, candidates):
        real = os.path.realpath(path)
        real = real if os.path.isdir(real) else os.path.dirname(real)
        if os.path.isdir(real) and _topmost_closed_ancestor(real) is not None:
            paths.add(real)
    outermost = []
    for path in sorted(paths):  # a parent sorts before its children
        if not any(path.startswith(kept + os.sep) for kept in outermost):
            outermost.append(path)
    return outermost


def _topmost_closed_ancestor(path: str) -> str | None:
    """The highest strict ancestor of ``path`` that others may not enter (no ``o+x``), or ``None``."""
    parts = path.strip(os.sep).split(os.sep)
    for depth in range(1, len(parts)):
        ancestor = os.sep + os.path.join(*parts[:depth])
        if not os.stat(ancestor).st_mode & 0o001:
            return ancestor
    return None


def apply_limits(limits: SandboxLimits) -> None:
    """Sets the per-process resource limits (hard = soft, except CPU time, which each call sets itself)."""
    for kind, value in (
        (resource.RLIMIT_AS, limits.memory_bytes),
        (resource.RLIMIT_NPROC, limits.processes),
        (resource.RLIMIT_FSIZE, limits.file_bytes),
        (resource.RLIMIT_NOFILE, limits.open_files),
        (resource.RLIMIT_CORE, 0),
    ):
        resource.setrlimit(kind, (value, value))


def drop_privileges(sandbox_uid: int | None, in_user_namespace: bool) -> None:
    """Makes the session unprivileged for good: its own uid (pool run as root), or no capabilities left in
    its user namespace; and no privilege gain through set-uid programs (``PR_SET_NO_NEW_PRIVS``)."""
    if sandbox_uid is not None:
        os.setgroups([])
        os.setresgid(sandbox_uid, sandbox_uid, sandbox_uid)
        os.setresuid(sandbox_uid, sandbox_uid, sandbox_uid)
    elif in_user_namespace:
        linux.drop_capabilities()
    linux.prctl(linux.PR_SET_NO_NEW_PRIVS, 1)
