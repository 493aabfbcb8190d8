"""``python -m agentfly_train list KIND``: each listing names exactly what its registry holds, with a line each."""

from __future__ import annotations

import re

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


AGENTFLY_SPELLINGS = {"qwen2.5": "docs/coming-from-agentfly.md quotes AgentFly's guide's name and says it is `qwen2_5`"}
"""Template names the docs may write other than as ``list templates`` prints them, each with why."""


def test_the_docs_name_each_template_as_list_templates_prints_it():
    """``agent.template=qwen2.5-vl`` worked (the name is read as ``qwen2_5_vl``) but matched no line of ``list
    templates``: the README and docs/ write every template name as the listing does."""
    from tests.helpers.readme import DOC_FILES

    listed = {line.split()[0] for line in listing("templates").splitlines()}
    written = {
        (name, path.name)
        for path in DOC_FILES
        for name in re.findall(r"agent\.template=([\w.-]+)", path.read_text())
        if not name.endswith(".jinja")
    }
    assert {name for name, _ in written} >= {"qwen2_5_vl", "qwen3_vl"}
    unlisted = sorted((page, name) for name, page in written if name not in listed | set(AGENTFLY_SPELLINGS))
    assert not unlisted, f"template names that `python -m agentfly_train list templates` does not print: {unlisted}"
