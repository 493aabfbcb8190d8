"""Action parsers: the assistant's turn (text or an OpenAI-style message) -> tool calls.

Every parser accepts both kinds of action. A message dict with ``tool_calls`` is read structurally
(the OpenAI/vLLM/transformers format); text is read in the parser's own format:

- ``hermes``: the Qwen2.5/Hermes format, ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``,
  any number per turn; the chat template renders the tool schemas, so no extra instructions.
- ``react``: ``Thought: ... / Action: <tool> / Action Input: <json or text>``, ending with
  ``Final Answer: ...``; the system prompt carries the format and the tool list.
- ``code``: each fenced ```` ```python ```` block is a call of the ``python`` tool (or of a tool answering
  to that name, such as ``python_executor``); a plain ```` ``` ```` fence shows code without running it.
- ``tool_calls``: structured messages only; text never contains a call. The trainer's ``agent_type=hf`` uses
  it: the trainer reads the model's own tool-call format with the chat template's family (transformers' response
  parsing) and hands the env the message; a turn it cannot read carries ``parse_errors``.

A parser never raises on agent output: a malformed call becomes an entry of ``ParseResult.errors``.
Each parser can also write calls in its format (``format_calls``), the inverse of parsing, which
golden demonstrations use.
"""

from __future__ import annotations

import json
import re
import secrets
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentfly_envs.registry import Registry

Action = str | Mapping[str, Any]
"""What ``env.step`` takes: the assistant's raw text, or an assistant message dict."""


@dataclass(frozen=True)
class ToolCall:
    """One call decoded from the assistant's turn.

    Attributes:
        name: Tool name as the model wrote it (may be unknown to the env).
        arguments: Keyword arguments, or a bare string for formats that allow one (ReAct); a bare
            string is passed to a tool's only parameter.
        id: Call id, from a structured message or generated.
    """

    name: str
    arguments: dict[str, Any] | str
    id: str = field(default_factory=lambda: f"call_{secrets.token_hex(6)}")

    def as_openai(self) -> dict[str, Any]:
        """This call as an OpenAI-style ``tool_calls`` entry (arguments as a dict)."""
        arguments = self.arguments if isinstance(self.arguments, dict) else {"input": self.arguments}
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": arguments}}


