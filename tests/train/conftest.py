"""Shared setup of the trainer tests: the small task set RL can learn, warm-started tiny policies, and headless
Chromium for the run report."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from agentfly_train.config import QUICKSTART, TrainConfig, load_config
from tests.conftest import REPO_ROOT, run_cli  # noqa: F401  (run_cli: the trainer tests import it from here)


def quickstart_config(overrides: Sequence[str] = ()) -> TrainConfig:
    """The quickstart preset (``python -m agentfly_train`` with no arguments) with ``overrides`` on top."""
    return load_config(overrides, [QUICKSTART])


def sync_and_on_policy_async(overrides: Sequence[str], tmp_path: Path) -> tuple[Path, Path]:
    """Runs the quickstart job with ``overrides`` in this process twice, on the synchronous schedule and on the
    asynchronous one with on-policy settings (nothing ahead, nothing stale, the trainer's log-probs as PPO's old
    ones); their run directories, ``(sync, async)``."""
    from agentfly_train.train import run

    directories = (tmp_path / "sync", tmp_path / "async")
    on_policy = ["async_training.enable=true", "async_training.staleness_threshold=0",
                 "async_training.max_staleness=0", "async_training.use_rollout_log_probs=false"]  # fmt: skip
    for directory, extra in zip(directories, ([], on_policy), strict=True):
        run(quickstart_config([*overrides, *extra, f"trainer.default_local_dir={directory}"]), show_progress=False)
    return directories


def step_records(run_dir: Path) -> list[dict[str, Any]]:
    """The optimiser steps' records of ``run_dir``'s ``metrics.jsonl``."""
    from agentfly_train.callbacks import MetricsFile

    return [record for record in MetricsFile(run_dir / "metrics.jsonl").read() if "loss" in record]


def final_weights(run_dir: Path) -> dict[str, Any]:
    """The tensors of ``run_dir``'s ``final/model.safetensors``, by name."""
    from safetensors.torch import load_file

    return load_file(str(run_dir / "final" / "model.safetensors"))


def learning_tasks(num_tasks: int = 2) -> tuple[str, ...]:
    """Overrides for a task set RL can learn: ``num_tasks`` fixed one-step multiplications (a calculator call,
    then the answer), small enough to memorise."""
    return (
        f"agent.env_kwargs={{level: single, num_tasks: {num_tasks}}}",
        "agent.max_turns=2",
        "agent.max_tokens_per_turn=32",
        "actor_rollout_ref.rollout.response_length=128",
        "data.val_size=0",
    )


LEARNING_TASKS = learning_tasks()
"""The two-task set of :func:`learning_tasks`."""
WARM_START_STEPS = 60
"""SFT steps (lr 3e-3) on the tasks' golden episodes that give the tiny model the tool-call format: sampling at
temperature 1 then solves about four episodes in ten (the failures are calculator calls with a wrong operand)."""

GUESS_DEMOS = 64
"""Demonstrations (the tasks repeated) a warm start with guesses learns from, so that each task is demonstrated
both ways."""


FSDP_ON_CPU = Path(__file__).parent / "fsdp_on_cpu"
"""A ``sitecustomize`` folder that turns Accelerate's FSDP back on for CPU processes (see its docstring)."""


