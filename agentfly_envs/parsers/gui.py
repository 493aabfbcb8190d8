"""The ``gui`` parser (``agent.agent_type=gui``): the action formats of GUI agents built on vision-language models,
read as calls of the web tools (``click``, ``type``, ``press``, ``scroll``; see :mod:`agentfly_envs.tools.web`).

Two formats are read:

- UI-TARS's: ``Thought: ...`` then ``Action: click(start_box='(120,137)')``, one action per ``Action:`` line.
  ``click``/``left_single``/``left_click`` (a point or a box, whose centre is clicked), ``type(content=...)``,
  ``hotkey(key='ctrl a')``/``press(key=...)``, ``scroll(start_box=..., direction='down')`` and
  ``finished(content=...)`` (the final answer: no call) map to the web tools; any other ``name(arg=value, ...)`` is a
  call of the tool ``name`` (e.g. ``click(element=9)`` in a text-mode web env). A point is written ``'(x,y)'``,
  ``'<|box_start|>(x,y)<|box_end|>'``, ``'<point>x y</point>'`` or ``[x, y]``; a box has four numbers.
- Qwen2.5-VL's ``computer_use`` function: ``<tool_call>{"name": "computer_use", "arguments": {"action":
  "left_click", "coordinate": [x, y]}}</tool_call>`` (``type`` with ``text``, ``key`` with ``keys``, ``scroll``
  with ``pixels``, negative scrolling down, ``terminate``); other ``<tool_call>`` blocks are read as ``hermes``.

Calls are written back in UI-TARS's format (:meth:`GuiParser.format_calls`).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping, Sequence
from typing import Any

from agentfly_envs.expressions import parse_expression
from agentfly_envs.parsers.base import PARSERS, Parser, ParseResult, ToolCall, tool_lines
from agentfly_envs.parsers.text import HermesParser

_ACTION_LINE = re.compile(r"^[ \t]*Action[ \t]*:[ \t]*(.*?)[ \t]*$", re.MULTILINE)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_CLICKS = ("click", "left_single", "left_click")
_KEYS = ("hotkey", "press", "key")
_FINISH = ("finished", "finish", "terminate")
MAX_ACTION_CHARS = 2_000
"""Longest action expression read, in characters."""
MAX_NESTING = 8
"""Deepest bracket nesting of an action read (a box in a list is 2)."""


def _point(value: Any) -> tuple[int, int] | str:
    """``(x, y)`` from a point or a box (its centre), or an error message."""
    numbers = [float(n) for n in (_NUMBER.findall(value) if isinstance(value, str) else _flat(value))]
    if len(numbers) == 2:
        return round(numbers[0]), round(numbers[1])
    if len(numbers) == 4:
        return round((numbers[0] + numbers[2]) / 2), round((numbers[1] + numbers[3]) / 2)
    return f"a point is two numbers '(x,y)' (or a box of four), got {str(value)[:60]!r}"


def _flat(value: Any) -> list[Any]:
    if isinstance(value, list | tuple):
        return [n for item in value for n in _flat(item)]
    return [value] if isinstance(value, int | float) and not isinstance(value, bool) else []


def _gui_call(name: str, arguments: dict[str, Any]) -> ToolCall | str | None:
    """A UI-TARS action as a web tool call; ``None`` for ``finished``; an error message for a malformed one."""
    box = next((arguments.pop(key) for key in ("start_box", "point", "coordinate", "box") if key in arguments), None)
    point = _point(box) if box is not None else None
    if isinstance(point, str):
        return f"{name}: {point}"
    at = {"x": point[0], "y": point[1]} if point else {}
    if name in _CLICKS:
        return ToolCall("click", {**arguments, **at})
    if name == "type":
        text = arguments.pop("content", arguments.pop("text", None))
        return ToolCall("type", {**arguments, **({"text": text} if text is not None else {})})
    if name in _KEYS:
        key = arguments.pop("key", arguments.pop("keys", None))
        key = "+".join(key) if isinstance(key, list) else key
        return ToolCall("press", {**arguments, **({"key": key} if key is not None else {})})
    if name == "scroll":
        return ToolCall("scroll", {**arguments, **at})
    return ToolCall(name, {**arguments, **at})


def _nesting(text: str) -> int:
    """The deepest nesting of brackets in ``text``."""
    depth = deepest = 0
    for character in text:
        depth += (character in "([{") - (character in ")]}")
        deepest = max(deepest, depth)
    return deepest


def _read_action(expression: str, position: int) -> ToolCall | str | None:
    try:
        if len(expression) > MAX_ACTION_CHARS or _nesting(expression) > MAX_NESTING:
            raise ValueError  # CPython's parser fails for good after a RecursionError, so deep input never gets there
        call = parse_expression(expression.strip()).body
        if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name) or call.args:
            raise ValueError
        arguments = {keyword.arg: ast.literal_eval(keyword.value) for keyword in call.keywords}
        if None in arguments:
            raise ValueError
    except (SyntaxError, ValueError, TypeError):
        return (
            f"Action {position} is not an action like click(start_box='(x,y)'), type(content='text'), "
            f"hotkey(key='enter'), scroll(start_box='(x,y)', direction='down') or finished(content='...'): "
            f"{expression[:120]!r}"
        )
    if call.func.id in _FINISH:
        return None
    return _gui_call(call.func.id, arguments)


def _computer_use(call: ToolCall) -> ToolCall | str | None:
    """A Qwen2.5-VL ``computer_use`` call as a web tool call (``None`` for ``terminate``)."""
    arguments = dict(call.arguments) if isinstance(call.arguments, dict) else {}
    action = arguments.pop("action", None)
    if action == "scroll" and isinstance(arguments.get("pixels"), int | float):
        arguments["direction"] = "up" if arguments.pop("pixels") > 0 else "down"
    if action in ("left_click", "type", "key", "scroll", "terminate"):
        return None if action == "terminate" else _gui_call(action, arguments)
    return f"computer_use action {str(action)[:40]!r} is not supported; use left_click, type, key, scroll or terminate"


class GuiParser(Parser):
    """GUI agents' actions (UI-TARS, Qwen2.5-VL ``computer_use``) as web tool calls; see the module docstring.

    Example:
        >>> result = GuiParser().parse_text("Thought: the Yes button.\\nAction: click(start_box='(20,136)')")
        >>> result.content, result.calls[0].name, result.calls[0].arguments
        ('Thought: the Yes button.', 'click', {'x': 20, 'y': 136})
        >>> print(GuiParser().format_calls([ToolCall("type", {"text": "Myron"})], "Type the name."))
        Thought: Type the name.
        Action: type(content='Myron')
    """

    name = "gui"
    _hermes = HermesParser()

    def parse_text(self, text: str) -> ParseResult:
        if "<tool_call>" in text:
            return self._parse_tool_calls(self._hermes.parse_text(text))
        result = ParseResult(_ACTION_LINE.sub("", text).strip())
        for position, match in enumerate(_ACTION_LINE.finditer(text), start=1):
            call = _read_action(match.group(1), position)
            if call is None:
                result.content = _finished_content(match.group(1))
            else:
                (result.calls if isinstance(call, ToolCall) else result.errors).append(call)
        return result

    def _parse_tool_calls(self, parsed: ParseResult) -> ParseResult:
        result = ParseResult(parsed.content, errors=list(parsed.errors))
        for call in parsed.calls:
            translated = _computer_use(call) if call.name == "computer_use" else call
            if translated is not None:
                (result.calls if isinstance(translated, ToolCall) else result.errors).append(translated)
        return result

    def format_calls(self, calls: Sequence[ToolCall], thought: str = "") -> str:
        return "\n".join([f"Thought: {thought or 'I act on the screen.'}", *(f"Action: {_write(c)}" for c in calls)])

    def format_final(self, text: str) -> str:
        return f"Thought: The task is done.\nAction: finished(content={text!r})"

    def instructions(self, tools: Sequence[Mapping[str, Any]]) -> str:
        return (
            f"You can use these tools:\n{tool_lines(tools)}\n\n"
            "Each turn, write a short thought and one action, exactly:\nThought: <your reasoning>\n"
            "Action: click(start_box='(x,y)')\n"
            "Actions: click(start_box='(x,y)') clicks a point of the screenshot (x, y in its pixels); "
            "type(content='text'); hotkey(key='enter'); scroll(start_box='(x,y)', direction='down'); any other tool "
            "as name(argument=value), e.g. click(element=9). When the task is done, write "
            "Action: finished(content='<answer>')."
        )


def _finished_content(expression: str) -> str:
    call = parse_expression(expression.strip()).body
    values = [ast.literal_eval(keyword.value) for keyword in call.keywords if keyword.arg in ("content", "status")]
    return str(values[0]) if values else ""


def _write(call: ToolCall) -> str:
    """One call in UI-TARS's spelling: a point as ``start_box='(x,y)'``, ``text`` as ``content``, ``press`` as
    ``hotkey``."""
    arguments = dict(call.arguments) if isinstance(call.arguments, dict) else {"content": call.arguments}
    name = {"press": "hotkey"}.get(call.name, call.name)
    words = []
    if "x" in arguments and "y" in arguments:
        words.append(f"start_box='({arguments.pop('x')},{arguments.pop('y')})'")
    if call.name == "type" and "text" in arguments:
        arguments = {"content": arguments.pop("text"), **arguments}
    words += [f"{key}={value!r}" for key, value in arguments.items()]
    return f"{name}({', '.join(words)})"


PARSERS.add(GuiParser.name, GuiParser())
