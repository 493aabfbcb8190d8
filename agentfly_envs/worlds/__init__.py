"""Interactive worlds: text simulators an agent plays through the ``act`` tool (``textworld_express``)."""

from agentfly_envs.worlds import textworld_express  # noqa: F401  (registers it)
from agentfly_envs.worlds.base import WORLDS, World, WorldCommandError, WorldCrashedError, WorldState, get_world

__all__ = ["WORLDS", "World", "WorldCommandError", "WorldCrashedError", "WorldState", "get_world"]
