"""The generation-backend interface: token ids in, sampled token ids and their log-probabilities out.

A backend is chosen once, by name, from :data:`GENERATION_BACKENDS` (``actor_rollout_ref.rollout.name``, with
``rollout.mode=server`` for the vLLM server); everything else asks the chosen backend what it can do
(:attr:`GenerationBackend.streams`, :attr:`~GenerationBackend.has_own_weights`,
:attr:`~GenerationBackend.shared_by_processes`), never its name.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from agentfly_envs.registry import Registry
from agentfly_train.config.errors import ConfigError, check_choice, registered

if TYPE_CHECKING:
    from agentfly_train.config.actor_rollout_ref import RolloutConfig
    from agentfly_train.config.schema import TrainConfig
    from agentfly_train.vision import ImageInputs


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one turn.

    Attributes:
        temperature: Softmax temperature; ``0`` decodes greedily.
        top_p: Nucleus mass (``1.0``: off).
        top_k: Keep the ``top_k`` most likely tokens (``-1`` or ``0``: off).
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1


@dataclass
class Generation:
    """One sampled continuation.

    Attributes:
        token_ids: The sampled tokens, ending with an EOS token when the model stopped by itself.
        logprobs: Log-probability (nats) of each sampled token under the sampling distribution before
            top-k/top-p truncation (``log_softmax(logits / temperature)``; greedy: ``temperature=1``),
            the quantity TRL recomputes as ``old_per_token_logps``. Same length as ``token_ids``.
        stopped: ``True`` if the last token is an EOS token, ``False`` if the token budget ran out.
    """

    token_ids: list[int]
    logprobs: list[float]
    stopped: bool


class BackendError(RuntimeError):
    """A backend failed during a run (e.g. its server died); the message names it and says what to do."""


def eos_token_ids(model: Any, tokenizer: Any) -> list[int]:
    """The tokens that end a turn: the tokenizer's EOS token and every EOS id of the model's generation config
    (the set TRL's ``GRPOTrainer.eos_token_ids`` holds), sorted."""
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    configured = [] if configured is None else configured if isinstance(configured, list) else [configured]
    return sorted({tokenizer.eos_token_id, *configured} - {None})


@dataclass
class Policy:
    """What a backend is built on: the policy as the run holds it.

    Attributes:
        model: The policy model (unwrapped).
        tokenizer: Its tokenizer.
        sampling_model: Returns a context manager that yields the model to sample from in this process (under a
            trainer, the policy as TRL unwraps it for generation; else ``model`` itself).
        device: Where the policy's inputs go.
        images: A vision-language policy's image inputs (``None``: a text policy).
    """

    model: Any
    tokenizer: Any
    sampling_model: Callable[[], contextlib.AbstractContextManager[Any]]
    device: Any
    images: ImageInputs | None = None

    @classmethod
    def plain(cls, model: Any, tokenizer: Any, images: ImageInputs | None = None) -> Policy:
        """A policy outside a trainer (evaluation, scripts)."""
        return cls(model, tokenizer, lambda: contextlib.nullcontext(model), model.device, images)

    @property
    def eos_token_ids(self) -> list[int]:
        """See :func:`eos_token_ids`."""
        return eos_token_ids(self.model, self.tokenizer)


class GenerationBackend(ABC):
    """What the rollout engine needs from a generator.

    Every backend samples a batch (:meth:`generate`). One that :attr:`streams` also takes requests one at a time
    and returns them as they finish (:meth:`submit`, :meth:`step`, :meth:`has_unfinished`), which the
    asynchronous rollout loop uses. One that :attr:`has_own_weights` keeps its own copy of the policy and is handed
    the policy's weights after every optimiser step (:meth:`load_weights`); one :attr:`shared_by_processes` (a
    server) gets them from the main process only.

    A new backend subclasses this, implements :meth:`build` and :meth:`generate` (and the streaming or weight
    methods its flags promise), and registers itself with ``@GENERATION_BACKENDS.register(name)``; config checks of
    its own keys go in :meth:`check`, a reachability check before the model loads in :meth:`preflight`.
    """

    streams: ClassVar[bool] = False
    """Takes requests one at a time (:meth:`submit`, :meth:`step`, :meth:`has_unfinished`)."""
    has_own_weights: ClassVar[bool] = False
    """Samples from its own copy of the weights, which :meth:`load_weights` replaces after every optimiser step;
    ``False``: samples from the policy model itself."""
    shared_by_processes: ClassVar[bool] = False
    """One instance serves every training process: only the main process hands it new weights."""
    supports_images: ClassVar[bool] = False
    """Samples from prompts holding images (:meth:`generate`'s ``images``): a vision-language policy's rollouts."""

    @classmethod
    def check(cls, config: TrainConfig) -> None:
        """Checks the backend's own keys of a configuration, before anything is loaded.

        Raises:
            ConfigError: a bad value (one line naming the key).
        """
        return  # most backends have no keys of their own

    @classmethod
    def preflight(cls, config: TrainConfig) -> None:
        """Checks, before the model loads, what the backend needs outside this process (e.g. a server answers).

        Raises:
            ConfigError: it is not there (one line: where, and how to start it).
        """
        return  # most backends need nothing outside this process

    @classmethod
    @abstractmethod
    def build(cls, config: TrainConfig, policy: Policy) -> GenerationBackend:
        """The backend of a run.

        Raises:
            ConfigError: it cannot start (one line naming the keys to check).
        """

    @abstractmethod
    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: Sequence[int],
        params: SamplingParams,
        images: Sequence[Sequence[Any]] | None = None,
    ) -> list[Generation]:
        """Samples one continuation per prompt.

        Args:
            prompts: Token ids of each sequence so far (prompt and earlier turns), unpadded.
            max_new_tokens: Per-sequence budget of new tokens (each >= 1).
            params: Sampling parameters shared by the batch.
            images: Per prompt, the images its placeholder tokens stand for, in order (only to a backend that
                :attr:`supports_images`; ``None``: no prompt has one).

        Returns:
            One :class:`Generation` per prompt, in order.
        """

    def submit(self, request_id: str, prompt_ids: Sequence[int], max_new_tokens: int, params: SamplingParams) -> None:
        """Queues one request; it runs in a later :meth:`step` with every other pending request (:attr:`streams`)."""
        raise NotImplementedError(f"{type(self).__name__} does not stream requests")

    def step(self) -> list[tuple[str, Generation]]:
        """One engine step over the pending requests; the ``(request id, generation)`` of those it finished."""
        raise NotImplementedError(f"{type(self).__name__} does not stream requests")

    def has_unfinished(self) -> bool:
        """Whether a submitted request has not finished."""
        raise NotImplementedError(f"{type(self).__name__} does not stream requests")

    def load_weights(self, named_tensors: Iterable[tuple[str, Any]]) -> None:
        """Replaces the backend's weights with ``named_tensors`` (Hugging Face checkpoint names, every weight of the
        model) (:attr:`has_own_weights`)."""
        raise NotImplementedError(f"{type(self).__name__} samples from the policy itself")

    def close(self) -> None:
        """Releases what the backend holds (threads, connections)."""
        return  # most backends hold nothing to release


