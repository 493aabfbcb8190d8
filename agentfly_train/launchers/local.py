"""The local launcher: this process runs the job (alone, or as one process of an ``accelerate launch``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentfly_train.launchers.base import Launcher

if TYPE_CHECKING:
    from agentfly_train.config.schema import TrainConfig
    from agentfly_train.run_dir import RunResult


class LocalLauncher(Launcher):
    """Runs the job in this process (:func:`agentfly_train.train.run`)."""

    def launch(self, config: TrainConfig, show_progress: bool = True) -> RunResult:
        """See :meth:`Launcher.launch`."""
        from agentfly_train.train import run

        return run(config, show_progress=show_progress)
