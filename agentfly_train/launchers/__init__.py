"""Launchers: how a training command becomes the processes that run it (``trainer.launcher``).

``local`` (:mod:`~agentfly_train.launchers.local`): this process, alone or as one process of an ``accelerate
launch``; ``ray`` (:mod:`~agentfly_train.launchers.ray_train`): Ray Train workers on a cluster. The choice is made
once, by :func:`launcher_for`; :data:`LAUNCHERS` names both by entry point, so importing this package imports
neither.
"""

from agentfly_train.launchers.base import AUTO, LAUNCHERS, Launcher, LaunchError, launcher_for

__all__ = ["AUTO", "LAUNCHERS", "LaunchError", "Launcher", "launcher_for"]
