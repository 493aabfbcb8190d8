"""Evaluation: a model and an env id in, accuracy, mean reward and trajectories out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentfly_train.config import ConfigError, TrainConfig


def evaluate(config: TrainConfig) -> tuple[dict[str, float], list[dict[str, Any]], Path]:
    """Runs the validation rows (``data.val_files`` or the env's task source with ``data.val_env_kwargs``)
    through the env with the configured model, sampling at ``actor_rollout_ref.rollout.val_temperature``.

    Returns:
        ``(statistics, trajectory records, path of eval.jsonl)``; statistics as in
        :func:`~agentfly_train.rollout.summarize` (``accuracy``, ``reward/mean``, ...).
    """
    from agentfly_train.models import load_policy, training_device
    from agentfly_train.train import agent_rollout, env_kwargs, has_validation, make_codec, make_env, val_rows
    from agentfly_train.trainer import generation_backend_for, trajectory_record

    if not has_validation(config):
        raise ConfigError("nothing to evaluate: set data.val_files (or agent.env to an env with its own tasks)")
    kwargs = env_kwargs(config, validation=True)
    env = make_env(config, validation=True)
    rows = val_rows(config, env)
    model, tokenizer = load_policy(config)
    model.to(training_device(config))
    codec = make_codec(config, tokenizer, env, rows[0])
    env.close()
    agent = agent_rollout(config, codec, kwargs)
    try:
        stats, trajectories = agent.evaluate(generation_backend_for(model, tokenizer), rows, config.data.val_batch_size)
    finally:
        agent.executor.shutdown()
        agent.pool.close()
    records = [trajectory_record(t) for t in trajectories]
    path = Path(config.trainer.default_local_dir) / "eval.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return stats, records, path
