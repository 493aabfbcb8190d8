"""``click``, ``type``, ``press``, ``scroll``: the agent's hands on a web page (MiniWoB++, see
:mod:`agentfly_envs.worlds.miniwob`).

The four tools of one env share one browser: the first is the env's world (it starts the row's page each episode),
the others are attached to it. How they name what they act on depends on the env's ``obs``:

- ``obs="text"``: by the element ids of the page listing, ``click(element=9)``, ``type(text="Myron", element=5)``
  (``element`` left out: into the focused element), ``scroll(direction="down", element=4)``;
- ``obs="screenshot"``: by coordinates on the screenshot (CSS pixels, origin top left, x to the right, y down),
  ``click(x=40, y=137)``, ``type(text="Myron")`` (into the focused element: click it first),
  ``scroll(direction="down", x=80, y=120)``.

``press(key="Enter")`` takes a character, a named key (Enter, Tab, Backspace, Escape, ArrowDown, ...) or a combination
(``ctrl+a``). Each call answers with what it did; after the turn the observation shows the page (the listing, or
the screenshot), or that the task ended. An element that does not exist, a point off the screen, an unknown key,
empty or overlong text and an action after the task ended are ``Error:`` observations. A browser that died is not the
agent's doing: the tools raise :class:`~agentfly_envs.errors.InfrastructureError`, and the env ends the episode
unscored.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agentfly_envs.errors import AgentflyError, InfrastructureError, TaskFormatError, WorldUnavailableError
from agentfly_envs.parsers import ToolCall
from agentfly_envs.tools.base import TOOLS, ToolError
from agentfly_envs.tools.world import WorldTool

MAX_GOLDEN_SCROLLS = 20
"""Scrolls a golden episode in screenshot mode may take to bring one element into view."""
GOLDEN_MARGIN = 20
"""A golden episode clicks an element only when its centre is this many pixels inside the screen (a list's frame
may cover the screen's edge)."""


@dataclass
class _Session:
    """The browser the four tools of one env share, and the episode it plays."""

    screenshots: bool = False
    browser: Any = None  # a MiniWoBBrowser, made on the first episode
    row: dict[str, Any] = field(default_factory=dict)
    crash: str | None = None

    def start(self) -> None:
        from agentfly_envs.worlds.miniwob import MiniWoBBrowser

        if self.browser is None:
            self.browser = MiniWoBBrowser(screenshots=self.screenshots)
        row, self.crash = self.row, None
        time_limit = row.get("time_limit_s")
        data_mode = "test" if row.get("split") == "test" else "train"
        try:
            self.browser.start(str(row["game"]), int(row["seed"]), data_mode, time_limit)
        except (TaskFormatError, WorldUnavailableError):
            raise
        except Exception as e:  # Selenium's: the browser died; the next start launches a new one
            self.browser.close()
            raise WorldUnavailableError(f"the browser failed to start the page: {type(e).__name__}: {e}") from None


class BrowserTool(WorldTool):
    """One of ``click``, ``type``, ``press``, ``scroll`` for one env.

    Args:
        kind: Which of the four.
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._functions: dict[str, Callable[..., str]] = {
            "click": {"text": self.click, "screenshot": self.click_at},
            "type": {"text": self.type, "screenshot": self.type_here},
            "press": {"text": self.press, "screenshot": self.press},
            "scroll": {"text": self.scroll, "screenshot": self.scroll_at},
        }[kind]
        super().__init__(self._functions["text"], name=kind)
        self.session = _Session()
        self._hosts = True  # until attached to another web tool

    def for_env(self) -> BrowserTool:
        """A copy for one env, with its own browser (started on the first episode) until attached to another."""
        return BrowserTool(self.kind)

    @property
    def screen_shape(self) -> tuple[int, int, int]:
        from agentfly_envs.worlds.miniwob import SCREEN_HEIGHT, SCREEN_WIDTH

        return (SCREEN_HEIGHT, SCREEN_WIDTH, 3)

    def attach(self, world: WorldTool) -> None:
        """Acts on ``world``'s browser (another web tool's).

        Raises:
            ValueError: ``world`` is not a web tool.
        """
        if not isinstance(world, BrowserTool):
            super().attach(world)
        self.session, self._hosts = world.session, False

    def set_observation_mode(self, obs: str) -> None:
        """Names elements by id (``"text"``) or by coordinates on the screenshot (``"screenshot"``)."""
        self.function = self._functions[obs]
        self.session.screenshots = obs == "screenshot"
        self.__dict__.pop("schema", None)  # the schema follows the function

    @property
    def _by_point(self) -> bool:
        return self.session.screenshots

    # --- the episode ------------------------------------------------------------------------------

    def begin_episode(self, row: Mapping[str, Any]) -> None:
        """Opens the row's page (``game``, ``seed``, ``split``, ``time_limit_s``) in the browser, launching it on
        first use; only the env's world tool does, the attached ones share its page.

        Raises:
            TaskFormatError: the row names no MiniWoB page, or one that is not offered.
            WorldUnavailableError: the browser cannot run here (the web extra or Chromium missing).
        """
        if row.get("world") != "miniwob":
            raise TaskFormatError(
                f"the web tools play MiniWoB rows (row['world'] == 'miniwob'), got {dict(row)!r:.200}"
            )
        if self._hosts:
            self.session.row = dict(row)
            self.session.start()

    def introduction(self) -> str:
        page = self._browser().page
        return f"Task: {page.utterance}\n\n{self._view()}"

    def observe(self) -> str:
        return self._view()

    def _view(self) -> str:
        from agentfly_envs.worlds.miniwob import page_listing

        if self.session.crash is not None:
            return ""
        page = self._browser().page
        if page.done:
            solved = page.raw_reward >= 1.0
            reason = f" ({page.reason})" if page.reason and not solved else ""
            return "[The task is complete.]" if solved else f"[The task has failed{reason}.]"
        if self._by_point:
            return "The screen is shown above."
        return "Page:\n" + page_listing(page)

    def screen(self) -> np.ndarray:
        if self.session.crash is not None:  # the step that found the browser dead still shows a screen
            return np.zeros(self.screen_shape, dtype=np.uint8)
        return self._browser().screen()

    def report(self) -> dict[str, float]:
        browser, crashed = self.session.browser, self.session.crash is not None
        if browser is None or not browser.running:
            return {"done": float(crashed), "success": 0.0, "score": 0.0, "moves": 0.0, "world_error": float(crashed)}
        page = browser.page
        return {
            "done": float(page.done or crashed),
            "success": float(page.done and page.raw_reward >= 1.0),
            "score": max(page.reward, 0.0) if page.done else 0.0,
            "moves": float(browser.moves),
            "world_error": float(crashed),
        }

    def close(self) -> None:
        """Quits the browser (once, whichever of the env's web tools is closed first)."""
        if self.session.browser is not None:
            self.session.browser.close()

    def _browser(self) -> Any:
        if self.session.crash is not None:
            raise InfrastructureError(self.session.crash)
        if self.session.browser is None or not self.session.browser.running:
            raise ToolError("no page is open")
        return self.session.browser

    # --- acting -----------------------------------------------------------------------------------

    def _act(self, kind: str, ref: int | None = None, point: tuple[float, float] | None = None, text: str = "") -> Any:
        from selenium.common.exceptions import WebDriverException
        from urllib3.exceptions import HTTPError

        from agentfly_envs.worlds.miniwob import BrowserAction, WebActionError

        browser = self._browser()
        try:
            return browser.act(BrowserAction(kind, ref=ref, point=point, text=text))
        except WebActionError as e:
            raise ToolError(str(e)) from None
        except (WebDriverException, HTTPError) as e:  # Chromium died (or hung), or its chromedriver did
            self.session.crash = f"the browser stopped working ({type(e).__name__}); this episode is over"
            browser.close()
            raise InfrastructureError(self.session.crash) from None

    def _element_name(self, ref: int) -> str:
        """How the page listing names element ``ref`` (e.g. ``[9] button "Yes"``)."""
        from agentfly_envs.worlds.miniwob import WebActionError, describe

        page = self._browser().page
        try:
            return describe(page.element(ref), page.options.get(ref)) if not page.done else f"[{ref}]"
        except WebActionError as e:
            raise ToolError(str(e)) from None

    def click(self, element: int) -> str:
        """Click an element of the page.

        Args:
            element: The element's id, the number in brackets in the page listing, e.g. 9 for [9] button "Yes".

        Returns:
            What was clicked, or a line starting with "Error:".
        """
        name = self._element_name(element)
        self._act("click", ref=element)
        return f"Clicked {name}."

    def click_at(self, x: int, y: int) -> str:
        """Click a point of the screen.

        Args:
            x: Pixels from the screenshot's left edge.
            y: Pixels from the screenshot's top edge.

        Returns:
            What was done, or a line starting with "Error:".
        """
        self._act("click", point=(x, y))
        return f"Clicked at ({x}, {y})."

    def type(self, text: str, element: int | None = None) -> str:
        """Type text into a text field or list (the keys are sent one by one, as a person types).

        Args:
            text: What to type, at most 64 characters.
            element: The id of the field to type into (it is clicked first); leave out to type into the focused one.

        Returns:
            What was done, or a line starting with "Error:".
        """
        self._act("type", ref=element, text=text)
        return f"Typed {text!r}" + (f" into [{element}]." if element is not None else ".")

    def type_here(self, text: str) -> str:
        """Type text into the focused text field or list (click it first).

        Args:
            text: What to type, at most 64 characters.

        Returns:
            What was done, or a line starting with "Error:".
        """
        self._act("type", text=text)
        return f"Typed {text!r}."

    def press(self, key: str) -> str:
        """Press a key or a key combination.

        Args:
            key: One character, a named key (Enter, Tab, Backspace, Escape, ArrowDown, ...) or a combination such
                as ctrl+a.

        Returns:
            What was done, or a line starting with "Error:".
        """
        self._act("press", text=key)
        return f"Pressed {key}."

    def scroll(self, direction: str, element: int | None = None) -> str:
        """Scroll the page, or the scrollable element under an element, by about 50 pixels.

        Args:
            direction: "up" or "down".
            element: The id of an element inside what should scroll; leave out for the middle of the screen.

        Returns:
            What was done, or a line starting with "Error:".
        """
        self._act("scroll", ref=element, text=direction)
        return f"Scrolled {direction}."

    def scroll_at(self, direction: str, x: int, y: int) -> str:
        """Scroll what is under a point of the screen by about 50 pixels.

        Args:
            direction: "up" or "down".
            x: Pixels from the screenshot's left edge.
            y: Pixels from the screenshot's top edge.

        Returns:
            What was done, or a line starting with "Error:".
        """
        self._act("scroll", point=(x, y), text=direction)
        return f"Scrolled {direction} at ({x}, {y})."

    # --- golden episodes --------------------------------------------------------------------------

    def golden_calls(self) -> list[ToolCall]:
        """Calls that solve the open page: its task's scripted solver plays it here, then the page starts again
        from its seed, so the calls replay the same episode.

        Raises:
            AgentflyError: the episode has already moved (plan from its start, right after ``reset``), or the
                solver failed.
        """
        from agentfly_envs.worlds.miniwob_solvers import SOLVERS

        browser = self._browser()
        if browser.moves or browser.page.done:
            raise AgentflyError("a web page's golden calls are planned from its start: call them right after reset()")
        calls: list[ToolCall] = []
        try:
            for action in SOLVERS[str(self.session.row["game"])](lambda: browser.page):
                for call, step in self._golden_steps(action):
                    calls.append(call)
                    browser.act(step)
            if not (browser.page.done and browser.page.raw_reward >= 1.0):
                raise AgentflyError(f"the solver did not solve {self.session.row!r}: {browser.page.reason}")
        finally:
            self.session.start()
        return calls

    def _golden_steps(self, action: Any) -> Iterator[tuple[ToolCall, Any]]:
        """The calls (and browser actions) that carry out one solver action in this observation mode."""
        from agentfly_envs.worlds.miniwob import BrowserAction

        if not self._by_point:
            arguments = {"element": action.ref} if action.ref is not None else {}
            if action.kind in ("type", "press", "scroll"):
                arguments[{"type": "text", "press": "key", "scroll": "direction"}[action.kind]] = action.text
            yield ToolCall(action.kind, arguments), action
            return
        if action.ref is None:
            yield ToolCall(action.kind, {"key" if action.kind == "press" else "text": action.text}), action
            return
        x, y = yield from self._scroll_into_view(action.ref)
        if action.kind == "type":
            yield ToolCall("click", {"x": x, "y": y}), BrowserAction("click", point=(x, y))
            yield ToolCall("type", {"text": action.text}), BrowserAction("type", text=action.text)
        else:
            yield ToolCall("click", {"x": x, "y": y}), BrowserAction("click", point=(x, y))

    def _scroll_into_view(self, ref: int) -> Iterator[tuple[ToolCall, Any]]:
        from agentfly_envs.worlds.miniwob import SCREEN_HEIGHT, SCREEN_WIDTH, BrowserAction, on_screen

        x, y = self._browser().page.element(ref).center
        for _ in range(MAX_GOLDEN_SCROLLS):
            if on_screen((x, y - GOLDEN_MARGIN)) and on_screen((x, y + GOLDEN_MARGIN)):
                return x, y
            direction = "down" if y + GOLDEN_MARGIN >= SCREEN_HEIGHT else "up"
            at = (SCREEN_WIDTH // 2, SCREEN_HEIGHT // 2)
            yield (
                ToolCall("scroll", {"direction": direction, "x": at[0], "y": at[1]}),
                BrowserAction("scroll", point=at, text=direction),
            )
            x, y = self._browser().page.element(ref).center
        raise AgentflyError(f"element [{ref}] stayed off the screen after {MAX_GOLDEN_SCROLLS} scrolls")


for _kind in ("click", "type", "press", "scroll"):
    TOOLS.add(_kind, BrowserTool(_kind))
