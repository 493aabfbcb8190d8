"""A training run end to end: config -> model, envs, data -> (SFT warm start) -> RL -> validation."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import TYPE_CHECKING

from agentfly_train.run_dir import RunResult

if TYPE_CHECKING:
    from agentfly_train.config.schema import TrainConfig


def run(config: TrainConfig, show_progress: bool = True) -> RunResult:
    """Runs the configured job: load, optionally warm-start, validate, train with RL, validate.

    Args:
        config: A validated configuration (:func:`~agentfly_train.config.load_config`).
        show_progress: Draw the console progress bar.

    Returns:
        The :class:`RunResult` (also saved as ``result.json`` in the run directory).
    """
    from agentfly_train.build import prepare_run
    from agentfly_train.config.loading import load_user_code
    from agentfly_train.run_claim import claim_run_dir
    from agentfly_train.training import train_prepared

    load_user_code(config)  # loaded already where the configuration was read; not on a Ray Train worker
    # The run directory is this run's (locked, and holding no other run) until it has written its last file.
    with claim_run_dir(config.trainer, json.loads(json.dumps(asdict(config)))):  # as its config.json holds it
        return train_prepared(prepare_run(config, show_progress), show_progress)
