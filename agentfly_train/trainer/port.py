"""The rollout port: the one way the trainer and its rollout schedules sample episodes.

Built in :mod:`agentfly_train.build` from the run's rollout driver (envs, codec, budgets, sampling) and its
generation backend (or the function that builds it on the trainer's policy), then connected by the trainer to its
policy. The schedules ask the port for a backend holding the current weights (:meth:`RolloutPort.sampling`) and
for a weight sync (:meth:`RolloutPort.sync_weights`); neither reaches into the trainer.
"""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from agentfly_train.generation import GenerationBackend, HFGenerationBackend, Policy
from agentfly_train.rollout import AgentRollout
from agentfly_train.sharding import engine_weights, unsharded


class RolloutPort:
    """The rollout driver, the generation backend and the weight sync that keeps the backend's policy current.

    Args:
        agent: The rollout driver (env pool, codec, budgets, sampling, env-stepping threads).
        backend: The generation backend, or a function that builds it on the trainer's policy
            (:class:`~agentfly_train.generation.Policy`; e.g. ``functools.partial(build_backend, config)``);
            ``None``: Hugging Face ``generate`` on the policy. One that
            :attr:`~agentfly_train.generation.GenerationBackend.has_own_weights` is given the policy's weights after
            each optimiser step, once, before it next samples.
    """

    def __init__(
        self, agent: AgentRollout, backend: GenerationBackend | Callable[[Policy], GenerationBackend] | None = None
    ) -> None:
        self.agent = agent
        self._backend = backend
        self._accelerator: Any = None
        self._model: Callable[[], Any] = lambda: None
        self._step: Callable[[], int] = lambda: 0
        self._synced_step = -1  # the engine may hold weights from before a resumed checkpoint: sync at first use

    def connect(self, policy: Policy, accelerator: Any, model: Callable[[], Any], step: Callable[[], int]) -> None:
        """Binds the port to the trainer: builds the backend on ``policy`` (unless it was given built), and syncs
        weights from ``model()`` (the trainer's model, as Accelerate holds it) at optimiser step ``step()``."""
        if not isinstance(self._backend, GenerationBackend):
            self._backend = (self._backend or HFGenerationBackend.from_policy)(policy)
        self._accelerator, self._model, self._step = accelerator, model, step

    @property
    def backend(self) -> GenerationBackend:
        """The generation backend (after :meth:`connect`)."""
        if not isinstance(self._backend, GenerationBackend):
            raise RuntimeError("the rollout port is not connected to a policy yet")
        return self._backend

    @contextlib.contextmanager
    def sampling(self) -> Iterator[GenerationBackend]:
        """The generation backend, holding the current policy weights, for one rollout.

        A backend with its own copy of the weights (vLLM) gets the policy's after every optimiser step, once,
        before it next samples (TRL syncs its own vLLM engine the same way, on ``global_step``;
        :meth:`sync_weights`). Sampling from the policy itself (HF), an FSDP2 policy is held unsharded for the
        rollout (:func:`~agentfly_train.sharding.unsharded`), since each process makes its own number of forwards.
        """
        backend = self.backend
        if not backend.has_own_weights:
            with unsharded(self._model()):
                yield backend
            return
        if self._synced_step != self._step():
            self.sync_weights()
        yield backend

    def sync_weights(self) -> None:
        """Hands a backend with its own weights the policy's. One shared by all processes (a vLLM server) gets them
        from the main process, and the others wait until it has."""
        backend, accelerator = self.backend, self._accelerator
        shared = backend.shared_by_processes
        weights = engine_weights(accelerator.unwrap_model(self._model()))
        if accelerator.is_main_process or not shared:
            backend.load_weights(weights)
        else:
            collections.deque(weights, maxlen=0)  # an FSDP2 policy's tensors are gathered by all processes
        if shared:
            accelerator.wait_for_everyone()
        self._synced_step = self._step()

    def close(self) -> None:
        """Stops the env-stepping threads, closes the envs and releases the generation backend."""
        self.agent.close()
        if isinstance(self._backend, GenerationBackend):
            self._backend.close()
