"""The text formats' parsers: ``hermes``, ``react``, ``code`` and ``tool_calls`` (see :mod:`agentfly_envs.parsers`)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from agentfly_envs.parsers.base import (
    PARSERS,
    Parser,
    ParseResult,
    ToolCall,
    call_from_object,
    snippet,
    tool_lines,
)

_OPEN, _CLOSE = "<tool_call>", "</tool_call>"


class HermesParser(Parser):
    """``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`` blocks (Qwen2.5, Hermes).

    Example:
        >>> call = '{"name": "calculator", "arguments": {"expression": "2+2"}}'
        >>> result = HermesParser().parse_text(f"Let me compute.\\n<tool_call>\\n{call}\\n</tool_call>")
        >>> result.content, result.calls[0].name, result.calls[0].arguments
        ('Let me compute.', 'calculator', {'expression': '2+2'})
    """

    name = "hermes"

    def parse_text(self, text: str) -> ParseResult:
        bodies, outside = self._blocks(text)
        result = ParseResult(outside.replace(_CLOSE, "").strip())
        for position, body in enumerate(bodies, start=1):
            body = body.strip()
            try:
                call = call_from_object(json.loads(body), position)
            except json.JSONDecodeError as e:
                call = (
                    f"tool call {position} is not valid JSON ({e.msg} at character {e.pos}): {snippet(body)}. "
                    'Write <tool_call>{"name": "<tool>", "arguments": {...}}</tool_call>.'
                )
            (result.calls if isinstance(call, ToolCall) else result.errors).append(call)
        return result

    @staticmethod
    def _blocks(text: str) -> tuple[list[str], str]:
        """The bodies of the ``<tool_call>`` blocks (a block left open runs to the end of the text), and the text
        outside them: what the regular expression ``<tool_call>(.*?)(?:</tool_call>|\\Z)`` (``DOTALL``) finds and
        leaves, found with ``str.find``, which costs a fraction of the expression's scan."""
        bodies, outside, end = [], [], 0
        start = text.find(_OPEN)
        while start >= 0:
            outside.append(text[end:start])
            close = text.find(_CLOSE, start + len(_OPEN))
            bodies.append(text[start + len(_OPEN) : close if close >= 0 else len(text)])
            end = close + len(_CLOSE) if close >= 0 else len(text)
            start = text.find(_OPEN, end)
        outside.append(text[end:])
        return bodies, "".join(outside)

    def format_calls(self, calls: Sequence[ToolCall], thought: str = "") -> str:
        blocks = [
            f"<tool_call>\n{json.dumps({'name': call.name, 'arguments': call.arguments})}\n</tool_call>"
            for call in calls
        ]
        return "\n".join(([thought] if thought else []) + blocks)


class ReActParser(Parser):
    """ReAct turns: ``Thought:`` / ``Action: <tool>`` / ``Action Input: <JSON object or text>``.

    Example:
        >>> call = ReActParser().parse_text(
        ...     'Thought: add them\\nAction: calculator\\nAction Input: {"expression": "2+2"}').calls[0]
        >>> call.name, call.arguments
        ('calculator', {'expression': '2+2'})
    """

    name = "react"
    _action = re.compile(
        r"^[ \t]*Action[ \t]*:[ \t]*(?P<name>[^\n]*)\n[ \t]*Action[ \t]*Input[ \t]*:[ \t]*(?P<input>.*?)"
        r"(?=^[ \t]*(?:Thought|Action|Observation|Final[ \t]+Answer)[ \t]*:|\Z)",
        re.DOTALL | re.MULTILINE,
    )
    _action_line = re.compile(r"^[ \t]*Action[ \t]*:", re.MULTILINE)

    def parse_text(self, text: str) -> ParseResult:
        matches = list(self._action.finditer(text))
        result = ParseResult(self._action.sub("", text).strip())
        for position, match in enumerate(matches, start=1):
            name, raw = match.group("name").strip(), match.group("input").strip()
            if raw.startswith("{"):
                try:
                    call = call_from_object({"name": name, "arguments": json.loads(raw)}, position)
                except json.JSONDecodeError as e:
                    call = f"Action Input {position} looks like JSON but is not valid ({e.msg} at character {e.pos})"
            else:
                call = call_from_object({"name": name}, position)
                if isinstance(call, ToolCall):
                    call = ToolCall(call.name, raw, call.id)
            (result.calls if isinstance(call, ToolCall) else result.errors).append(call)
        missing = len(self._action_line.findall(text)) - len(matches)
        if missing > 0:
            result.errors.append(f"{missing} 'Action:' line(s) without an 'Action Input:' line on the next line")
        return result

    def format_calls(self, calls: Sequence[ToolCall], thought: str = "") -> str:
        thought = thought or "I will use a tool."
        blocks = [f"Action: {call.name}\nAction Input: {json.dumps(call.arguments)}" for call in calls]
        return "\n".join([f"Thought: {thought}", *blocks])

    def format_final(self, text: str) -> str:
        return f"Thought: I know the final answer.\nFinal Answer: {text}"

    def instructions(self, tools: Sequence[Mapping[str, Any]]) -> str:
        return (
            "You can use these tools:\n"
            f"{tool_lines(tools)}\n\n"
            "To use a tool, write exactly:\nThought: <your reasoning>\nAction: <tool name>\n"
            'Action Input: <a JSON object of arguments, e.g. {"expression": "2+2"}>\n'
            "Then stop; the result comes back as an Observation. When you know the answer, write:\n"
            "Thought: I know the final answer.\nFinal Answer: <answer>"
        )


