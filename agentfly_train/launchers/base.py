"""The launcher interface: how a training command becomes the processes that run it.

``trainer.launcher`` names a launcher in :data:`LAUNCHERS` (``local``: this process is the run, or one process of
an ``accelerate launch``; ``ray``: Ray Train workers on a cluster), or ``auto``: the first launcher that
:meth:`Launcher.detected` says its cluster is there, else ``local``. The command line asks the chosen launcher to
run the job and prints its :class:`LaunchError` in one line; it never knows which launcher it holds.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

from agentfly_envs.registry import Registry

if TYPE_CHECKING:
    from agentfly_train.config.schema import TrainConfig
    from agentfly_train.run_dir import RunResult

AUTO = "auto"
"""``trainer.launcher=auto``: a detected launcher, else :data:`LOCAL`."""
LOCAL = "local"
"""The launcher of a process that is the run itself (or one process of a launch)."""


class LaunchError(RuntimeError):
    """A launched run failed outside this process (e.g. a worker died); the message says how to resume."""


class Launcher(ABC):
    """Runs a training job somewhere.

    A new launcher subclasses this, implements :meth:`launch` (and :meth:`detected` if ``trainer.launcher=auto``
    should pick it), and registers itself with ``@LAUNCHERS.register(name)``; ``trainer.launcher=name`` then
    selects it.
    """

    @classmethod
    def detected(cls) -> bool:
        """Whether this machine's environment asks for this launcher under ``trainer.launcher=auto``."""
        return False

    @abstractmethod
    def launch(self, config: TrainConfig, show_progress: bool = True) -> RunResult:
        """Runs the job to the end and returns the result of its first process.

        Raises:
            ConfigError: the launcher cannot start the run (one line: what is missing).
            LaunchError: the run failed outside this process.
        """


LAUNCHERS: Registry[type[Launcher]] = Registry(
    "launcher", where="agentfly_train/launchers/", how="@LAUNCHERS.register(name) on the class"
)
"""Launchers by ``trainer.launcher`` name; ours are entry points, imported when chosen."""
LAUNCHERS.add_entry_point(LOCAL, "agentfly_train.launchers.local:LocalLauncher")
LAUNCHERS.add_entry_point("ray", "agentfly_train.launchers.ray_train:RayLauncher")


def launcher_for(config: TrainConfig) -> Launcher:
    """The launcher of ``config.trainer.launcher`` (``auto``: the first detected one, else ``local``). A process that
    is already one process of a launch (``WORLD_SIZE`` or ``LOCAL_RANK`` set, by Ray Train or ``accelerate
    launch``) runs its part itself: ``local``."""
    name = config.trainer.launcher
    if "WORLD_SIZE" in os.environ or "LOCAL_RANK" in os.environ:
        name = LOCAL
    elif name == AUTO:
        name = next((other for other, launcher in LAUNCHERS.items() if launcher.detected()), LOCAL)
    return LAUNCHERS.get(name)()
