"""The examples in ``agentfly_train``'s docstrings run and print what they show. ``agentfly_envs``' are collected by
``--doctest-modules`` (``testpaths``); ``agentfly_train``'s are run here, module by module, so that collecting them
does not import every backend (vLLM, Ray) into the test process."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

from tests.helpers.skips import needs_train_extra

PACKAGE = Path(__file__).resolve().parents[2] / "agentfly_train"
MODULES = sorted(
    ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    for path in PACKAGE.rglob("*.py")
    if ">>> " in path.read_text()
)


def test_the_package_has_examples():
    assert len(MODULES) >= 5, MODULES


@needs_train_extra
@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    results = doctest.testmod(module, optionflags=doctest.ELLIPSIS, report=True)
    assert results.attempted > 0 and results.failed == 0, f"{name}: {results.failed} failed (printed above)"
