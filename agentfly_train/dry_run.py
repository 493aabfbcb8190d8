"""``python -m agentfly_train --dry-run``: what a run would do, before any model is loaded or GPU is paid for."""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

from agentfly_train.config.schema import TrainConfig


def changed_keys(config: TrainConfig) -> dict[str, Any]:
    """The dotted keys whose resolved value differs from the schema's default, e.g. ``{"agent.max_turns": 3}``."""
    defaults = _flat(asdict(TrainConfig()))
    return {
        key: value
        for key, value in _flat(asdict(config)).items()
        if defaults.get(key) != value and "${" not in str(defaults.get(key))  # interpolated defaults resolve later
    }


def _flat(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if (
            isinstance(value, dict)
            and value
            and key not in ("env_kwargs", "tool_options", "val_env_kwargs", "chat_template_kwargs")
        ):
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def describe(config: TrainConfig, world_size: int = 1) -> str:
    """The dry run's report: changed keys, the env, the batch layout, token budgets and the run's length.

    Builds the envs, reads the data, loads the tokenizer (not the model), checks the chat template on an episode of
    the env as a run does (its last line ends in ``round trip ok``) and runs the generation backend's preflight (a
    vLLM server must answer).

    Args:
        config: A validated configuration.
        world_size: Processes the run would have (the report's per-device figures assume this many).

    Raises:
        ConfigError: as a real run would, before its model is loaded (bad data, bad sizes).
    """
    from agentfly_envs.contract import env_contract
    from agentfly_train.data import run_data
    from agentfly_train.generation.base import GENERATION_BACKENDS, backend_of
    from agentfly_train.models import make_codec, policy_tokenizer
    from agentfly_train.trl_args import batch_layout

    layout = batch_layout(config, world_size)
    data = run_data(config)
    env, rows, val = data.env, data.train, data.val
    backend_of(config).preflight(config)
    tokenizer = policy_tokenizer(config)
    codec = make_codec(config, tokenizer, env, rows[0])
    _, info = env.reset(options={"task": rows[0]})
    prompt_ids = codec.prompt_ids(info["messages"])
    contract = env_contract(env)
    parser, reward_fn = contract.parser, contract.reward_fn  # reward_fn None: the env scores with its own
    env.close()

    agent, data, trainer = config.agent, config.data, config.trainer
    rollout = config.actor_rollout_ref.rollout
    steps_per_epoch = len(rows) // data.train_batch_size
    steps = trainer.total_training_steps or steps_per_epoch * trainer.total_epochs
    lines = ["configuration (keys that differ from the defaults):"]
    lines += [f"  {key} = {value!r}" for key, value in changed_keys(config).items()] or ["  (none)"]
    reward = getattr(reward_fn, "__name__", reward_fn) or "the env's own"
    tools = [tool["function"]["name"] for tool in info["tools"]]
    lines += [
        f"env: {config.env_id} with tools {tools}, parser {parser.name} "
        f"(agent.agent_type={agent.agent_type}), reward {reward}",
        *([f"note: {codec.note}"] if codec.note else []),
        f"data: {len(rows)} training rows, {len(val)} validation rows",
        f"model: {config.model_path} (not loaded); generation backend "
        f"{GENERATION_BACKENDS.chosen(config.actor_rollout_ref.rollout, config.agent.backend)}",
        f"rollout step: {data.train_batch_size} prompts x {agent.num_chains} chains = "
        f"{layout.completions_per_rollout} episodes of at most {agent.max_turns} turns",
        f"update: {layout.optimizer_steps_per_rollout} optimiser step(s) per rollout step "
        f"({layout.steps_per_rollout} mini-batch(es) x {layout.ppo_epochs} epoch(s)); on each of {world_size} "
        f"device(s) {layout.grad_accum} micro-batch(es) of {layout.micro_batch} sequences per optimiser step",
        f"tokens: prompt of the first task {len(prompt_ids)}; per turn at most {agent.max_tokens_per_turn}; "
        f"per episode (all turns, tool output included) at most {rollout.response_length}",
        f"length: {steps} rollout steps ({steps_per_epoch} per epoch over the training rows; "
        f"{math.ceil(steps / max(steps_per_epoch, 1))} epoch(s)), {steps * layout.optimizer_steps_per_rollout} "
        f"optimiser steps; validation: {_validation_plan(config, len(val))}",
        f"run directory: {trainer.default_local_dir}",
        codec.description,
    ]
    return "\n".join(lines)


def _validation_plan(config: TrainConfig, rows: int) -> str:
    if not rows:
        return "none (no validation rows)"
    times = [f"every {config.trainer.test_freq} steps"] if config.trainer.test_freq > 0 else []
    if config.trainer.val_before_train:
        times.insert(0, "before training")
    return f"{rows} rows, " + ", ".join([*times, "after training"])
