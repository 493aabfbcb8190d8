"""The vLLM server backend (``actor_rollout_ref.rollout.mode=server``): an engine started separately, e.g.

    VLLM_SERVER_DEV_MODE=1 python -m vllm.entrypoints.openai.api_server --model MODEL_DIR \\
        --logprobs-mode processed_logprobs --enforce-eager [--dtype float32]

Token ids go to its OpenAI-compatible ``/v1/completions`` (one request per sequence, sent concurrently: the server
batches them continuously) and sampled token ids with their log-probabilities come back (``return_token_ids``). New
policy weights reach it through a directory both sides can read: the trainer writes them as safetensors and asks
the server to reload them in place (``/collective_rpc`` ``reload_weights``, a development endpoint, hence
``VLLM_SERVER_DEV_MODE=1``), then drops its prefix cache. TRL's NCCL weight transfer is CUDA only, so this path
works on CPUs too; it needs the trainer and the server to share a filesystem (one node, or a shared mount).
"""

from __future__ import annotations

import itertools
import shutil
from collections.abc import Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentfly_train.generation.base import (
    BackendError,
    Generation,
    GenerationBackend,
    Policy,
    SamplingParams,
)

if TYPE_CHECKING:
    from agentfly_train.config.schema import TrainConfig

START_HINT = (
    "start one with: VLLM_SERVER_DEV_MODE=1 python -m vllm.entrypoints.openai.api_server --model MODEL_DIR "
    "--logprobs-mode processed_logprobs --enforce-eager"
)


class RolloutServerError(BackendError):
    """The vLLM server did not answer, or answered with an error (the message names it and says what to do)."""


