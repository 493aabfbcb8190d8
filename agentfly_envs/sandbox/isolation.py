"""How a sandbox session is walled off: namespaces, mounts, resource limits, privileges.

Runs inside the sandbox's worker processes (standard library only). With namespace isolation the
guard process calls :func:`enter_namespaces` and the session process, pid 1 of the new namespaces
and still privileged there, calls :func:`build_root`; every session then applies
:func:`apply_limits` and :func:`drop_privileges` before it runs any code.

When the pool runs as root, each session runs as its own unprivileged uid (:func:`session_uid`), so
``RLIMIT_NPROC`` counts that session's processes only; as another user, the session's processes are
counted in their own user namespace.
"""

from __future__ import annotations

import os
import resource
import sys

from agentfly_envs.sandbox import linux
from agentfly_envs.sandbox.limits import SandboxLimits

SANDBOX_UID_BASE = 1_500_000_000
"""Sessions of a pool running as root get uid/gid ``SANDBOX_UID_BASE + pid of their guard`` (no passwd entry
needed): unique among live sessions of every pool on the machine, so that killing what is left of one
session never touches another's processes."""

_NAMESPACES = linux.CLONE_NEWNS | linux.CLONE_NEWPID | linux.CLONE_NEWNET | linux.CLONE_NEWIPC | linux.CLONE_NEWUTS


def session_uid(guard_pid: int) -> int:
    """The uid (and gid) of the session whose guard is ``guard_pid``, for a pool run as root (pids stay
    below 2**22, so the uid stays below 2**32 - 1)."""
    return SANDBOX_UID_BASE + guard_pid


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


WORKDIR = "/home/sandbox"
"""The session's working directory inside its own root (with namespace isolation)."""
SYSTEM_LIBRARIES = ("/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib", "/etc/ld.so.cache")
"""Shared libraries the interpreter and its extension modules load (bound read-only where they exist)."""
DEVICES = ("null", "zero", "full", "random", "urandom")
"""Devices under ``/dev`` in the session's root."""
REFUSED_SYSCALLS = (
    "memfd_create",
    "memfd_secret",
    "shmget",
    "semget",
    "msgget",
    "unshare",
    "add_key",
    "request_key",
    "keyctl",
)
"""System calls refused in a session: those that would hold kernel memory outside its limits, kept until the
episode ends or beyond (memory files; System V shared memory, semaphores and message queues; a file system of its
own in a new namespace: ``clone`` into new namespaces is refused too), and the kernel keyrings (``add_key``,
``request_key``, ``keyctl``), which are shared with the host's session keyring (a secret there could be read or
overwritten) and whose keys outlive the session until reboot."""


def build_root(mountpoint: str, disk_bytes: int, sandbox_uid: int | None) -> None:
    """Moves the calling process (pid 1 of new namespaces, still privileged) into a root of its own.

    The root holds the interpreter's directories and system libraries (read-only bind mounts), a few
    devices, a private ``/proc``, a synthetic ``/etc/passwd`` and three writable directories on one
    in-memory file system of ``disk_bytes`` in all: :data:`WORKDIR`, ``/tmp`` and ``/dev/shm``.
    Nothing else of the host shows: no project, data or home directories, no host sockets.

    Args:
        mountpoint: An empty host directory to build the root on (mounts stay in this mount namespace).
        disk_bytes: Size of the writable file system, in bytes.
        sandbox_uid: The session's uid and gid (pool run as root), or ``None`` (it is root of its own
            user namespace).
    """
    uid = 0 if sandbox_uid is None else sandbox_uid
    linux.mount(None, "/", None, linux.MS_REC | linux.MS_PRIVATE)
    linux.mount("tmpfs", mountpoint, "tmpfs", linux.MS_NOSUID | linux.MS_NODEV, "size=1m,nr_inodes=4096,mode=0755")
    root = mountpoint.rstrip("/")
    scratch = f"{root}/.scratch"
    os.mkdir(scratch)
    linux.mount("tmpfs", scratch, "tmpfs", linux.MS_NOSUID | linux.MS_NODEV, f"size={disk_bytes},nr_inodes=16384")
    for name, target, mode in (("work", WORKDIR, 0o700), ("tmp", "/tmp", 0o1777), ("shm", "/dev/shm", 0o1777)):
        os.mkdir(f"{scratch}/{name}", mode)
        os.chmod(f"{scratch}/{name}", mode)  # past the umask
        os.chown(f"{scratch}/{name}", uid, uid)
        _bind(f"{scratch}/{name}", root + target, file=False)
    for path in _runtime_paths():  # after /tmp: an interpreter under /tmp stays visible
        _bind(path, root + path, file=os.path.isfile(path))
    for top in ("/bin", "/lib", "/lib64", "/sbin"):  # merged /usr: keep the loader's /lib64 -> usr/lib64 paths
        if os.path.islink(top) and not os.path.lexists(root + top):
            os.symlink(os.readlink(top), root + top)
    for device in DEVICES:
        _bind(f"/dev/{device}", f"{root}/dev/{device}", file=True)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "fd/0"), ("stdout", "fd/1"), ("stderr", "fd/2")):
        os.symlink(target, f"{root}/dev/{name}")
    os.makedirs(f"{root}/etc", exist_ok=True)
    _write(f"{root}/etc/passwd", f"root:x:0:0:root:/root:/bin/false\nsandbox:x:{uid}:{uid}::{WORKDIR}:/bin/false\n")
    _write(f"{root}/etc/group", f"root:x:0:\nsandbox:x:{uid}:\n")
    _write(f"{root}/etc/hosts", "127.0.0.1 localhost\n")
    os.makedirs(f"{root}/proc")
    linux.mount("proc", f"{root}/proc", "proc", linux.MS_NOSUID | linux.MS_NODEV | linux.MS_NOEXEC)
    linux.umount2(scratch, linux.MNT_DETACH)  # its directories stay mounted where they were bound
    os.rmdir(scratch)
    os.chdir(root)
    linux.pivot_root(".", ".")  # the old root ends up stacked on the new one: detach it
    linux.umount2(".", linux.MNT_DETACH)
    os.chdir("/")
    linux.set_read_only("/", True, recursive=True)
    for writable in (WORKDIR, "/tmp", "/dev/shm", *(f"/dev/{device}" for device in DEVICES)):
        linux.set_read_only(writable, False, recursive=False)


