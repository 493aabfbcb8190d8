"""``WorldTool``: a tool that acts on the env's interactive world (``act`` on a text world; ``click``, ``type``,
``press`` and ``scroll`` on a web page), and what the env asks of it.

An env's first world tool that runs a world (``hosts_world``) is its world: it starts the row's game on
:meth:`~agentfly_envs.tools.Tool.begin_episode`, writes the opening of the user turn (:meth:`WorldTool.introduction`),
shows the world after each turn (:meth:`WorldTool.observe`, and :meth:`WorldTool.screen` for screenshot
observations), reports its state for the world rewards (:meth:`WorldTool.report`) and plans golden episodes
(:meth:`WorldTool.golden_calls`). The env's other world tools are attached to it (:meth:`WorldTool.attach`) and act
on the same world.

Image observations: where the env's ``obs`` is ``"screenshot"`` the screen is an ``(H, W, 3)`` uint8 RGB array in the
observation, and a ``{"type": "image", "image": PIL.Image.Image}`` part of the chat message (see
:func:`image_part`), the multimodal message format that ``transformers`` processors' chat templates read.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from agentfly_envs.parsers import ToolCall
from agentfly_envs.tools.base import Tool

OBSERVATION_MODES = ("text", "screenshot")
"""The env's ``obs`` values: text only, or text and the world's screen as an image."""


class WorldTool(Tool):
    """A tool acting on an interactive world; see the module docstring for how the env uses it."""

    hosts_world: ClassVar[bool] = True
    """Whether the tool runs a world itself (else it acts on the world of the tool it is attached to)."""
    needs: ClassVar[str] = "a tool that runs a world"
    """What a tool that does not run a world needs beside it, for the error of an env without it."""

    @property
    def screen_shape(self) -> tuple[int, int, int] | None:
        """``(height, width, 3)`` of :meth:`screen`, or ``None`` for a world without a screen."""
        return None

    def attach(self, world: WorldTool) -> None:
        """Makes this tool act on ``world``'s world (the env's world tool).

        Raises:
            ValueError: the two tools cannot share a world.
        """
        raise ValueError(f"tools {self.name!r} and {world.name!r} play different worlds; an env has one world")

    def set_observation_mode(self, obs: str) -> None:
        """Sets how the agent sees the world: ``"text"`` or ``"screenshot"`` (:data:`OBSERVATION_MODES`).

        Raises:
            ValueError: the world cannot be seen that way.
        """
        if obs != "text":
            raise ValueError(f"obs={obs!r}: the world of tool {self.name!r} has no screen; use obs='text'")

    def introduction(self) -> str:
        """The running game's goal and first observation, for the user turn."""
        raise NotImplementedError(f"tool {self.name!r} does not run a world")

    def observe(self) -> str:
        """The world as the agent sees it after a turn, appended to the turn's observation ("" when the tool's
        outputs already show it)."""
        return ""

    def screen(self) -> np.ndarray:
        """The world's screen now: :attr:`screen_shape` uint8 RGB."""
        raise NotImplementedError(f"tool {self.name!r} has no screen")

    def report(self) -> dict[str, float]:
        """The running game's state: ``done``, ``success``, ``score`` (in [0, 1]), ``moves``, ``world_error``."""
        raise NotImplementedError(f"tool {self.name!r} does not run a world")

    def golden_calls(self) -> list[ToolCall]:
        """Calls that solve the running game from its start.

        Raises:
            AgentflyError: the game has no golden episode.
            WorldUnavailableError: the world's simulator failed.
        """
        raise NotImplementedError(f"tool {self.name!r} does not run a world")


def image_part(screen: np.ndarray) -> dict[str, Any]:
    """A chat-message content part holding ``screen`` (``(H, W, 3)`` uint8 RGB) as a PIL image.

    Example:
        >>> part = image_part(np.zeros((4, 2, 3), dtype=np.uint8))
        >>> part["type"], part["image"].size
        ('image', (2, 4))
    """
    from PIL import Image  # the web extra brings Pillow; text worlds never get here

    return {"type": "image", "image": Image.fromarray(screen, mode="RGB")}


def message_text(content: str | list[dict[str, Any]] | None) -> str:
    """The text of a message's content: the string, or the text parts of a multimodal content joined by blank lines.

    Example:
        >>> message_text([{"type": "image", "image": None}, {"type": "text", "text": "Clicked."}])
        'Clicked.'
    """
    if content is None or isinstance(content, str):
        return content or ""
    return "\n\n".join(part["text"] for part in content if part.get("type") == "text")
