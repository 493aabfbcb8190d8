"""The Hugging Face backend on transformers' continuous batching (``rollout.name=hf``,
``rollout.hf_engine=continuous``).

Each request (an episode's next turn) goes to a ``ContinuousBatchingManager`` (``model.init_continuous_batching``)
as soon as it is submitted and comes back as soon as it finishes: no padding, a paged KV cache, and a slow episode
holds back only itself. The manager samples from the policy model itself, in its own thread, only while
:meth:`HFContinuousBackend.step` runs (it is paused in between, so an optimiser step never meets a forward pass);
when the policy's weights have changed since the last step (an update under an off-policy schedule with turns in
flight), the turns in flight are sampled again from their start with the new weights, so no KV cache or token
outlives the weights that made it.

Log-probabilities are the manager's: ``log_softmax`` of the processed logits, i.e. ``log_softmax(logits /
temperature)`` (greedy: ``temperature=1``) of the sampled token, the padded backend's and TRL's quantity when
top-k/top-p are off; with them on, under the truncated distribution (as vLLM's).

Where continuous batching cannot run (a device other than CPU or CUDA, an attention implementation it would have to
switch the policy away from, a vision-language policy) :meth:`HFContinuousBackend.build` returns the padded
backend (:class:`~agentfly_train.generation.hf.HFGenerationBackend`) and says so in one line.
"""

from __future__ import annotations

import contextlib
import itertools
import queue
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from agentfly_train.errors import error_summary
from agentfly_train.generation.base import BackendError, Generation, Policy, SamplingParams
from agentfly_train.generation.hf import HFGenerationBackend

if TYPE_CHECKING:
    from agentfly_train.config.schema import TrainConfig

SUPPORTED_DEVICES = ("cpu", "cuda")
"""Devices transformers' continuous batching runs on."""
SUPPORTED_ATTENTION = ("sdpa", "flash_attention_2", "flash_attention_3", "paged|eager")
"""Attention implementations the manager runs without switching the policy to another (which training would see)."""
FALLBACK = "actor_rollout_ref.rollout.hf_engine=continuous falls back to padded:"
"""How the note of a run whose policy cannot sample on continuous batching begins."""
RESULT_WAIT_S = 0.05
"""How long one :meth:`HFContinuousBackend.step` waits for a request to finish before returning none."""