class CodeParser(Parser):
    """Fenced Python blocks; each block is a call of the ``python`` tool with ``code`` = its body.

    Example:
        >>> CodeParser().parse_text("Let me check.\\n```python\\nprint(6 * 7)\\n```").calls[0].arguments
        {'code': 'print(6 * 7)'}
    """

    name = "code"
    calls_only = "python"
    _block = re.compile(r"```(?:python|py)[ \t]*\n(.*?)(```|\Z)", re.DOTALL)
    _fence = re.compile(r"```(?:python|py)[ \t]*\n")

    def parse_text(self, text: str) -> ParseResult:
        result = ParseResult(self._block.sub("", text).strip())
        for position, match in enumerate(self._block.finditer(text), start=1):
            if not match.group(2):
                result.errors.append(f"code block {position} is not closed; end it with a line of ```")
            else:
                result.calls.append(ToolCall("python", {"code": match.group(1).strip("\n")}))
        return result

    def format_calls(self, calls: Sequence[ToolCall], thought: str = "") -> str:
        if any(call.name != "python" or not isinstance(call.arguments, dict) for call in calls):
            raise ValueError("the code format can only write calls of the python tool")
        blocks = [f"```python\n{call.arguments['code']}\n```" for call in calls]
        return "\n".join(([thought] if thought else []) + blocks)

    def format_final(self, text: str) -> str:
        """The final turn, with any ```` ```python ```` fence made plain so that its code is shown, not run."""
        return self._fence.sub("```\n", text)

    def instructions(self, tools: Sequence[Mapping[str, Any]]) -> str:
        description = tools[0]["function"].get("description", "") if tools else ""
        semantics = " ".join(description.split("\n\n", 1)[1].split()) if "\n\n" in description else ""
        return (
            "To run Python, write a fenced code block:\n```python\nprint(6 * 7)\n```\n"
            f"Its printed output comes back to you. {semantics or 'Each block runs in a fresh interpreter.'} "
            "To show code without running it, use a plain ``` fence with no language. "
            "When you know the answer, reply without a ```python block."
        )


class ToolCallsParser(Parser):
    """Structured assistant messages (``tool_calls``); plain text is always a final answer."""

    name = "tool_calls"
    reads_text = False

    def parse_text(self, text: str) -> ParseResult:
        return ParseResult(text)

    def format_calls(self, calls: Sequence[ToolCall], thought: str = "") -> dict[str, Any]:
        return {"role": "assistant", "content": thought, "tool_calls": [call.as_openai() for call in calls]}


for _parser in (HermesParser(), ReActParser(), CodeParser(), ToolCallsParser()):
    PARSERS.add(_parser.name, _parser)
PARSERS.add_alias("hf", ToolCallsParser.name)  # AgentFly's agent_type=hf: the trainer reads the template's calls
