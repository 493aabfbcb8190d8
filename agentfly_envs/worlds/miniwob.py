"""MiniWoB++ (Farama's ``miniwob`` 1.1): small web tasks (click a button, fill a form, reply to an email) as local
HTML pages in headless Chromium, driven through Selenium.

One :class:`MiniWoBBrowser` is one Chromium (with its chromedriver), started on first use and reused across
episodes and tasks: a new task is a page load in the same browser, a new episode MiniWoB's own reset, seeded so
that one ``(task, seed)`` is one page. Episodes run through ``miniwob``'s own Gymnasium env
(``miniwob.environment.MiniWoBEnvironment``), so actions, rewards and time-outs are MiniWoB's.

The page is seen in one of two ways:

- :func:`page_listing`: the page's elements, one per line, each with MiniWoB's ``ref`` as its id (stable for the
  episode: an element keeps its id while it exists), e.g. ``[9] button "Yes"``; text without an id is not
  clickable.
- :meth:`MiniWoBBrowser.screen`: the task area as rendered (``SCREEN_HEIGHT`` x ``SCREEN_WIDTH`` RGB pixels,
  CSS pixels, origin at the top left).

Rewards: MiniWoB's raw reward (1 solved, -1 failed or timed out, some tasks give partial credit) and its
time-decayed reward, raw x max(0, 1 - elapsed / time limit). MiniWoB's time limit (10 s for most tasks, 30 s for
email-inbox) is meant for fast scripted agents; ``time_limit_s`` sets another per episode.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import shutil
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from agentfly_envs.errors import TaskFormatError, WorldUnavailableError

INSTALL_HINT = "pip install 'agentfly-rl[web]' (the miniwob package)"
TASKS: dict[str, str] = {
    "ClickButton": "click-button",
    "ClickLink": "click-link",
    "ClickCheckboxes": "click-checkboxes",
    "EnterText": "enter-text",
    "FocusText": "focus-text",
    "ChooseList": "choose-list",
    "LoginUser": "login-user",
    "ClickTab": "click-tab",
    "UseAutocomplete": "use-autocomplete",
    "EmailInbox": "email-inbox",
}
"""``agentfly/MiniWoB-<name>`` -> the MiniWoB task it plays, easiest first: one click (button, link), several
clicks (checkboxes), typing (enter-text), focus, a drop-down list, a form of two fields, tabs (the target appears
after a click), an autocomplete menu, and an inbox with four kinds of request (reply, forward, delete, star)."""
SCREEN_WIDTH, SCREEN_HEIGHT = 160, 210
"""Size of MiniWoB's task area, in CSS pixels: the screenshot's size and the coordinates' range."""
MAX_TYPED_CHARS = 64
"""Longest text one ``type`` action sends (MiniWoB's limit)."""
SCROLL_DIRECTIONS = ("up", "down")
SETTLE_S = {"type": 0.35, "scroll": 0.3}
"""Wait after an action of these kinds before the page is read, in seconds: pages react to typing after a delay
(MiniWoB's autocomplete opens its menu 300 ms after the last key) and scrolling is animated, and the agent should see
where things end up."""
_SCAFFOLDING_IDS = {"wrap", "area"}  # MiniWoB's own frame around every task
_INTERACTIVE = ("input", "button", "a", "select", "textarea", "option", "label")
_KEY_NAMES = {
    "enter": "<Enter>",
    "return": "<Enter>",
    "tab": "<Tab>",
    "space": "<Space>",
    "backspace": "<Backspace>",
    "delete": "<Delete>",
    "escape": "<Escape>",
    "esc": "<Escape>",
    "up": "<ArrowUp>",
    "down": "<ArrowDown>",
    "left": "<ArrowLeft>",
    "right": "<ArrowRight>",
    "arrowup": "<ArrowUp>",
    "arrowdown": "<ArrowDown>",
    "arrowleft": "<ArrowLeft>",
    "arrowright": "<ArrowRight>",
    "pageup": "<PageUp>",
    "pagedown": "<PageDown>",
    "home": "<Home>",
    "end": "<End>",
}
_MODIFIERS = {"ctrl": "C-", "control": "C-", "shift": "S-", "alt": "A-", "meta": "M-", "cmd": "M-"}


