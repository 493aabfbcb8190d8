"""Interactive worlds: text simulators an agent plays through the ``act`` tool (``textworld_express``,
``textarena``)."""

from agentfly_envs.worlds import text_arena, textworld_express  # noqa: F401  (registers them)
from agentfly_envs.worlds.base import WORLDS, World, WorldCommandError, WorldCrashedError, WorldState, get_world

__all__ = ["WORLDS", "World", "WorldCommandError", "WorldCrashedError", "WorldState", "get_world"]
