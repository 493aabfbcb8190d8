"""The rollout port builds its backend on the trainer's policy, hands a backend with its own weights the policy's
once per optimiser step before it samples, and leaves a backend that samples from the policy itself alone."""

from types import SimpleNamespace

import pytest
import torch

from agentfly_train.generation import GenerationBackend, Policy
from agentfly_train.trainer.port import RolloutPort


class _Engine(GenerationBackend):
    """A backend with its own weights that records what it was handed."""

    has_own_weights = True

    def __init__(self) -> None:
        self.loads: list[dict[str, torch.Tensor]] = []
        self.closed = False

    @classmethod
    def build(cls, config, policy):
        return cls()

    def generate(self, prompts, max_new_tokens, params, images=None):
        return []

    def load_weights(self, named_tensors):
        self.loads.append({name: tensor.clone() for name, tensor in named_tensors})

    def close(self) -> None:
        self.closed = True


class _Agent(SimpleNamespace):
    def close(self) -> None:
        self.closed = True


def _connected(backend, step):
    model = torch.nn.Linear(2, 1)
    accelerator = SimpleNamespace(unwrap_model=lambda m: m, is_main_process=True, wait_for_everyone=lambda: None)
    port = RolloutPort(_Agent(closed=False), backend)
    policy = Policy(model, None, lambda: None, torch.device("cpu"))
    port.connect(policy, accelerator, lambda: model, lambda: step["now"])
    return port, model


def test_the_backend_is_built_on_the_policy_and_gets_its_weights_once_per_step():
    built = []
    step = {"now": 0}
    port, model = _connected(lambda policy: built.append(policy) or _Engine(), step)
    assert len(built) == 1 and built[0].model is not None
    engine = port.backend
    with port.sampling() as backend:
        assert backend is engine
    with port.sampling():
        pass
    assert len(engine.loads) == 1  # one sync at version 0, none for the second rollout of the step
    torch.testing.assert_close(engine.loads[0]["weight"], model.weight.detach())
    with torch.no_grad():
        model.weight.add_(1.0)
    step["now"] = 1
    with port.sampling():
        pass
    assert len(engine.loads) == 2
    torch.testing.assert_close(engine.loads[1]["weight"], model.weight.detach())
    port.close()
    assert engine.closed and port.agent.closed


def test_a_backend_sampling_from_the_policy_is_never_handed_weights():
    engine = _Engine()
    engine.has_own_weights = False
    port, _ = _connected(engine, {"now": 0})
    with port.sampling() as backend:
        assert backend is engine
    assert engine.loads == []


def test_an_unconnected_port_says_so():
    port = RolloutPort(_Agent(closed=False), _Engine)
    with pytest.raises(RuntimeError, match="not connected to a policy yet"):
        port.backend  # noqa: B018
    port.close()
    assert port.agent.closed
