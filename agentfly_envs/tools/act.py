"""``act``: the agent's command to an interactive world (see :mod:`agentfly_envs.worlds`); the world's answer
is the tool output.

Each env gets its own copy, which holds one session per world kind and reuses it across episodes. The task row
names the world (``row["world"]``, e.g. ``"textworld_express"`` or ``"textarena"``) and the game. Options, via the env's
``tool_options``::

    {"act": {"show_valid_actions": True}}   # list the commands the world accepts after each observation
    {"act": {"timeout_s": 10}}              # a simulator that takes longer to answer counts as crashed (default 60;
                                            # py4j tries a command twice, so a hang shows after about 2x this)

An empty or overlong command and a command after the task ended are ``Error:`` observations (``tool_error``); a
command the world does not understand is the world's own answer. A simulator that died or hung is not the agent's
doing: the tool raises :class:`~agentfly_envs.errors.InfrastructureError`, and the env ends the episode unscored.

``valid_actions``: the optional companion tool that lists the commands the world accepts now (on request, where
``show_valid_actions`` lists them after every observation); an env with it must have ``act`` too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentfly_envs.errors import InfrastructureError, TaskFormatError, WorldUnavailableError
from agentfly_envs.parsers import ToolCall
from agentfly_envs.tools.base import TOOLS, ToolError
from agentfly_envs.tools.world import WorldTool
from agentfly_envs.worlds import World, WorldCommandError, WorldCrashedError, WorldState, get_world

MAX_COMMAND_CHARS = 300
"""Longest command accepted, in characters."""


class ActTool(WorldTool):
    """The ``act`` tool of one env: a text world's :class:`~agentfly_envs.tools.world.WorldTool`.

    Args:
        show_valid_actions: Append the commands the world accepts now to every observation.
        timeout_s: Longest wait for one answer of the simulator, in seconds; a simulator that hangs longer is
            stopped, and the episode ends with an error observation.
    """

    def __init__(self, show_valid_actions: bool = False, timeout_s: float = 60.0) -> None:
        super().__init__(self.act, name="act")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.show_valid_actions = show_valid_actions
        self.timeout_s = timeout_s
        self._worlds: dict[str, World] = {}
        self._world: World | None = None
        self._state: WorldState | None = None
        self._crash: str | None = None

    def for_env(self, show_valid_actions: bool = False, timeout_s: float = 60.0) -> ActTool:
        """A copy for one env, with no world started yet."""
        return ActTool(show_valid_actions, timeout_s)

    def begin_episode(self, row: Mapping[str, Any]) -> None:
        """Starts the row's game (launching the world's simulator on first use).

        Raises:
            TaskFormatError: the row names no world, or a game the world does not know.
            WorldUnavailableError: the world cannot run here (package or Java missing, simulator will not start).
        """
        name = row.get("world")
        if not isinstance(name, str):
            raise TaskFormatError(f"the act tool needs rows naming a world (row['world']), got {row.get('world')!r}")
        if name not in self._worlds:
            self._worlds[name] = get_world(name)(timeout_s=self.timeout_s)
        self._world, self._state, self._crash = self._worlds[name], None, None
        try:
            self._state = self._world.start(row)
        except WorldCrashedError as e:
            raise WorldUnavailableError(str(e)) from None

    def introduction(self) -> str:
        """The goal and the first observation of the running game, for the user turn."""
        if self._world is None or self._state is None:
            raise RuntimeError("no game is running; the env calls begin_episode first")
        try:
            return f"Task: {self._world.task_description().strip()}\n\n{self._render(self._state)}"
        except WorldCrashedError as e:
            raise WorldUnavailableError(str(e)) from None

    def act(self, command: str) -> str:
        """Do one thing in the world, written as a short command like in a text adventure, or a puzzle move.

        Args:
            command: One action, e.g. "look around", "open fridge", "take coin", or a move in brackets, "[up]".

        Returns:
            What happens: the world's description of the result, or a line starting with "Error:".

        Raises:
            InfrastructureError: the world's simulator died or hung (this call or an earlier one of the episode).
        """
        self._check_playing()
        command = " ".join(command.split())
        if not command:
            raise ToolError('the command is empty; type one action, e.g. "look around"')
        if len(command) > MAX_COMMAND_CHARS:
            raise ToolError(f"the command is {len(command)} characters long; keep it under {MAX_COMMAND_CHARS}")
        try:
            self._state = self._world.step(command)
            return self._render(self._state)
        except WorldCommandError as e:
            raise ToolError(str(e)) from None
        except WorldCrashedError as e:
            raise InfrastructureError(self._crashed(e)) from None

    def list_valid_actions(self) -> str:
        """The commands the running game accepts now, sorted, comma-separated.

        Raises:
            ToolError: no game is running, it has ended, or its world does not list commands.
            InfrastructureError: its simulator died or hung.
        """
        self._check_playing()
        try:
            actions = self._world.valid_actions()
        except WorldCrashedError as e:
            raise InfrastructureError(self._crashed(e)) from None
        if not actions:
            raise ToolError("this world does not list its commands; the task description says how to write them")
        return ", ".join(sorted(actions))  # the worlds list them unordered

    def _check_playing(self) -> None:
        if self._crash is not None:
            raise InfrastructureError(self._crash)
        if self._world is None or self._state is None:
            raise ToolError("no game is running")
        if self._state.done:
            raise ToolError("the task has already ended; no more actions are needed")

    def _crashed(self, error: WorldCrashedError) -> str:
        self._crash = f"the world stopped working ({error}); this episode is over and the next one restarts it"
        return self._crash

    def report(self) -> dict[str, float]:
        """The running game's state: ``done``, ``success``, ``score`` (in [0, 1]), ``moves`` and ``world_error``
        (1 when the simulator died), the quantities world rewards score."""
        state, crashed = self._state, self._crash is not None
        if state is None:
            return {"done": float(crashed), "success": 0.0, "score": 0.0, "moves": 0.0, "world_error": float(crashed)}
        return {
            "done": float(state.done or crashed),
            "success": float(state.success),
            "score": state.score,
            "moves": float(state.moves),
            "world_error": float(crashed),
        }

    def gold_commands(self) -> list[str]:
        """Commands that solve the running game from its start.

        Raises:
            WorldUnavailableError: the simulator failed.
        """
        if self._world is None:
            return []
        try:
            return self._world.gold_commands()
        except WorldCrashedError as e:
            raise WorldUnavailableError(str(e)) from None

    def golden_calls(self) -> list[ToolCall]:
        """One ``act`` call per command of :meth:`gold_commands`."""
        return [ToolCall(self.name, {"command": command}) for command in self.gold_commands()]

    def close(self) -> None:
        """Stops the env's worlds' simulators."""
        for world in self._worlds.values():
            world.close()

    def _render(self, state: WorldState) -> str:
        parts = [state.observation]
        if state.success:
            parts.append("[The task is complete.]")
        elif state.failure:
            parts.append("[The task has failed.]")
        elif self.show_valid_actions and (actions := self._world.valid_actions()):
            parts.append("Valid actions: " + ", ".join(sorted(actions)))  # the worlds list them unordered
        return "\n\n".join(part for part in parts if part)


class ValidActionsTool(WorldTool):
    """The ``valid_actions`` tool of one env: lists the commands its ``act`` tool's world accepts now."""

    hosts_world = False
    needs = "the act tool: valid_actions lists the commands of the act tool's world"

    def __init__(self) -> None:
        super().__init__(self.valid_actions, name="valid_actions")
        self.act: ActTool | None = None

    def for_env(self) -> ValidActionsTool:
        """A copy for one env; the env attaches its ``act`` tool (see :meth:`attach`)."""
        return ValidActionsTool()

    def attach(self, world: WorldTool) -> None:
        """Lists the commands of ``world``'s world (an ``act`` tool's).

        Raises:
            ValueError: ``world`` is not an ``act`` tool.
        """
        if not isinstance(world, ActTool):
            raise ValueError(f"valid_actions lists the commands of the act tool's world, not of {world.name!r}'s")
        self.act = world

    def valid_actions(self) -> str:
        """List the commands the world accepts right now, e.g. to find how an object is called.

        Returns:
            The commands, comma-separated, or a line starting with "Error:".
        """
        if self.act is None:
            raise ToolError("no world is attached: the env needs the act tool too")
        return self.act.list_valid_actions()


TOOLS.add("act", ActTool())
TOOLS.add("valid_actions", ValidActionsTool())
