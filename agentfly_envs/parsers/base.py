"""The parsers' shared types: :class:`ToolCall`, :class:`ParseResult`, the :class:`Parser` interface and the
:data:`PARSERS` registry (what :mod:`agentfly_envs.parsers` describes)."""

from __future__ import annotations

import json
import os
import random
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentfly_envs.registry import Registry

Action = str | Mapping[str, Any]
"""What ``env.step`` takes: the assistant's raw text, or an assistant message dict."""

_CALL_IDS = random.Random()  # seeded from os.urandom, and again in a forked child (so no two processes share ids)
if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_CALL_IDS.seed)


def new_call_id() -> str:
    """A fresh call id, ``call_`` and 12 random hex digits (48 bits: a clash within one conversation is unlikely)."""
    return f"call_{_CALL_IDS.getrandbits(48):012x}"


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
    id: str = field(default_factory=new_call_id)

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


def snippet(text: str, limit: int = 120) -> str:
    """``text`` cut to ``limit`` characters (with ``...``), for quoting a malformed call in an error."""
    return text if len(text) <= limit else text[:limit] + "..."


def call_from_object(obj: object, position: int) -> ToolCall | str:
    """Builds a call from a decoded ``{"name": ..., "arguments": ...}`` object, or returns an error message.

    ``arguments`` may be an object or a JSON string of one (both occur in the wild); ``parameters``
    is accepted as an alias; missing arguments mean none.
    """
    if not isinstance(obj, Mapping):
        return f"tool call {position} must be a JSON object with 'name' and 'arguments', got {snippet(repr(obj))}"
    function = obj.get("function")
    if function is not None and isinstance(function, Mapping):
        return call_from_object(dict(function, id=obj.get("id")), position)
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return f"tool call {position} has no 'name' (a string naming the tool): {snippet(json.dumps(obj, default=str))}"
    arguments = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as e:
            return f"tool call {position} ({name}): 'arguments' is not valid JSON ({e.msg} at {e.pos})"
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, Mapping):
        return f"tool call {position} ({name}): 'arguments' must be a JSON object, got {snippet(repr(arguments))}"
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
        result.errors.append(f"'tool_calls' must be a list of calls, got {snippet(repr(tool_calls))}")
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


PARSERS: Registry[Parser] = Registry("parser", where="agentfly_envs/parsers/")


def get_parser(name: str) -> Parser:
    """Returns the registered parser ``name``; raises ``UnknownNameError`` with close matches."""
    return PARSERS.get(name)


def tool_lines(tools: Sequence[Mapping[str, Any]]) -> str:
    """One line per tool schema (name, description's first line, arguments), for formats the system prompt describes."""
    lines = []
    for tool in tools:
        function = tool["function"]
        parameters = json.dumps(function.get("parameters", {}).get("properties", {}))
        lines.append(f"- {function['name']}: {function.get('description', '').splitlines()[0]} Arguments: {parameters}")
    return "\n".join(lines)
