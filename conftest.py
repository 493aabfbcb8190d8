"""Doctest collection across installs: ``--doctest-modules`` imports every module of ``agentfly_envs``.

The base install (the environments only, as CI's ``.venv-base`` has it) lacks the optional extras, so a module that
imports one at the top is not collected, and a doctest that needs one is skipped naming the extra. The full install
collects and runs them all.
"""

from __future__ import annotations

import importlib.util

import pytest

NEEDS_EXTRA: dict[str, tuple[str, str]] = {
    "agentfly_envs/adapters/verl.py": ("verl", "verl"),
    "agentfly_envs/remote/server.py": ("openenv", "openenv"),
    "agentfly_envs/remote/mcp_server.py": ("mcp", "mcp"),
    "agentfly_envs.tools.world.image_part": ("PIL", "web"),
    "agentfly_envs.worlds.miniwob.key_code": ("miniwob", "web"),
}
"""A module file (not collected) or a doctest's name (skipped) -> (the module it imports, the extra that brings it)."""


def _absent(module: str) -> bool:
    return importlib.util.find_spec(module) is None


collect_ignore = [path for path, (module, _) in NEEDS_EXTRA.items() if path.endswith(".py") and _absent(module)]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Skip the doctests of :data:`NEEDS_EXTRA` whose module is absent, naming the extra to install."""
    for item in items:
        need = NEEDS_EXTRA.get(item.name)
        if need is not None and _absent(need[0]):
            item.add_marker(pytest.mark.skip(reason=f'needs the "{need[1]}" extra'))