class BackendRegistry(Registry[type[GenerationBackend]]):
    """Generation backends by name, and the other names a configuration may give them.

    ``actor_rollout_ref.rollout.name`` (or AgentFly's ``agent.backend``) names a backend; :meth:`chosen` turns the
    rollout section into the registered name: AgentFly's names (:attr:`aliases`) are ours, and a backend run as a
    separate server (``rollout.mode=server``) is its served variant (:attr:`served`).
    """

    aliases: ClassVar[dict[str, str]] = {
        "async_verl": "vllm",
        "verl": "vllm",
        "async_vllm": "vllm",
        "transformers": "hf",
    }
    """AgentFly's ``agent.init_args.backend`` values -> ours: its verl/vLLM engines are our vLLM backend (episodes
    asynchronous by default), its ``transformers`` one our ``hf``."""
    refused: ClassVar[dict[str, str]] = {
        "client": "(AgentFly's client of a served model) does not train the model: use agent.backend=vllm, with "
        "actor_rollout_ref.rollout.mode=server to generate on a separate vLLM server"
    }
    """Names users come with that no backend of a training run stands for -> why, and what to use."""
    modes: ClassVar[tuple[str, ...]] = ("colocate", "server")
    """``rollout.mode``: the engine in the training processes, or started separately as a server."""
    served: ClassVar[dict[str, str]] = {"vllm": "vllm_server"}
    """A backend -> the backend that samples from it started as a server (``rollout.mode=server``)."""
    hf_engines: ClassVar[dict[str, str]] = {"padded": "hf", "continuous": "hf_continuous"}
    """``rollout.hf_engine`` -> the backend ``hf`` stands for: ``generate`` on a left-padded batch per turn, or
    transformers' continuous batching, each episode's turn a request of its own."""

    def chosen(self, rollout: RolloutConfig, requested: str | None = None) -> str:
        """The registered name of the backend a run uses: ``requested`` (``agent.backend``) if set, else
        ``rollout.name``, resolved through :attr:`aliases`, ``hf`` through ``rollout.hf_engine`` (:attr:`hf_engines`)
        and, with ``rollout.mode=server``, :attr:`served`."""
        name = requested or rollout.name
        name = self.aliases.get(name, name)
        name = self.hf_engines.get(rollout.hf_engine, name) if name == "hf" else name
        return self.served.get(name, name) if rollout.mode == "server" else name

    def check_choice(self, rollout: RolloutConfig, requested: str | None = None) -> type[GenerationBackend]:
        """The chosen backend's class, after checking the names that choose it.

        Raises:
            ConfigError: a refused name, an unknown mode or backend (one line naming the key).
        """
        if requested in self.refused:
            raise ConfigError(f"agent.backend={requested} {self.refused[requested]}")
        check_choice("actor_rollout_ref.rollout.mode", rollout.mode, self.modes)
        check_choice("actor_rollout_ref.rollout.hf_engine", rollout.hf_engine, tuple(self.hf_engines))
        return registered("actor_rollout_ref.rollout.name / agent.backend", self, self.chosen(rollout, requested))

    def async_episodes(self, rollout: RolloutConfig, requested: str | None = None) -> bool:
        """``rollout.async_episodes`` resolved: ``null`` is on with a backend that streams requests (vLLM's)."""
        setting = rollout.async_episodes
        return self.get(self.chosen(rollout, requested)).streams if setting is None else setting


