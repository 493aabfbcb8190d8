"""Thin ``ctypes`` wrappers of the Linux calls the sandbox needs and Python 3.11 lacks.

``unshare``, ``mount``, ``umount2``, ``pivot_root``, ``mount_setattr``, ``prctl``, ``capset`` and a
seccomp filter that refuses a few system calls; each raises ``OSError`` with the call's name on
failure. Only the sandbox's worker processes call them; standard library only.
"""

from __future__ import annotations

import ctypes
import errno as errnos
import os
import platform
import struct
from functools import cache

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
MNT_DETACH = 0x2

MOUNT_ATTR_RDONLY = 0x1
AT_FDCWD = -100
AT_RECURSIVE = 0x8000
_SYS_MOUNT_SETATTR = 442  # the same number on every architecture (added in Linux 5.12)

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_LINUX_CAPABILITY_VERSION_3 = 0x20080522

# System call numbers of the machines the seccomp filter knows: (audit arch, {name: number}).
_SYSCALLS = {
    "x86_64": (
        0xC000003E,
        {
            "pivot_root": 155,
            "shmget": 29,
            "semget": 64,
            "msgget": 68,
            "add_key": 248,
            "request_key": 249,
            "keyctl": 250,
            "unshare": 272,
            "memfd_create": 319,
            "memfd_secret": 447,
            "clone": 56,
        },
    ),
    "aarch64": (
        0xC00000B7,
        {
            "pivot_root": 41,
            "msgget": 186,
            "semget": 190,
            "shmget": 194,
            "add_key": 217,
            "request_key": 218,
            "keyctl": 219,
            "unshare": 97,
            "memfd_create": 279,
            "memfd_secret": 447,
            "clone": 220,
        },
    ),
}
_CLONE3 = 435  # the same number on every architecture
_NAMESPACE_FLAGS = CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET | 0x02000000
_X32_SYSCALL_BIT = 0x40000000  # x86_64's x32 ABI: the same calls under other numbers


class _MountAttr(ctypes.Structure):
    _fields_ = (
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    )


class _CapHeader(ctypes.Structure):
    _fields_ = (("version", ctypes.c_uint32), ("pid", ctypes.c_int))