@dataclass
class ParseResult:
    """The decoded assistant turn.

    Attributes:
        content: The assistant's text outside any tool call (the final answer, when there are no calls).
        calls: Well-formed calls, in the order written.
        errors: One message per malformed call, written for the model.
    """

    content: str
    calls: list[ToolCall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def attempted_call(self) -> bool:
        """Whether the turn tried to call a tool (well-formed or not); if not, it is a final answer."""
        return bool(self.calls or self.errors)


def _snippet(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def call_from_object(obj: object, position: int) -> ToolCall | str:
    """Builds a call from a decoded ``{"name": ..., "arguments": ...}`` object, or returns an error message.

    ``arguments`` may be an object or a JSON string of one (both occur in the wild); ``parameters``
    is accepted as an alias; missing arguments mean none.
    """
    if isinstance(obj, Mapping) and isinstance(obj.get("function"), Mapping):
        return call_from_object(dict(obj["function"], id=obj.get("id")), position)
    if not isinstance(obj, Mapping):
        return f"tool call {position} must be a JSON object with 'name' and 'arguments', got {_snippet(repr(obj))}"
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return (
            f"tool call {position} has no 'name' (a string naming the tool): {_snippet(json.dumps(obj, default=str))}"
        )
    arguments = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as e:
            return f"tool call {position} ({name}): 'arguments' is not valid JSON ({e.msg} at {e.pos})"
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, Mapping):
        return f"tool call {position} ({name}): 'arguments' must be a JSON object, got {_snippet(repr(arguments))}"
    call_id = obj.get("id")
    return ToolCall(name.strip(), dict(arguments), **({"id": call_id} if isinstance(call_id, str) else {}))


def parse_message(message: Mapping[str, Any]) -> ParseResult:
    """Reads an OpenAI-style assistant message: ``{"content": str | None, "tool_calls": [...]}``, plus
    ``parse_errors`` (a list of strings): why calls the reader of the model's text found could not be read.

    Example:
        >>> parse_message({"content": "", "parse_errors": ["the tool call cannot be read: bad JSON"]}).errors
        ['the tool call cannot be read: bad JSON']
    """
    content = message.get("content") or ""
    result = ParseResult(content if isinstance(content, str) else str(content))
    errors = message.get("parse_errors") or []
    result.errors.extend(str(error) for error in (errors if isinstance(errors, list) else [errors]))
    tool_calls = message.get("tool_calls") or []
    if not isinstance(tool_calls, Sequence) or isinstance(tool_calls, str):
        result.errors.append(f"'tool_calls' must be a list of calls, got {_snippet(repr(tool_calls))}")
        return result
    for position, entry in enumerate(tool_calls, start=1):
        call = call_from_object(entry, position)
        (result.calls if isinstance(call, ToolCall) else result.errors).append(call)
    return result


class Parser(ABC):
    """Turns one assistant turn into tool calls, and writes calls back in the same format."""

    name: str = ""
    calls_only: str | None = None
    """The one tool this format can call (the env must have a tool answering to it), or ``None`` for any."""
    reads_text: bool = True
    """Whether calls are read from the assistant's text; ``False``: only from structured messages, so whoever
    drives the env reads the model's text (the trainer, in the chat template's own tool-call format)."""

    def parse(self, action: Action) -> ParseResult:
        """Decodes an action; never raises on agent output.

        Args:
            action: The assistant's text, or an assistant message dict (read structurally).

        Returns:
            The text content, the calls and the errors of malformed calls.
        """
        if isinstance(action, Mapping):
            return parse_message(action)
        return self.parse_text(action)

    @abstractmethod
    def parse_text(self, text: str) -> ParseResult:
        """Decodes assistant text in this parser's format."""

    @abstractmethod
    def format_calls(self, calls: Sequence[ToolCall], thought: str = "") -> Action:
        """Writes an assistant turn that makes ``calls``; ``parse(format_calls(c)).calls == c`` up to ids."""

    def format_final(self, text: str) -> Action:
        """Writes a final-answer turn carrying ``text``."""
        return text

    def instructions(self, tools: Sequence[Mapping[str, Any]]) -> str | None:
        """Format instructions for the system prompt, or ``None`` when the chat template renders tools."""
        return None


PARSERS: Registry[Parser] = Registry("parser", where="agentfly_envs/parsers.py")


def get_parser(name: str) -> Parser:
    """Returns the registered parser ``name``; raises ``UnknownNameError`` with close matches."""
    return PARSERS.get(name)


def _tool_lines(tools: Sequence[Mapping[str, Any]]) -> str:
    lines = []
    for tool in tools:
        function = tool["function"]
        parameters = json.dumps(function.get("parameters", {}).get("properties", {}))
        lines.append(f"- {function['name']}: {function.get('description', '').splitlines()[0]} Arguments: {parameters}")
    return "\n".join(lines)


class HermesParser(Parser):
    """``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`` blocks (Qwen2.5, Hermes).

    Example:
        >>> call = '{"name": "calculator", "arguments": {"expression": "2+2"}}'
        >>> result = HermesParser().parse_text(f"Let me compute.\\n<tool_call>\\n{call}\\n</tool_call>")
        >>> result.content, result.calls[0].name, result.calls[0].arguments
        ('Let me compute.', 'calculator', {'expression': '2+2'})
    """

    name = "hermes"
    _block = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)

    def parse_text(self, text: str) -> ParseResult:
        result = ParseResult(self._block.sub("", text).replace("</tool_call>", "").strip())
        for position, match in enumerate(self._block.finditer(text), start=1):
            body = match.group(1).strip()
            try:
                call = call_from_object(json.loads(body), position)
            except json.JSONDecodeError as e:
                call = (
                    f"tool call {position} is not valid JSON ({e.msg} at character {e.pos}): {_snippet(body)}. "
                    'Write <tool_call>{"name": "<tool>", "arguments": {...}}</tool_call>.'
                )
            (result.calls if isinstance(call, ToolCall) else result.errors).append(call)
        return result

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
            f"{_tool_lines(tools)}\n\n"
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
