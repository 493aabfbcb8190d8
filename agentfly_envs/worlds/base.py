"""The :class:`World` interface (an interactive text simulator) and the world registry.

A world runs one episode at a time: :meth:`World.start` sets up the game a task row names, :meth:`World.step`
plays one text command. The ``act`` tool drives it (see :mod:`agentfly_envs.tools.act`), so a world env is a
:class:`~agentfly_envs.core.ToolEnv` like any other: the task source lists the games, the tool is the world.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentfly_envs.errors import WorldUnavailableError
from agentfly_envs.registry import Registry


class WorldCommandError(Exception):
    """The simulator could not carry out one command but runs on; the agent sees the message."""


class WorldCrashedError(Exception):
    """The simulator itself failed (its process died, or it stopped answering); the episode cannot go on."""


@dataclass(frozen=True)
class WorldState:
    """What the world shows after a start or a command.

    Attributes:
        observation: The text the world answers with.
        score: The world's progress on the task, normalised to [0, 1].
        success: The task is solved.
        failure: The task can no longer be solved (e.g. an ingredient was burnt).
        moves: Commands played this episode.
    """

    observation: str
    score: float
    success: bool
    failure: bool
    moves: int

    @property
    def done(self) -> bool:
        """Whether the world has ended the episode (solved or failed)."""
        return self.success or self.failure


class World(ABC):
    """One simulator session, reused across episodes (one per env).

    Subclasses take ``timeout_s``: the longest wait for one answer of the simulator, in seconds, after which it
    counts as crashed.
    """

    @abstractmethod
    def start(self, row: Mapping[str, Any]) -> WorldState:
        """Starts the game the task row names, from its seed.

        Raises:
            TaskFormatError: the row names a game, split or parameter the world does not know.
            WorldCrashedError: the simulator failed and could not be restarted.
        """

    @abstractmethod
    def step(self, command: str) -> WorldState:
        """Plays one command (anything the agent typed; unknown commands are observations, not errors).

        Raises:
            WorldCommandError: the simulator failed on this command and runs on.
            WorldCrashedError: the simulator failed; the next :meth:`start` restarts it.
        """

    def valid_actions(self) -> tuple[str, ...]:
        """The commands the world accepts now, in no particular order (empty: the world does not list them).

        Raises:
            WorldCrashedError: the simulator failed.
        """
        return ()

    @abstractmethod
    def task_description(self) -> str:
        """The current game's goal, in words."""

    @abstractmethod
    def gold_commands(self) -> list[str]:
        """Commands that solve the current game from its start (the simulator's gold path).

        Raises:
            WorldCrashedError: the simulator failed.
        """

    @abstractmethod
    def close(self) -> None:
        """Stops the simulator (a later :meth:`start` launches it again)."""


WORLDS: Registry[type[World]] = Registry("world", where="agentfly_envs/worlds/")


def require_module(module: str, label: str, install_hint: str) -> None:
    """Checks that a world's package imports.

    Raises:
        WorldUnavailableError: it does not; the message names ``label`` and says what to install.
    """
    try:
        importlib.import_module(module)
    except ImportError:
        raise WorldUnavailableError(f"{label} is not installed: {install_hint}") from None


def get_world(name: str) -> type[World]:
    """Returns the registered world class ``name``; raises ``UnknownNameError`` with close matches."""
    return WORLDS.get(name)