class _CapData(ctypes.Structure):
    _fields_ = (("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32))


@cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, call: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{call}: {os.strerror(errno)}")


def _path(path: str | None) -> bytes | None:
    return None if path is None else os.fsencode(path)


def unshare(flags: int) -> None:
    """Moves the calling process into new namespaces (``CLONE_NEW*`` flags)."""
    _check(_libc().unshare(ctypes.c_int(flags)), "unshare")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    """``mount(2)``."""
    result = _libc().mount(
        _path(source), _path(target), _path(fstype), ctypes.c_ulong(flags), None if data is None else data.encode()
    )
    _check(result, f"mount {target}")


def umount2(target: str, flags: int) -> None:
    """``umount2(2)``."""
    _check(_libc().umount2(_path(target), ctypes.c_int(flags)), f"umount {target}")


def pivot_root(new_root: str, put_old: str) -> None:
    """``pivot_root(2)`` (glibc has no wrapper)."""
    number = syscall_number("pivot_root")
    _check(_libc().syscall(ctypes.c_long(number), _path(new_root), _path(put_old)), "pivot_root")


def set_read_only(path: str, read_only: bool, recursive: bool) -> None:
    """Makes the mount at ``path`` (and, if ``recursive``, every mount below it) read-only or writable."""
    attr = _MountAttr(MOUNT_ATTR_RDONLY if read_only else 0, 0 if read_only else MOUNT_ATTR_RDONLY, 0, 0)
    result = _libc().syscall(
        ctypes.c_long(_SYS_MOUNT_SETATTR),
        ctypes.c_int(AT_FDCWD),
        _path(path),
        ctypes.c_uint(AT_RECURSIVE if recursive else 0),
        ctypes.byref(attr),
        ctypes.c_size_t(ctypes.sizeof(attr)),
    )
    _check(result, f"mount_setattr {path}")


def prctl(option: int, value: int) -> None:
    """``prctl(option, value, 0, 0, 0)``."""
    zero = ctypes.c_ulong(0)
    _check(_libc().prctl(ctypes.c_int(option), ctypes.c_ulong(value), zero, zero, zero), f"prctl {option}")


def drop_capabilities() -> None:
    """Empties the bounding, effective, permitted and inheritable capability sets of the calling process."""
    with open("/proc/sys/kernel/cap_last_cap") as file:
        last = int(file.read())
    for capability in range(last + 1):
        prctl(PR_CAPBSET_DROP, capability)
    header, data = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0), (_CapData * 2)()
    _check(_libc().capset(ctypes.byref(header), ctypes.byref(data)), "capset")


def _machine() -> tuple[int, dict[str, int]]:
    machine = platform.machine()
    if machine not in _SYSCALLS:
        raise OSError(errnos.ENOSYS, f"the sandbox knows the system calls of {sorted(_SYSCALLS)}, not of {machine}")
    return _SYSCALLS[machine]


def syscall_number(name: str) -> int:
    """The number of system call ``name`` on this machine (one the seccomp filter knows).

    Raises:
        OSError: the machine is not one whose call numbers are known.
    """
    return _machine()[1][name]


def refuse_syscalls(names: tuple[str, ...], namespaces: bool = False) -> None:
    """Makes the system calls ``names`` fail with ``EPERM`` for this process and its children, for good.

    A classic BPF seccomp filter: calls of another architecture's ABI (32-bit, x32) fail with ``EPERM``
    too, since their numbers differ. Needs ``PR_SET_NO_NEW_PRIVS`` (or ``CAP_SYS_ADMIN``).

    Args:
        names: System calls to refuse (keys of the table of call numbers).
        namespaces: Also refuse ``clone`` with a flag that makes a namespace. ``clone3``, whose flags sit
            in memory a filter cannot read, then fails with ``ENOSYS``, so the C library falls back to
            ``clone`` for threads and processes.

    Raises:
        OSError: the machine is not one whose call numbers are known, or the kernel refused the filter.
    """
    arch, numbers = _machine()
    allow, deny, nosys = 0x7FFF0000, 0x00050000 | errnos.EPERM, 0x00050000 | errnos.ENOSYS  # SECCOMP_RET_*

    def op(code: int, jt: int, jf: int, k: int) -> bytes:
        return struct.pack("=HBBI", code, jt, jf, k)

    load, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06  # BPF_LD|BPF_W|BPF_ABS, BPF_JMP|BPF_K|..., BPF_RET
    refused = [numbers[name] for name in names]
    n = len(refused)
    clone3, clone = (_CLONE3, numbers["clone"]) if namespaces else (_X32_SYSCALL_BIT, _X32_SYSCALL_BIT)
    # Instructions 7 + n on: allow; check clone's flags (8 + n, 9 + n) and allow (10 + n); deny; no such call.
    program = [
        op(load, 0, 0, 4),  # seccomp_data.arch
        op(jeq, 1, 0, arch),
        op(ret, 0, 0, deny),
        op(load, 0, 0, 0),  # seccomp_data.nr
        op(jge, 6 + n, 0, _X32_SYSCALL_BIT),
        op(jeq, 6 + n, 0, clone3),
        op(jeq, 1 + n, 0, clone),
        *(op(jeq, 3 + n - i, 0, number) for i, number in enumerate(refused)),
        op(ret, 0, 0, allow),
        op(load, 0, 0, 16),  # the low half of seccomp_data.args[0]: clone's flags
        op(jset, 1, 0, _NAMESPACE_FLAGS),
        op(ret, 0, 0, allow),
        op(ret, 0, 0, deny),
        op(ret, 0, 0, nosys),
    ]
    code = ctypes.create_string_buffer(b"".join(program))

    class _Program(ctypes.Structure):
        _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))

    fprog = _Program(len(program), ctypes.addressof(code))
    zero = ctypes.c_ulong(0)
    result = _libc().prctl(
        ctypes.c_int(PR_SET_SECCOMP), ctypes.c_ulong(_SECCOMP_MODE_FILTER), ctypes.byref(fprog), zero, zero
    )
    _check(result, "prctl PR_SET_SECCOMP")