def accelerate_launch(processes: int, *, fsdp: bool = False) -> tuple[list[str], dict[str, str]]:
    """The command prefix and environment that start ``processes`` CPU processes of ``-m agentfly_train`` under
    ``accelerate launch``: DDP over gloo, or with ``fsdp`` FSDP2 (the policy sharded across them).

    ``accelerate launch --cpu --num_processes N`` starts one process; ``--multi_gpu`` (or ``--use_fsdp``) with
    ``ACCELERATE_USE_CPU=true`` starts N through torch's launcher, and Accelerate then sets up multi-CPU DDP.
    """
    import sys

    launcher = str(Path(sys.executable).with_name("accelerate"))
    mode = ["--use_fsdp", "--fsdp_version=2", "--fsdp_auto_wrap_policy=TRANSFORMER_BASED_WRAP",
            "--fsdp_state_dict_type=SHARDED_STATE_DICT"] if fsdp else ["--multi_gpu"]  # fmt: skip
    command = [launcher, "launch", *mode, f"--num_processes={processes}", "--num_machines=1",
               "--mixed_precision=no", "--dynamo_backend=no", f"--main_process_port={free_port()}",
               "-m", "agentfly_train"]  # fmt: skip
    env = {"ACCELERATE_USE_CPU": "true", "OMP_NUM_THREADS": "1"}
    if fsdp:
        env["PYTHONPATH"] = str(FSDP_ON_CPU)
    return command, env


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _warm_start(steps: int, num_tasks: int, guess_fraction: float, directory: Path) -> Path:
    import gymnasium as gym

    from agentfly_train.build import env_kwargs, make_codec, train_rows
    from agentfly_train.models import load_policy
    from agentfly_train.sft import golden_token_rows, warm_start

    config = quickstart_config([*learning_tasks(num_tasks), f"sft.steps={steps}", "sft.lr=3e-3"])
    env = gym.make(config.agent.env, **env_kwargs(config))
    rows = train_rows(config, env)
    model, tokenizer = load_policy(config)
    codec = make_codec(config, tokenizer, env, rows[0])
    demos = rows * max(1, GUESS_DEMOS // len(rows)) if guess_fraction else rows
    with tempfile.TemporaryDirectory() as scratch:
        warm_start(
            model,
            tokenizer,
            golden_token_rows(env, codec, demos, guess_fraction, config.trainer.seed, wrong_guesses=True),
            steps=config.sft.steps,
            lr=config.sft.lr,
            batch_size=config.sft.batch_size,
            output_dir=scratch,
            use_cpu=True,
            seed=config.trainer.seed,
            lr_scheduler_type="constant",  # the schedule these policies' tests were measured with
            warmup_ratio=0.0,
        )
    env.close()
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture(scope="session")
def warm_policies(tmp_path_factory) -> Callable[..., Path]:
    """``(steps, num_tasks=2, guess_fraction=0.0) -> directory`` of the tiny policy warm-started for ``steps`` SFT
    steps on :func:`learning_tasks` (built once per session and arguments), for ``actor_rollout_ref.model.path``.
    With a ``guess_fraction`` it learns from :data:`GUESS_DEMOS` demonstrations of the tasks, that share of them
    wrong guesses without the calculator (``sft.guess_fraction``)."""
    built: dict[tuple[int, int, float], Path] = {}

    def policy(steps: int, num_tasks: int = 2, guess_fraction: float = 0.0) -> Path:
        key = (steps, num_tasks, guess_fraction)
        if key not in built:
            directory = tmp_path_factory.mktemp(f"warm_policy_{steps}_{num_tasks}_{guess_fraction}")
            built[key] = _warm_start(steps, num_tasks, guess_fraction, directory)
        return built[key]

    return policy


@pytest.fixture(scope="session")
def warm_policy(warm_policies) -> Path:
    """The tiny policy after :data:`WARM_START_STEPS` SFT steps on :data:`LEARNING_TASKS`."""
    return warm_policies(WARM_START_STEPS)


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium driven by selenium, logging the page's console."""
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (the [dev] extra)")
    if not (CHROMIUM and CHROMEDRIVER):
        pytest.skip("no chromium/chromedriver on PATH (Debian: apt-get install chromium chromium-driver)")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(argument)
    options.add_argument("--window-size=1400,1800")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    yield driver
    driver.quit()


def open_page(driver, path: Path) -> None:
    """Opens a local page and clears the browser's log of earlier pages."""
    driver.get(path.resolve().as_uri())
    driver.get_log("browser")


def console_errors(driver) -> list[str]:
    """The page's console errors since it was opened."""
    return [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def select(driver, element_id: str, value: str) -> None:
    """Picks ``value`` in the page's ``<select id=element_id>``."""
    from selenium.webdriver.support.ui import Select

    Select(driver.find_element("id", element_id)).select_by_value(value)
