"""``SandboxLimits``: the resource limits of sandboxed code (standard library only; the worker reads it too)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SandboxLimits:
    """Limits on code run in the sandbox. The defaults suit model-written snippets.

    Example:
        >>> SandboxLimits(timeout_s=2.0).memory_bytes
        1073741824
    """

    # --- per call ---
    timeout_s: float = 10.0
    """Wall-clock time one call may run, in seconds; then it is interrupted (state kept) or, if it does
    not stop, its interpreter is killed and replaced (state lost)."""
    cpu_s: int = 10
    """CPU time one call may use, in seconds: then the code gets an exception (``RLIMIT_CPU``), and the pool kills
    its interpreter (state lost) if it is still running 1 s of CPU time later, whatever the code did to its limit."""
    output_bytes: int = 65_536
    """Longest output (stdout and stderr together) returned, in bytes; longer output is cut in the middle."""
    # --- per process of the sandbox ---
    memory_bytes: int = 1 << 30
    """Address space of each process, in bytes (``RLIMIT_AS``); memory files (``memfd_create``) and System V
    shared memory, which would hold memory outside it, are refused."""
    processes: int = 16
    """Processes and threads the sandbox's user may have at once (``RLIMIT_NPROC``): no fork bombs."""
    file_bytes: int = 16 << 20
    """Largest file the code may write, in bytes, its stdout/stderr included (``RLIMIT_FSIZE``); a write past it
    fails, so a flood of output stops there."""
    open_files: int = 256
    """Open file descriptors per process (``RLIMIT_NOFILE``)."""
    # --- per session (one episode) ---
    disk_bytes: int = 64 << 20
    """Size of the in-memory file system that holds the work directory, ``/tmp`` and ``/dev/shm`` together,
    in bytes (only with namespace isolation)."""

    def __post_init__(self) -> None:
        for name in ("timeout_s", "cpu_s", "output_bytes", "memory_bytes", "processes", "file_bytes", "open_files"):
            if getattr(self, name) <= 0:
                raise ValueError(f"SandboxLimits.{name} must be > 0, got {getattr(self, name)!r}")
        if self.output_bytes < 64:
            raise ValueError(f"SandboxLimits.output_bytes must be >= 64 to show anything, got {self.output_bytes}")
        if self.disk_bytes < 1 << 20:
            raise ValueError(f"SandboxLimits.disk_bytes must be >= 1 MiB, got {self.disk_bytes}")