class WebActionError(Exception):
    """An action the page cannot carry out (no such element, a point off the screen, an unknown key); the agent
    sees the message."""


def require_miniwob() -> None:
    """Checks that ``miniwob`` imports and that Chromium and chromedriver are on ``PATH``.

    Raises:
        WorldUnavailableError: one is missing; the message says what to install.
    """
    try:
        importlib.import_module("miniwob")
    except ImportError:
        raise WorldUnavailableError(f"MiniWoB needs the web extra: {INSTALL_HINT}") from None
    if _chromium_paths() is None:
        raise WorldUnavailableError(
            "MiniWoB needs Chromium and chromedriver on PATH (Debian: apt-get install chromium chromium-driver)"
        )


def _chromium_paths() -> tuple[str, str] | None:
    binary = os.environ.get("MINIWOB_CHROME_BINARY") or shutil.which("chromium") or shutil.which("chromium-browser")
    driver = os.environ.get("MINIWOB_CHROMEDRIVER") or shutil.which("chromedriver")
    return (binary, driver) if binary and driver else None


def check_task(task: str) -> None:
    """Raises ``TaskFormatError`` naming the offered tasks when ``task`` is not one of :data:`TASKS`."""
    if task not in TASKS.values():
        raise TaskFormatError(f"unknown MiniWoB task {task!r}; choose one of {sorted(TASKS.values())}")


def key_code(key: str) -> str:
    """A key as the agent names it -> MiniWoB's key syntax (``C-`` etc. for modifiers, ``<Enter>`` for named keys).

    Raises:
        WebActionError: not a key (or combination) MiniWoB can press.

    Example:
        >>> key_code("Enter"), key_code("ctrl+a"), key_code("<Tab>"), key_code("x")
        ('<Enter>', 'C-a', '<Tab>', 'x')
    """
    parts = [part for part in key.replace(" ", "+").split("+") if part] if len(key) > 1 else [key]
    *modifiers, name = parts or [""]
    code = "".join(_MODIFIERS.get(m.lower(), "?") for m in modifiers)
    code += _KEY_NAMES.get(name.lower(), name) if len(name) > 1 else name
    if code not in _allowed_keys():
        raise WebActionError(
            f"cannot press {key[:40]!r}; press one character, a named key (Enter, Tab, Backspace, Escape, ArrowDown, "
            "...) or a combination such as ctrl+a"
        )
    return code


@functools.cache
def _allowed_keys() -> frozenset[str]:
    from miniwob.constants import ALL_POSSIBLE_KEYS

    return frozenset(ALL_POSSIBLE_KEYS)


@dataclass(frozen=True)
class Element:
    """One element of the page, as MiniWoB reports it.

    Attributes:
        ref: MiniWoB's id (positive: an element, clickable; negative: a piece of text).
        parent: The parent's ``ref`` (0 for the page's root).
        tag: Lower-case tag; inputs carry their type (``input_text``, ``input_checkbox``); ``t`` is text.
        text: The element's own text (leaves only).
        value: An input's value (``True``/``False`` for checkboxes and radio buttons).
        id: The HTML id.
        classes: The HTML classes, space-separated.
        box: ``(left, top, width, height)`` in CSS pixels from the task area's top left.
        focused: Whether it has the keyboard focus.
    """

    ref: int
    parent: int
    tag: str
    text: str
    value: Any
    id: str
    classes: str
    box: tuple[float, float, float, float]
    focused: bool

    @property
    def center(self) -> tuple[int, int]:
        """The element's centre, in whole CSS pixels."""
        left, top, width, height = self.box
        return int(left + width / 2), int(top + height / 2)


