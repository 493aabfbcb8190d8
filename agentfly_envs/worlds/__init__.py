"""Interactive worlds: text simulators an agent plays through the ``act`` tool (``textworld_express``,
``scienceworld``, ``textarena``, and ``maze``, generated here)."""

from agentfly_envs.worlds import maze, science_world, text_arena, textworld_express  # noqa: F401  (registers them)
from agentfly_envs.worlds.base import WORLDS, World, WorldCommandError, WorldCrashedError, WorldState, get_world

__all__ = ["WORLDS", "World", "WorldCommandError", "WorldCrashedError", "WorldState", "get_world"]
