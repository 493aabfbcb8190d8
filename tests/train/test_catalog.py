"""``python -m agentfly_train list KIND``: each listing names exactly what its registry holds, with a line each."""

from __future__ import annotations

import gymnasium as gym
import pytest

from agentfly_envs import PARSERS, REWARDS, TOOLS
from agentfly_train.algorithms import ADVANTAGE_ESTIMATORS
from agentfly_train.catalog import LISTINGS, listing
from agentfly_train.generation import GENERATION_BACKENDS
from agentfly_train.launchers import LAUNCHERS
from agentfly_train.models import known_templates

EXPECTED = {
    "envs": lambda: [name for name in gym.registry if name.startswith("agentfly/")],
    "tools": lambda: list(TOOLS),
    "rewards": lambda: list(REWARDS),
    "parsers": lambda: list(PARSERS),
    "estimators": lambda: list(ADVANTAGE_ESTIMATORS),
    "backends": lambda: list(GENERATION_BACKENDS),
    "launchers": lambda: list(LAUNCHERS),
    "templates": known_templates,
}


@pytest.mark.parametrize("kind", sorted(set(LISTINGS) - {"keys"}))
def test_each_listing_names_its_registry(kind):
    lines = listing(kind).splitlines()
    assert sorted(line.split()[0] for line in lines) == sorted(EXPECTED[kind]())
    described = [line for line in lines if len(line.split()) > 1]
    assert len(described) == len(lines), [line for line in lines if line not in described]  # a description each
    assert {"hf", "vllm", "vllm_server"} <= {line.split()[0] for line in listing("backends").splitlines()}
