"""Soak: 10,000 python-tool steps over 256 live notebook sessions, with descriptors and memory bounded.

About 15 s on the project's 2-core machine (256 session starts, then ~0.8 ms a step), so CI runs the
full count.
"""

from __future__ import annotations

import os

import pytest

from agentfly_envs.sandbox import SandboxLimits, SandboxPool
from agentfly_envs.tools.python_executor import PythonExecutor

SESSIONS, STEPS = 256, 10_000


def _kib(path: str, field: str) -> int:
    with open(path) as file:
        return next(int(line.split()[1]) for line in file if line.startswith(field))


def _output_bytes_held() -> int:
    """Bytes held in this process by sandbox output files (memory files)."""
    total = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if "agentfly-sandbox-output" in os.readlink(f"/proc/self/fd/{fd}"):
                total += os.fstat(int(fd)).st_size
        except OSError:  # the listing's own descriptor, or one closed meanwhile
            continue
    return total


@pytest.mark.slow
def test_soak_many_live_sessions_stay_bounded():
    with SandboxPool(SandboxLimits(timeout_s=10), workers=2, max_sessions=SESSIONS) as pool:
        pool.run("pass")
        base_fds, base_rss = len(os.listdir("/proc/self/fd")), _kib("/proc/self/status", "VmRSS:")
        tools = [PythonExecutor(pool=pool) for _ in range(SESSIONS)]
        for tool in tools:
            tool.begin_episode({})
            assert tool.run_in_notebook("steps = 0") == "(no output)"
        warm_pss = sum(_kib(f"/proc/{tool._session._process.pid}/smaps_rollup", "Pss:") for tool in tools)
        for step in range(STEPS):
            output = tools[step % SESSIONS].run_in_notebook("steps += 1\nprint('y' * 1000)\nsteps")
            assert output == "y" * 1000 + f"\n{step // SESSIONS + 1}\n", output  # state kept, never restarted
        live_fds = len(os.listdir("/proc/self/fd"))
        pss = sum(_kib(f"/proc/{tool._session._process.pid}/smaps_rollup", "Pss:") for tool in tools)
        assert live_fds - base_fds <= 3 * SESSIONS, (base_fds, live_fds)  # a socket, a memory file, a pidfd
        assert _output_bytes_held() == 0  # output is dropped once read
        assert _kib("/proc/self/status", "VmRSS:") - base_rss < 64 << 10  # KiB: this process grew < 64 MiB
        assert pss < SESSIONS * (16 << 10) and pss < 1.25 * warm_pss, (warm_pss, pss)  # KiB, no growth
        for tool in tools:
            tool.end_episode()
        assert len(os.listdir("/proc/self/fd")) <= base_fds
