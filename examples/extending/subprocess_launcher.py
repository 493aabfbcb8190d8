"""A new launcher: the run in a child process of its own (a fresh interpreter, e.g. for its own environment)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

from omegaconf import OmegaConf

from agentfly_train.config import TrainConfig
from agentfly_train.launchers import LAUNCHERS, Launcher, LaunchError
from agentfly_train.run_dir import RESULT_FILE, RunResult


@LAUNCHERS.register("subprocess")
class SubprocessLauncher(Launcher):
    """``python -m agentfly_train`` in a child process, on the same configuration with ``trainer.launcher=local``."""

    def launch(self, config: TrainConfig, show_progress: bool = True) -> RunResult:
        run_dir = Path(config.trainer.default_local_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        local = dataclasses.replace(config, trainer=dataclasses.replace(config.trainer, launcher="local"))
        path = run_dir / "launch.yaml"
        OmegaConf.save(OmegaConf.create(dataclasses.asdict(local)), path)
        command = [sys.executable, "-m", "agentfly_train", "--config", str(path)]
        status = subprocess.run(command if show_progress else [*command, "--no-progress"]).returncode
        if status != 0:
            raise LaunchError(f"the run's process exited with status {status}; rerun the same command to resume")
        return RunResult(**json.loads((run_dir / RESULT_FILE).read_text()))