@dataclass(frozen=True)
class CacheSize:
    """The paged KV cache of one manager, sized at its first request. Too small a cache only makes requests wait
    for room (fewer run at once); one request longer than the whole cache fails.

    Attributes:
        requests: Requests it holds at once (the episodes in flight).
        response_length: An episode's completion budget, sampled and observation tokens, tokens.
        page_size: Tokens per page.
        max_batch_tokens: Tokens of one forward pass (prefill chunks and decoding tokens together).
    """

    requests: int
    response_length: int
    page_size: int = 64
    max_batch_tokens: int = 2048

    @classmethod
    def for_device(cls, requests: int, response_length: int, device: torch.device) -> CacheSize:
        """Pages of 64 tokens and 2048-token forward passes on CPU (an SDPA mask grows with the square of the
        batch's tokens); 256-token pages (flash attention's paged kernels) and the manager's default batch on CUDA."""
        if device.type == "cpu":
            return cls(requests, response_length)
        return cls(requests, response_length, page_size=256, max_batch_tokens=8192)

    def num_blocks(self, prompt_tokens: int) -> int:
        """Blocks for every request at ``2 * prompt_tokens + response_length`` tokens (the first request's prompt,
        with room for longer ones), one spare page each."""
        return self.requests * (-(-(2 * prompt_tokens + self.response_length) // self.page_size) + 1)


def unsupported(model: Any, device: torch.device) -> str | None:
    """Why continuous batching cannot run on ``model`` at ``device`` (``None``: it can)."""
    if device.type not in SUPPORTED_DEVICES:
        return f"the policy is on {device.type}, and transformers' continuous batching runs on CPU or CUDA"
    attention = getattr(model.config, "_attn_implementation", None)
    if attention not in SUPPORTED_ATTENTION:
        return (
            f"the policy's attention implementation is {attention}; continuous batching needs one of "
            f"{', '.join(SUPPORTED_ATTENTION)} (load the model with attn_implementation='sdpa')"
        )
    return None


def _weights_version(model: Any) -> int:
    """A number that changes whenever a parameter is modified in place (an optimiser step, a state-dict load):
    the sum of the parameters' autograd version counters."""
    return sum(parameter._version for parameter in model.parameters())


@dataclass
class _Request:
    prompt_ids: list[int]
    max_new_tokens: int
    params: SamplingParams
    engine_id: str


class HFContinuousBackend(HFGenerationBackend):
    """Streamed sampling on transformers' continuous batching, from the policy model itself (see the module's
    docstring).

    Args:
        model_context: As :class:`~agentfly_train.generation.hf.HFGenerationBackend`'s; entered around each
            :meth:`step`.
        pad_token_id: Padding token (the padded path of :meth:`generate` with images).
        eos_token_ids: Tokens that end a turn.
        device: Where the policy is.
        cache: The paged KV cache of each manager (one per sampling setting).
    """

    streams = True
    supports_images = True  # through the padded backend, which build() returns for a vision-language policy

    def __init__(
        self,
        model_context: Callable[[], contextlib.AbstractContextManager[Any]],
        pad_token_id: int,
        eos_token_ids: Sequence[int],
        device: torch.device | str,
        cache: CacheSize,
    ) -> None:
        super().__init__(model_context, pad_token_id, eos_token_ids, device)
        self.cache = cache
        self._managers: dict[SamplingParams, Any] = {}
        self._requests: dict[str, _Request] = {}
        self._engine_ids: dict[str, str] = {}  # the manager's request id -> ours
        self._restarts = itertools.count()
        self._weights_version: int | None = None

    @classmethod
    def build(cls, config: TrainConfig, policy: Policy) -> HFGenerationBackend:
        """The backend of a run, its cache sized for the episodes a rollout step holds in flight (an off-policy
        schedule's too, or a validation batch) at ``rollout.response_length`` tokens past the prompt; the padded
        backend, with a one-line note on stderr, where continuous batching cannot run (:func:`unsupported`, or a
        vision-language policy)."""
        reason = unsupported(policy.model, torch.device(policy.device))
        if reason is None and policy.images is not None:
            reason = "a vision-language policy's prompts hold images, which the manager does not take"
        if reason is not None:
            print(
                f"note: actor_rollout_ref.rollout.hf_engine=continuous falls back to padded: {reason}", file=sys.stderr
            )
            return HFGenerationBackend.from_policy(policy)
        episodes = config.data.train_batch_size * config.agent.num_chains
        if config.async_training.enable:
            episodes = int(episodes * (2 + config.async_training.staleness_threshold))
        requests = max(episodes, config.data.val_batch_size)
        response_length = config.actor_rollout_ref.rollout.response_length
        cache = CacheSize.for_device(requests, response_length, torch.device(policy.device))
        return cls.from_policy(policy, cache)

    @classmethod
    def from_policy(cls, policy: Policy, cache: CacheSize) -> HFContinuousBackend:  # type: ignore[override]
        """A backend sampling from ``policy.sampling_model`` (a text policy)."""
        return cls(policy.sampling_model, policy.tokenizer.pad_token_id, policy.eos_token_ids, policy.device, cache)

    @classmethod
    def for_model(  # type: ignore[override]
        cls, model: Any, pad_token_id: int, eos_token_ids: Sequence[int], cache: CacheSize
    ) -> HFContinuousBackend:
        """A backend over a plain (unwrapped) model."""
        return cls(lambda: contextlib.nullcontext(model), pad_token_id, eos_token_ids, model.device, cache)

    # --- the streaming interface -----------------------------------------------------------------------------------

    def submit(self, request_id: str, prompt_ids: Sequence[int], max_new_tokens: int, params: SamplingParams) -> None:
        """Queues one request in the manager of its sampling setting; it runs during the next :meth:`step`."""
        request = _Request(list(prompt_ids), max_new_tokens, params, request_id)
        self._requests[request_id] = request
        self._add(request_id, request)

    def step(self) -> list[tuple[str, Generation]]:
        """Lets the managers run until a request finishes (or :data:`RESULT_WAIT_S` passes); the requests that
        finished. Turns in flight across a change of the policy's weights are restarted first."""
        with self._eval_model() as model:
            version = _weights_version(model)
            if self._weights_version is not None and version != self._weights_version:
                self._restart_in_flight()
            self._weights_version = version
            for manager in self._managers.values():
                if manager.background_thread_status.fatal_error is not None:
                    error = manager.background_thread_status.fatal_error
                    raise BackendError(f"transformers' continuous batching stopped: {error_summary(error)}")
            running = [manager for manager in self._managers.values() if manager.is_running()]
            with contextlib.ExitStack() as paused:
                for manager in running:  # stays paused while the trainer owns the model
                    paused.callback(manager.background_thread_status.acquire_pause, manager._wake_up_loop)
                    manager.background_thread_status.release_pause()
                return self._collect()

    def has_unfinished(self) -> bool:
        """Whether a submitted request has not finished."""
        return bool(self._requests)

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: Sequence[int],
        params: SamplingParams,
        images: Sequence[Sequence[Any]] | None = None,
    ) -> list[Generation]:
        """See :meth:`~agentfly_train.generation.base.GenerationBackend.generate`: the prompts are submitted
        together and stepped until all have finished."""
        if images and any(images):
            raise ValueError("prompts hold images: a vision-language policy samples on the padded backend")
        ids = [f"batch-{next(self._restarts)}-{row}" for row in range(len(prompts))]
        for request_id, prompt, budget in zip(ids, prompts, max_new_tokens, strict=True):
            self.submit(request_id, prompt, budget, params)
        done: dict[str, Generation] = {}
        while len(done) < len(ids):
            done.update(self.step())
        return [done[request_id] for request_id in ids]

    def close(self) -> None:
        """Stops the managers' threads."""
        for manager in self._managers.values():
            if manager.is_running():
                manager.background_thread_status.release_pause()
                manager.stop(block=True)
        self._managers.clear()

    # --- the managers --------------------------------------------------------------------------------------------

    def _add(self, request_id: str, request: _Request) -> None:
        self._engine_ids[request.engine_id] = request_id
        manager = self._manager(request.params, len(request.prompt_ids))
        manager.add_request(
            request.prompt_ids,
            request_id=request.engine_id,
            max_new_tokens=request.max_new_tokens,
            eos_token_id=self.eos_token_ids,
        )

    def _manager(self, params: SamplingParams, prompt_tokens: int) -> Any:
        """The manager of a sampling setting, started (and paused) at its first request, whose prompt has
        ``prompt_tokens`` tokens (:meth:`CacheSize.num_blocks`)."""
        if params not in self._managers:
            from transformers import GenerationConfig
            from transformers.generation import ContinuousBatchingConfig

            greedy = params.temperature == 0
            sampling: dict[str, Any] = {"do_sample": not greedy}
            if not greedy:
                sampling["temperature"] = params.temperature
                sampling.update({"top_p": params.top_p} if params.top_p < 1 else {})
                sampling.update({"top_k": params.top_k} if params.top_k > 0 else {})
            generation = GenerationConfig(eos_token_id=self.eos_token_ids, pad_token_id=self.pad_token_id, **sampling)
            settings = ContinuousBatchingConfig(
                return_logprobs=True,
                allow_block_sharing=False,  # a shared block would outlive the weights that computed it
                auto_switch_to_flash=False,  # the trained policy keeps its attention implementation
                page_size=self.cache.page_size,
                num_blocks=self.cache.num_blocks(prompt_tokens),
                max_batch_tokens=self.cache.max_batch_tokens,
            )
            with self.model_context() as model:
                manager = model.init_continuous_batching(generation, settings)
            # The manager's own start() makes a non-daemon thread, which would keep a process that never closed the
            # backend from exiting; this is start() with a daemon thread.
            manager.background_thread_status.clear()
            manager._generation_thread = threading.Thread(
                target=manager._run_generation_loop, name="agentfly-continuous-batching", daemon=True
            )
            manager._generation_thread.start()
            manager.background_thread_status.acquire_pause(manager._wake_up_loop)
            self._managers[params] = manager
        return self._managers[params]

    def _collect(self) -> list[tuple[str, Generation]]:
        """Waits up to :data:`RESULT_WAIT_S` for a finished request, then takes every one already finished."""
        finished: list[tuple[str, Generation]] = []
        block = True
        while self._requests and (block or not finished):
            output = self._next_output(block)
            if output is None:
                break
            block = False
            request_id = self._engine_ids.pop(output.request_id, None)
            if request_id is None:  # a restarted request's first run
                continue
            if output.error is not None:
                raise BackendError(f"transformers' continuous batching failed a request: {output.error}")
            del self._requests[request_id]
            finished.append((request_id, self._generation(output)))
        return finished

    def _next_output(self, block: bool) -> Any:
        """A finished request's output from any manager; with ``block``, waiting up to :data:`RESULT_WAIT_S` on the
        manager of a request in flight."""
        for manager in self._managers.values():
            try:
                return manager.output_router.output_queue.get_nowait()
            except queue.Empty:
                continue
        if not block:
            return None
        waiting_on = self._managers[next(iter(self._requests.values())).params]
        return waiting_on.get_result(timeout=RESULT_WAIT_S)

    def _restart_in_flight(self) -> None:
        """Cancels every request in flight and submits it again under a new id (its earlier tokens are dropped)."""
        for request_id, request in self._requests.items():
            self._engine_ids.pop(request.engine_id, None)
            self._managers[request.params].cancel_request(request.engine_id)
            request.engine_id = f"{request_id}#restart-{next(self._restarts)}"
            self._add(request_id, request)

    def _generation(self, output: Any) -> Generation:
        ids = list(output.generated_tokens)
        return Generation(
            token_ids=ids,
            logprobs=[float(logprob) for logprob in output.logprobs],
            stopped=bool(ids) and ids[-1] in self.eos_token_ids,
        )

    @contextlib.contextmanager
    def _eval_model(self) -> Iterator[Any]:
        with super()._eval_model() as model, torch.no_grad():
            yield model