GENERATION_BACKENDS = BackendRegistry(
    "generation backend", where="agentfly_train/generation/", how="@GENERATION_BACKENDS.register(name) on the class"
)
"""Backends by the name ``actor_rollout_ref.rollout.name`` gives (:meth:`BackendRegistry.chosen`); ours are entry
points, imported when chosen."""
GENERATION_BACKENDS.add_entry_point("hf", "agentfly_train.generation.hf:HFGenerationBackend")
GENERATION_BACKENDS.add_entry_point("hf_continuous", "agentfly_train.generation.hf_continuous:HFContinuousBackend")
GENERATION_BACKENDS.add_entry_point("vllm", "agentfly_train.generation.vllm:VLLMGenerationBackend")
GENERATION_BACKENDS.add_entry_point("vllm_server", "agentfly_train.generation.vllm_server:VLLMServerBackend")


def backend_of(config: TrainConfig) -> type[GenerationBackend]:
    """The backend class a configuration chooses (:meth:`BackendRegistry.chosen`)."""
    return GENERATION_BACKENDS.get(GENERATION_BACKENDS.chosen(config.actor_rollout_ref.rollout, config.agent.backend))


def build_backend(config: TrainConfig, policy: Policy) -> GenerationBackend:
    """The configured backend (:func:`backend_of`), built on ``policy``."""
    return backend_of(config).build(config, policy)