@dataclass
class Page:
    """What MiniWoB shows after a reset or an action.

    Attributes:
        utterance: The task's instruction.
        fields: The instruction's parts MiniWoB extracts (e.g. ``{"target": "Yes"}``).
        elements: The visible elements, in document order.
        options: ``ref`` of each drop-down list -> its options' texts.
        done: Whether the episode has ended (solved, failed or timed out).
        raw_reward: MiniWoB's reward without time decay (0 until the end).
        reward: MiniWoB's time-decayed reward (0 until the end).
        reason: MiniWoB's reason for the reward, when it gives one.
    """

    utterance: str
    fields: dict[str, str]
    elements: list[Element] = field(default_factory=list)
    options: dict[int, list[str]] = field(default_factory=dict)
    done: bool = False
    raw_reward: float = 0.0
    reward: float = 0.0
    reason: str = ""

    def element(self, ref: int) -> Element:
        """The clickable element with id ``ref``.

        Raises:
            WebActionError: the page has no such element (the message lists a few that exist).
        """
        for element in self.elements:
            if element.ref == ref and ref > 0:
                return element
        known = ", ".join(str(e.ref) for e in self.elements if e.ref > 0)
        raise WebActionError(f"the page has no element [{ref}]; its elements are [{known}]")


def page_listing(page: Page) -> str:
    """The page as a compact, accessibility-style listing: one line per element worth naming, indented under its
    named ancestors; ``[id]`` marks what can be clicked or typed into.

    Example:
        >>> e = lambda ref, tag, text="", value=None, **kw: Element(ref, kw.get("parent", 3), tag, text, value,
        ...     kw.get("id", ""), kw.get("classes", ""), (0, 0, 10, 10), kw.get("focused", False))
        >>> page = Page("Click on the \\"Yes\\" button.", {}, [e(3, "div", id="area"), e(4, "div", "nullam neque"),
        ...     e(5, "input_text", value="hi", focused=True), e(6, "button", "Yes"), e(7, "input_checkbox", value=True),
        ...     e(-1, "t", "a label", parent=7), e(8, "span", classes="trash")])
        >>> print(page_listing(page))
        [4] div "nullam neque"
        [5] textbox value="hi" focused
        [6] button "Yes"
        [7] checkbox checked
          text "a label"
        [8] span.trash
    """
    named = {element.ref for element in page.elements if _worth_naming(element)}
    depth: dict[int, int] = {}
    lines = []
    for element in page.elements:
        level = depth.get(element.parent, -1) + (element.ref in named)
        depth[element.ref] = level
        if element.ref in named:
            lines.append("  " * max(level, 0) + describe(element, page.options.get(element.ref)))
    return "\n".join(lines)


def _worth_naming(element: Element) -> bool:
    if element.id in _SCAFFOLDING_IDS or element.tag == "body" or min(element.box[2:]) <= 1:
        return False  # MiniWoB's frame, and what only screen readers get (1 px)
    return bool(element.text or element.tag.startswith(_INTERACTIVE) or (element.tag != "t" and _leaf_like(element)))


def _leaf_like(element: Element) -> bool:
    return bool(element.id or element.classes) and element.box[2] * element.box[3] <= 40 * 40


_ROLES = {
    "input_text": "textbox",
    "input_password": "password",
    "input_checkbox": "checkbox",
    "input_radio": "radio",
    "input_submit": "button",
    "input_button": "button",
    "a": "link",
    "textarea": "textarea",
    "select": "list",
}


def describe(element: Element, options: list[str] | None = None) -> str:
    """One element's line of :func:`page_listing` (unindented); ``options`` are a drop-down list's."""
    if element.tag == "t":
        return f"text {_quoted(element.text)}"
    role = _ROLES.get(element.tag)
    if role is None:  # a generic tag: its id or first class says what it is (``div.email-sender``, ``span.trash``)
        role = element.tag + (f"#{element.id}" if element.id else "")
        role += "." + element.classes.split()[0] if element.classes and not element.id else ""
    parts = [f"[{element.ref}] {role}"]
    if element.text:
        parts.append(_quoted(element.text))
    if isinstance(element.value, bool):
        parts.append("checked" if element.value else "unchecked")
    elif element.value not in (None, ""):
        parts.append(f"value={_quoted(str(element.value))}")
    if options is not None:
        parts.append("options: " + " | ".join(options))
    if element.focused:
        parts.append("focused")
    return " ".join(parts)


