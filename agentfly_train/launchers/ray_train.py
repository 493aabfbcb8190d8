"""Training on a Ray cluster: ``trainer.nnodes x trainer.n_gpus_per_node`` workers started by Ray Train.

The driver (``python -m agentfly_train ... trainer.launcher=ray``, or ``auto`` with ``RAY_ADDRESS`` set) connects to
the cluster, checks that it has the resources, and starts a :class:`ray.train.torch.TorchTrainer` whose workers
each run the same training job as one process of an ``accelerate launch``: Ray Train's Torch backend creates the
``torch.distributed`` process group (NCCL on GPUs, gloo on CPUs) and sets ``RANK``/``WORLD_SIZE``/``LOCAL_RANK``,
which Accelerate picks up unchanged. The run directory (``trainer.default_local_dir``) is written by the workers as
in a single-node run, so on several nodes it must be a path every node shares (checkpoints are written by global
rank 0, and resuming reads them from there).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentfly_train.config.errors import ConfigError
from agentfly_train.config.schema import TrainConfig
from agentfly_train.errors import error_summary
from agentfly_train.launchers.base import LOCAL, Launcher, LaunchError

if TYPE_CHECKING:
    from agentfly_train.run_dir import RunResult

INSTALL_HINT = "trainer.launcher=ray needs Ray Train: pip install 'agentfly-rl[ray]'"


def _connect() -> Any:
    try:
        import ray
        import ray.train.torch
    except ImportError:
        raise ConfigError(INSTALL_HINT) from None
    address = os.environ.get("RAY_ADDRESS")
    try:
        # No address: the cluster `ray start` left on this machine, or else a new one-machine cluster.
        ray.init(address=address, ignore_reinit_error=True, logging_level="WARNING", log_to_driver=True)
    except (ConnectionError, RuntimeError, ValueError) as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ConfigError(f"cannot reach the Ray cluster at RAY_ADDRESS={address!r}: {first_line}") from None
    return ray


def worker_resources(config: TrainConfig, cluster: dict[str, float]) -> tuple[int, bool, dict[str, float]]:
    """(workers, use_gpu, resources per worker) of the run on a cluster with ``cluster`` total resources.

    Raises:
        ConfigError: the cluster cannot hold them (one line naming what is missing).
    """
    trainer = config.trainer
    workers = trainer.nnodes * max(trainer.n_gpus_per_node, 1)  # 0 GPUs per node: one CPU worker per node
    use_gpu = trainer.device == "cuda" or (trainer.device == "auto" and cluster.get("GPU", 0) > 0)
    per_worker = {"CPU": float(trainer.cpus_per_worker)}
    need = {"CPU": workers * trainer.cpus_per_worker}
    if use_gpu:
        per_worker["GPU"] = 1.0
        need["GPU"] = workers
    missing = [f"{amount:g} {name}s (it has {cluster.get(name, 0):g})" for name, amount in need.items()
               if cluster.get(name, 0) < amount]  # fmt: skip
    if missing:
        raise ConfigError(
            f"the Ray cluster is too small: trainer.nnodes={trainer.nnodes} x trainer.n_gpus_per_node="
            f"{trainer.n_gpus_per_node} workers need {' and '.join(missing)}; add nodes or lower the counts"
            + ("" if use_gpu else f" (or trainer.cpus_per_worker={trainer.cpus_per_worker})")
        )
    return workers, use_gpu, per_worker


def _train_worker(payload: dict[str, Any]) -> None:
    """One training process (runs inside a Ray Train worker)."""
    import ray.train

    from agentfly_train.train import run

    rank = ray.train.get_context().get_world_rank()
    run(payload["config"], show_progress=payload["show_progress"] and rank == 0)


class RayLauncher(Launcher):
    """Ray Train workers on the cluster at ``RAY_ADDRESS``, or this machine's (``auto``: when it is set)."""

    @classmethod
    def detected(cls) -> bool:
        """``RAY_ADDRESS`` is set."""
        return bool(os.environ.get("RAY_ADDRESS"))

    def launch(self, config: TrainConfig, show_progress: bool = True) -> RunResult:
        """Runs the training job on the Ray cluster and returns rank 0's result.

        Raises:
            ConfigError: Ray Train is not installed, the cluster cannot be reached or is too small.
            LaunchError: a worker failed (the message says how to resume).
        """
        return _launch(config, show_progress)


def _launch(config: TrainConfig, show_progress: bool) -> RunResult:
    from agentfly_train.run_dir import RESULT_FILE, RunResult

    ray = _connect()
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    workers, use_gpu, per_worker = worker_resources(config, ray.cluster_resources())
    local = dataclasses.replace(config, trainer=dataclasses.replace(config.trainer, launcher=LOCAL))
    trainer = TorchTrainer(
        _train_worker,
        train_loop_config={"config": local, "show_progress": show_progress},
        scaling_config=ScalingConfig(num_workers=workers, use_gpu=use_gpu, resources_per_worker=per_worker),
        run_config=RunConfig(
            name=f"{config.trainer.project_name}-{config.trainer.experiment_name}",
            failure_config=FailureConfig(max_failures=0),
        ),
    )
    try:
        trainer.fit()
    except Exception as error:  # Ray wraps a worker's failure (or death) in its own error types
        raise LaunchError(
            f"a training worker failed ({_root_cause(error)}); the run directory keeps the last checkpoint: rerun "
            "the same command (trainer.resume_mode=auto) to resume"
        ) from None
    # rank 0 wrote the result into the (shared) run directory
    return RunResult(**json.loads((Path(config.trainer.default_local_dir) / RESULT_FILE).read_text()))


def _root_cause(error: BaseException) -> str:
    """The worker's own exception line when Ray's error quotes its traceback, else the error on one line."""
    raised = [line.strip() for line in str(error).splitlines() if re.match(r"\s*[\w.]+(Error|Exception): ", line)]
    return raised[-1][:400] if raised else error_summary(error)