def _runtime_paths() -> list[str]:
    """The directories the interpreter lives in (its prefixes, which hold the standard library and
    site-packages) and the system's shared libraries, outermost first; none inside another."""
    prefixes = (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)
    paths = {os.path.realpath(path) for path in (*prefixes, *SYSTEM_LIBRARIES) if os.path.exists(path)}
    if "/" in paths:
        raise OSError(f"the interpreter's prefix is /; the sandbox cannot show it without the whole host: {prefixes}")
    outermost: list[str] = []
    for path in sorted(paths):  # a parent sorts before its children
        if not any(path.startswith(kept + os.sep) for kept in outermost):
            outermost.append(path)
    return outermost


def _bind(source: str, target: str, file: bool) -> None:
    """Bind-mounts ``source`` (and every mount below it) at ``target``, creating the mount point."""
    os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
    if file:
        open(target, "a").close()
    else:
        os.makedirs(target, mode=0o755, exist_ok=True)
    linux.mount(source, target, None, linux.MS_BIND | linux.MS_REC)


def _write(path: str, text: str) -> None:
    with open(path, "w") as file:
        file.write(text)


def apply_limits(limits: SandboxLimits) -> None:
    """Sets the per-process resource limits, hard (soft = hard: the code cannot raise them). CPU time is set
    for each call (see :mod:`.interpreter`; the pool sets its hard limit where it may)."""
    for kind, value in (
        (resource.RLIMIT_AS, limits.memory_bytes),
        (resource.RLIMIT_NPROC, limits.processes),
        (resource.RLIMIT_FSIZE, limits.file_bytes),
        (resource.RLIMIT_NOFILE, limits.open_files),
        (resource.RLIMIT_CORE, 0),
    ):
        _, hard = resource.getrlimit(kind)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)  # only lower: a hard limit is final
        resource.setrlimit(kind, (value, value))


def drop_privileges(sandbox_uid: int | None, in_user_namespace: bool) -> None:
    """Makes the session unprivileged for good: its own uid (pool run as root), or no capabilities left in
    its user namespace; no privilege gain through set-uid programs (``PR_SET_NO_NEW_PRIVS``); and the
    :data:`REFUSED_SYSCALLS` and ``clone`` into new namespaces fail with ``EPERM``."""
    if sandbox_uid is not None:
        os.setgroups([])
        os.setresgid(sandbox_uid, sandbox_uid, sandbox_uid)
        os.setresuid(sandbox_uid, sandbox_uid, sandbox_uid)
    elif in_user_namespace:
        linux.drop_capabilities()
    linux.prctl(linux.PR_SET_NO_NEW_PRIVS, 1)
    linux.refuse_syscalls(REFUSED_SYSCALLS, namespaces=True)