def _quoted(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return '"' + (text if len(text) <= limit else text[:limit] + "...") + '"'


def _element(raw: Mapping[str, Any]) -> Element:
    left, top, width, height = (float(raw[key][0]) for key in ("left", "top", "width", "height"))
    return Element(
        ref=int(raw["ref"]),
        parent=int(raw["parent"]),
        tag=str(raw["tag"]),
        text=str(raw["text"]),
        value=_value(raw),
        id=str(raw["id"]),
        classes=str(raw["classes"]),
        box=(left, top, width, height),
        focused=bool(raw["flags"][0]),
    )


def _value(raw: Mapping[str, Any]) -> Any:
    value = str(raw["value"])
    if raw["tag"] in ("input_checkbox", "input_radio"):
        return value == "True"
    return value


def on_screen(point: tuple[float, float]) -> bool:
    """Whether ``(x, y)`` (CSS pixels) lies in the task area."""
    return 0 <= point[0] < SCREEN_WIDTH and 0 <= point[1] < SCREEN_HEIGHT


@dataclass(frozen=True)
class BrowserAction:
    """One MiniWoB action, in terms of the page.

    Attributes:
        kind: ``click``, ``type``, ``press`` or ``scroll``.
        ref: The element acted on (``click``; ``type`` focuses it first; ``scroll`` scrolls at its centre).
        point: ``(x, y)`` in CSS pixels, for actions by coordinates.
        text: What ``type`` types, or the key ``press`` presses, or the direction ``scroll`` scrolls.
    """

    kind: str
    ref: int | None = None
    point: tuple[float, float] | None = None
    text: str = ""


class MiniWoBBrowser:
    """One headless Chromium playing MiniWoB tasks, one episode at a time.

    Args:
        screenshots: Take a screenshot after every action (screenshot observations); off, the screen is taken
            only when :meth:`screen` is called.
        timeout_s: Longest wait for the browser to start, in seconds.
    """

    def __init__(self, screenshots: bool = False, timeout_s: float = 60.0) -> None:
        self.screenshots = screenshots
        self.timeout_s = timeout_s
        self._env: Any = None
        self._task: str | None = None
        self._page: Page | None = None
        self._screen: np.ndarray | None = None
        self._fields: dict[str, str] = {}
        self._finalizer: weakref.finalize | None = None
        self.moves = 0

    # --- lifetime -------------------------------------------------------------------------------

    def _start_browser(self, task: str) -> None:
        require_miniwob()
        from miniwob.action import ActionSpaceConfig, ActionTypes
        from miniwob.constants import ALL_POSSIBLE_KEYS
        from miniwob.environment import MiniWoBEnvironment

        binary, driver = _chromium_paths()  # checked by require_miniwob
        os.environ.setdefault("MINIWOB_CHROME_BINARY", binary)  # miniwob reads them; without them Selenium
        os.environ.setdefault("MINIWOB_CHROMEDRIVER", driver)  # Manager tries to download a browser
        config = ActionSpaceConfig(
            action_types=[
                ActionTypes.CLICK_ELEMENT,
                ActionTypes.CLICK_COORDS,
                ActionTypes.FOCUS_ELEMENT_AND_TYPE_TEXT,
                ActionTypes.TYPE_TEXT,
                ActionTypes.PRESS_KEY,
                ActionTypes.SCROLL_UP_COORDS,
                ActionTypes.SCROLL_DOWN_COORDS,
            ],
            allowed_keys=ALL_POSSIBLE_KEYS,
        )
        try:
            self._env = MiniWoBEnvironment(subdomain=task, action_space_config=config)
        except Exception as e:  # Selenium's errors: no browser, a driver of another version, a crash at start
            raise WorldUnavailableError(f"Chromium did not start for MiniWoB: {type(e).__name__}: {e}") from None
        self._config = config
        self._key_index = {key: i for i, key in enumerate(ALL_POSSIBLE_KEYS)}
        self._task = task
        self._finalizer = weakref.finalize(self, _quit, self._env)

    def _load_task(self, task: str) -> None:
        """Opens ``task``'s page in the running browser (MiniWoB ties a browser to one task; this moves it)."""
        from miniwob.fields import get_field_extractor
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support import expected_conditions
        from selenium.webdriver.support.wait import WebDriverWait

        instance = self._env.instance
        instance.url = instance.url.rsplit("/", 1)[0] + f"/{task}.html"
        instance.field_extractor = get_field_extractor(task)
        instance.driver.get(instance.url)
        WebDriverWait(instance.driver, self.timeout_s).until(
            expected_conditions.element_to_be_clickable((By.ID, instance.SYNC_SCREEN_ID))
        )
        self._env.subdomain = task
        self._task = task

    @property
    def pids(self) -> list[int]:
        """The process ids of the browser's chromedriver (its Chromium processes are children of it); empty when
        no browser runs."""
        if self._env is None:
            return []
        return [self._env.instance.driver.service.process.pid]

    def close(self) -> None:
        """Quits Chromium and its driver (a later :meth:`start` launches them again)."""
        if self._finalizer is not None:
            self._finalizer()
        self._env = self._finalizer = self._page = None
        self._task = None

    # --- episodes -------------------------------------------------------------------------------

    def start(self, task: str, seed: int, data_mode: str = "train", time_limit_s: float | None = None) -> Page:
        """Starts an episode of ``task`` from ``seed``.

        Args:
            task: A MiniWoB task name of :data:`TASKS` (e.g. ``"click-button"``).
            seed: The page's seed (MiniWoB seeds the page's ``Math.random`` with it).
            data_mode: MiniWoB's data mode, ``"train"`` or ``"test"`` (a few tasks draw from different pools).
            time_limit_s: The episode's time limit in seconds (``None``: the task's own, MiniWoB's 10 s for most).

        Raises:
            TaskFormatError: an unknown task.
            WorldUnavailableError: the browser cannot start.
        """
        check_task(task)
        if self._env is None:
            self._start_browser(task)
        elif task != self._task:
            self._load_task(task)
        driver = self._env.instance.driver
        if time_limit_s is not None:
            driver.execute_script(f"core.EPISODE_MAX_TIME = {float(time_limit_s) * 1000:.0f};")
        self._env.unwrapped.instance.record_screenshots = self.screenshots
        observation, info = self._env.reset(seed=seed, options={"data_mode": data_mode})
        self._fields = dict(observation["fields"])
        self.moves = 0
        self._update(observation, info)
        return self.page

    @property
    def running(self) -> bool:
        """Whether an episode has been started (it may have ended)."""
        return self._page is not None

    @property
    def page(self) -> Page:
        """The page as of the last reset or action."""
        if self._page is None:
            raise WebActionError("no episode is running")
        return self._page

    def act(self, action: BrowserAction) -> Page:
        """Carries out one action and returns the page after it.

        Raises:
            WebActionError: the action cannot be carried out (the page is unchanged).
        """
        page = self.page
        if not page.done and (info := self._env.unwrapped.instance.get_metadata())["done"]:  # it timed out
            self._update({}, info)
            page = self.page
        if page.done:
            raise WebActionError("the task has already ended; no more actions are needed")
        self._env.unwrapped.instance.record_screenshots = self.screenshots
        miniwob_action = self._miniwob_action(action, page)
        self._env.unwrapped.instance.wait_ms = SETTLE_S.get(action.kind, 0.0) * 1000
        observation, _, _, _, info = self._env.step(miniwob_action)
        self.moves += 1
        self._update(observation, info)
        return self.page

    def _miniwob_action(self, action: BrowserAction, page: Page) -> dict[str, Any]:
        from miniwob.action import ActionTypes

        point = action.point
        if action.ref is not None:
            point = point or page.element(action.ref).center
        if action.point is not None and not on_screen(action.point):
            raise WebActionError(
                f"({action.point[0]:g}, {action.point[1]:g}) is off the screen; x must be in [0, {SCREEN_WIDTH}) and "
                f"y in [0, {SCREEN_HEIGHT}) (scroll to bring what is below into view)"
            )
        if action.kind == "click":
            if action.ref is not None and action.point is None:
                return self._action(ActionTypes.CLICK_ELEMENT, ref=action.ref)
            return self._action(ActionTypes.CLICK_COORDS, coords=np.array(point, dtype=np.float32))
        if action.kind == "type":
            if not action.text:
                raise WebActionError("the text to type is empty")
            if len(action.text) > MAX_TYPED_CHARS:
                raise WebActionError(f"type at most {MAX_TYPED_CHARS} characters at once, got {len(action.text)}")
            if action.ref is not None:
                return self._action(ActionTypes.FOCUS_ELEMENT_AND_TYPE_TEXT, ref=action.ref, text=action.text)
            return self._action(ActionTypes.TYPE_TEXT, text=action.text)
        if action.kind == "press":
            return self._action(ActionTypes.PRESS_KEY, key=self._key_index[key_code(action.text)])
        if action.kind == "scroll":
            if action.text not in SCROLL_DIRECTIONS:
                raise WebActionError(f"scroll direction must be 'up' or 'down', got {action.text[:20]!r}")
            kind = ActionTypes.SCROLL_UP_COORDS if action.text == "up" else ActionTypes.SCROLL_DOWN_COORDS
            return self._action(kind, coords=np.array(point or (SCREEN_WIDTH / 2, SCREEN_HEIGHT / 2), np.float32))
        raise WebActionError(f"unknown action {action.kind!r}")

    def _action(self, kind: Any, **values: Any) -> dict[str, Any]:
        action = {"action_type": self._config.action_types.index(kind), **values}
        return action

    def _update(self, observation: Mapping[str, Any], info: Mapping[str, Any]) -> None:
        done = bool(info["done"])
        if done:  # MiniWoB shows nothing of a finished episode
            elements, options = [] if self._page is None else self._page.elements, {}
        else:
            elements, options = self._read_lists([_element(raw) for raw in observation["dom_elements"]])
        self._screen = observation["screenshot"] if self.screenshots and not done else None
        self._page = Page(
            utterance=str(observation["utterance"]) if not done else self.page.utterance,
            fields=dict(self._fields),
            elements=elements,
            options=options,
            done=done,
            raw_reward=float(info["raw_reward"]) if done else 0.0,
            reward=float(info["env_reward"]) if done else 0.0,
            reason=str(info.get("reason") or ""),
        )

    def _read_lists(self, elements: list[Element]) -> tuple[list[Element], dict[int, list[str]]]:
        """Drop-down lists' options, and their selected option as their value (MiniWoB reports neither)."""
        refs = [element.ref for element in elements if element.tag == "select"]
        if not refs:
            return elements, {}
        script = (
            "return arguments[0].map(r => { const s = core.previousDOMInfo[r]; "
            "return [Array.from(s.options, o => o.text), s.selectedIndex >= 0 ? s.options[s.selectedIndex].text : ''];"
            "});"
        )
        lists = dict(zip(refs, self._env.instance.driver.execute_script(script, refs), strict=True))
        elements = [replace(e, value=lists[e.ref][1]) if e.ref in lists else e for e in elements]
        return elements, {ref: options for ref, (options, _) in lists.items()}

    def screen(self) -> np.ndarray:
        """The task area as rendered now: ``(SCREEN_HEIGHT, SCREEN_WIDTH, 3)`` uint8 RGB (black once the episode
        has ended, as MiniWoB shows it)."""
        if self._screen is None:
            if self._page is None or self._page.done:
                return np.zeros((SCREEN_HEIGHT, SCREEN_WIDTH, 3), dtype=np.uint8)
            from miniwob.screenshot import get_screenshot, pil_to_numpy_array

            instance = self._env.instance
            image = get_screenshot(
                instance.driver, instance.inner_width, instance.inner_height, SCREEN_WIDTH, SCREEN_HEIGHT
            )
            self._screen = pil_to_numpy_array(image)
        return self._screen.copy()


def _quit(env: Any) -> None:
    with contextlib.suppress(Exception):  # a browser that already died has nothing left to quit
        env.close()


__all__ = [
    "SCREEN_HEIGHT",
    "SCREEN_WIDTH",
    "TASKS",
    "BrowserAction",
    "Element",
    "MiniWoBBrowser",
    "Page",
    "WebActionError",
    "check_task",
    "describe",
    "key_code",
    "on_screen",
    "page_listing",
    "require_miniwob",
]
