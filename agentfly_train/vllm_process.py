"""A vLLM OpenAI-compatible server (``python -m vllm.entrypoints.openai.api_server``) in a process group of its own, on
a free port of 127.0.0.1: started, waited for until it answers ``/health``, and stopped with its group; it never
outlives the process that started it (``PR_SET_PDEATHSIG``). The run's reference judge is one; the tests' and
benchmarks' servers are others."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

START_TIMEOUT_S = 900.0
"""Seconds a server may take to answer ``/health`` after it was started."""

_LAUNCH = (
    "import ctypes, os, signal, sys\n"
    "ctypes.CDLL(None).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG: ends with the run that started it\n"
    "if os.getppid() != int(sys.argv[1]): sys.exit(1)  # that run ended before this line\n"
    "os.execv(sys.executable, [sys.executable, '-m', *sys.argv[2:]])\n"
)


class ServerStartError(RuntimeError):
    """A server exited before it answered, or did not answer in time: the message says which (``exited (1)``, ``did
    not answer in 900 s``) and quotes the last line of its log."""


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def launch(
    module: str, args: Sequence[str], log: Path, env: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """``python -m module *args`` in a process group of its own, its output to ``log`` and ``env`` added to this
    process's environment, sent SIGTERM when the thread that called this ends (``PR_SET_PDEATHSIG``, kept across the
    ``exec``), so it does not outlive a killed run."""
    command = [sys.executable, "-c", _LAUNCH, str(os.getpid()), module, *args]
    with log.open("wb") as output:
        return subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, **(env or {})})  # fmt: skip


class VLLMServer:
    """A vLLM server's process group.

    Args:
        url: Its OpenAI-compatible base URL, ``http://127.0.0.1:<port>/v1``.
        process: The server's process, on the process that started it (``None`` where only its URL is known).
    """

    def __init__(self, url: str, process: subprocess.Popen[bytes] | None = None) -> None:
        self.url = url
        self.process = process

    @property
    def port(self) -> int:
        """The port it listens on."""
        return int(self.url.rsplit(":", 1)[1].split("/", 1)[0])

    @classmethod
    def start(
        cls,
        model_dir: Path,
        log: Path,
        args: Sequence[str],
        env: Mapping[str, str] | None = None,
        timeout: float = START_TIMEOUT_S,
    ) -> VLLMServer:
        """Starts a server on ``model_dir`` with ``args`` beyond its model, host and port, its output to ``log``, and
        waits until it answers.

        Raises:
            ServerStartError: it exited, or did not answer within ``timeout`` seconds (it is stopped then).
        """
        import requests

        port = free_port()
        options = ["--model", str(model_dir), "--host", "127.0.0.1", "--port", str(port), *args]
        process = launch("vllm.entrypoints.openai.api_server", options, log, env)
        server = cls(f"http://127.0.0.1:{port}/v1", process)
        deadline = time.monotonic() + timeout
        while process.poll() is None and time.monotonic() < deadline:
            try:
                if requests.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    return server
            except requests.RequestException:
                pass
            time.sleep(0.5)
        why = f"exited ({process.returncode})" if process.poll() is not None else f"did not answer in {timeout:g} s"
        server.close()
        raise ServerStartError(f"{why}; its log {log} ends: {last_line(log)}")

    def close(self) -> None:
        """Stops the server's process group (SIGTERM, then SIGKILL after 30 s) and waits for it, on the process that
        started it."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()

    def kill(self) -> None:
        """SIGKILLs the server's process group and waits for it, on the process that started it."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=60)


def last_line(log: Path) -> str:
    """The last line of ``log`` that is not blank, or ``(nothing)``."""
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1].strip() if lines else "(nothing)"