class VLLMServerBackend(GenerationBackend):
    """Sampling on a vLLM server over HTTP (``rollout.name=vllm``, ``mode=server``).

    Args:
        base_url: ``http://host:port``.
        model: The served model's name (``/v1/models``).
        eos_token_ids: Tokens that end a turn.
        weights_dir: Where the trainer writes the policy's weights for the server to load.
        timeout: Seconds to wait for one request.
        max_concurrency: Requests in flight at once.
    """

    streams = True
    has_own_weights = True
    shared_by_processes = True

    @classmethod
    def check(cls, config: TrainConfig) -> None:
        """``actor_rollout_ref.rollout.server_timeout``."""
        from agentfly_train.config.errors import check_positive

        check_positive("actor_rollout_ref.rollout.server_timeout", config.actor_rollout_ref.rollout.server_timeout)

    @classmethod
    def preflight(cls, config: TrainConfig) -> None:
        """That the server answers at ``rollout.server_host:server_port`` with its development endpoints."""
        cls._configured(config, [], ".", timeout=10).close()

    @classmethod
    def build(cls, config: TrainConfig, policy: Policy) -> VLLMServerBackend:
        """The server at ``rollout.server_host:server_port``, loading weights from ``<run dir>/server_weights``.

        Raises:
            ConfigError: no usable server answers.
        """
        weights = Path(config.trainer.default_local_dir) / "server_weights"
        return cls._configured(config, policy.eos_token_ids, weights, config.actor_rollout_ref.rollout.server_timeout)

    @classmethod
    def _configured(
        cls, config: TrainConfig, eos_token_ids: Sequence[int], weights_dir: str | Path, timeout: float
    ) -> VLLMServerBackend:
        """:meth:`connect` to the configured server; ``ConfigError`` naming ``rollout.mode=server`` if it fails."""
        from agentfly_train.config.errors import ConfigError

        rollout = config.actor_rollout_ref.rollout
        try:
            return cls.connect(rollout.server_host, rollout.server_port, eos_token_ids, weights_dir, timeout)
        except RolloutServerError as error:
            raise ConfigError(f"actor_rollout_ref.rollout.mode=server: {error}") from None

    def __init__(
        self,
        base_url: str,
        model: str,
        eos_token_ids: Sequence[int],
        weights_dir: str | Path,
        timeout: float = 240.0,
        max_concurrency: int = 256,
    ) -> None:
        import requests

        self.base_url = base_url
        self.model = model
        self.eos_token_ids = list(eos_token_ids)
        self.weights_dir = Path(weights_dir)
        self.timeout = timeout
        self.session = requests.Session()
        adapter = requests.adapters.HTTPAdapter(pool_connections=1, pool_maxsize=max_concurrency)
        self.session.mount("http://", adapter)
        self.pool = ThreadPoolExecutor(max_workers=max_concurrency, thread_name_prefix="vllm-server")
        self.pending: dict[Future[Generation], str] = {}
        self._ids = itertools.count()

    @classmethod
    def connect(
        cls, host: str, port: int, eos_token_ids: Sequence[int], weights_dir: str | Path, timeout: float = 240.0
    ) -> VLLMServerBackend:
        """Checks that a vLLM server answers at ``host:port`` with its development endpoints, and connects.

        Raises:
            RolloutServerError: nothing answers, or the server lacks ``VLLM_SERVER_DEV_MODE=1`` (one line each).
        """
        backend = cls(f"http://{host}:{port}", "", eos_token_ids, weights_dir, timeout)
        models = backend._request("GET", "/v1/models", timeout=10)["data"]
        backend.model = models[0]["id"]
        if backend.session.post(f"{backend.base_url}/reset_prefix_cache", timeout=10).status_code == 404:
            raise RolloutServerError(
                f"the vLLM server at {backend.base_url} has no development endpoints, which the weight sync needs: "
                "restart it with VLLM_SERVER_DEV_MODE=1"
            )
        return backend

    def generate(
        self, prompts: Sequence[Sequence[int]], max_new_tokens: Sequence[int], params: SamplingParams
    ) -> list[Generation]:
        """See :meth:`~agentfly_train.generation.base.GenerationBackend.generate`."""
        futures = [
            self.pool.submit(self._complete, prompt, budget, params)
            for prompt, budget in zip(prompts, max_new_tokens, strict=True)
        ]
        return [future.result() for future in futures]

    def submit(self, request_id: str, prompt_ids: Sequence[int], max_new_tokens: int, params: SamplingParams) -> None:
        """Sends one request; the server batches it with every other request in flight."""
        self.pending[self.pool.submit(self._complete, prompt_ids, max_new_tokens, params)] = request_id

    def step(self) -> list[tuple[str, Generation]]:
        """Waits for at least one request in flight to finish; returns those that have."""
        done, _ = wait(list(self.pending), return_when=FIRST_COMPLETED)
        return [(self.pending.pop(future), future.result()) for future in done]

    def has_unfinished(self) -> bool:
        """Whether a request is in flight."""
        return bool(self.pending)

    def load_weights(self, named_tensors: Iterable[tuple[str, Any]]) -> None:
        """Writes the weights (Hugging Face names, every weight of the model) to ``weights_dir`` and has the
        server reload them in place, then drop its prefix cache."""
        from safetensors.torch import save_file

        tensors, seen = {}, set()
        for name, tensor in named_tensors:
            tensor = tensor.detach().to("cpu")
            # A tied weight (lm_head = embed_tokens) is written under both names: safetensors refuses shared
            # storage, and vLLM's in-place reload from disk leaves a tied head it is not given at its old values.
            tensors[name] = tensor.clone() if tensor.data_ptr() in seen else tensor.contiguous()
            seen.add(tensor.data_ptr())
        staging = self.weights_dir.with_name(self.weights_dir.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        save_file(tensors, str(staging / "model.safetensors"))
        shutil.rmtree(self.weights_dir, ignore_errors=True)
        staging.rename(self.weights_dir)
        self._request(
            "POST",
            "/collective_rpc",
            json={"method": "reload_weights", "kwargs": {"weights_path": str(self.weights_dir.resolve())}},
        )
        self._request("POST", "/reset_prefix_cache")

    def close(self) -> None:
        """Stops the request threads."""
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.session.close()

    def _complete(self, prompt_ids: Sequence[int], max_new_tokens: int, params: SamplingParams) -> Generation:
        body = {
            "model": self.model,
            "prompt": [list(prompt_ids)],
            "max_tokens": max_new_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "top_k": params.top_k if params.top_k > 0 else -1,
            "logprobs": 0,
            "return_token_ids": True,
            "stop_token_ids": self.eos_token_ids,
            "skip_special_tokens": False,
        }
        choice = self._request("POST", "/v1/completions", json=body)["choices"][0]
        ids = list(choice["token_ids"])
        logprobs = [float(value) for value in choice["logprobs"]["token_logprobs"]]
        return Generation(token_ids=ids, logprobs=logprobs, stopped=bool(ids) and ids[-1] in self.eos_token_ids)

    def _request(self, method: str, path: str, timeout: float | None = None, **kwargs: Any) -> Any:
        import requests

        url = f"{self.base_url}{path}"
        try:
            response = self.session.request(method, url, timeout=timeout or self.timeout, **kwargs)
        except requests.RequestException as error:
            raise RolloutServerError(
                f"the vLLM server at {self.base_url} does not answer ({type(error).__name__} on {path}); {START_HINT}"
            ) from None
        if response.status_code != 200:
            raise RolloutServerError(
                f"the vLLM server at {self.base_url} answered {path} with HTTP {response.status_code}: "
                f"{response.text[:300]}"
            )
        return response.json() if response.content else None
