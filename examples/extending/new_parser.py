"""A new parser: an action format. Here a call is a line ``CALL tool({"argument": ...})``."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from agentfly_envs import PARSERS, Parser, ParseResult, ToolCall
from agentfly_envs.parsers import call_from_object


class CallLinesParser(Parser):
    """``CALL <tool>(<JSON object of arguments>)`` lines, any number per turn; a turn without one is the answer."""

    name = "call_lines"
    _line = re.compile(r"^[ \t]*CALL\b(?P<rest>.*)$", re.MULTILINE)
    _call = re.compile(r"\s*(?P<name>[A-Za-z_]\w*)\((?P<arguments>.*)\)\s*")

    def parse_text(self, text: str) -> ParseResult:
        result = ParseResult(self._line.sub("", text).strip())
        for position, line in enumerate(self._line.finditer(text), start=1):
            match = self._call.fullmatch(line["rest"])
            if match is None:
                result.errors.append(f"call {position} is not CALL tool({{...}}): {line[0].strip()[:80]}")
                continue
            try:
                arguments = json.loads(match["arguments"] or "{}")
            except json.JSONDecodeError as error:
                result.errors.append(f"call {position}: the arguments are not a JSON object ({error.msg})")
                continue
            call = call_from_object({"name": match["name"], "arguments": arguments}, position)
            (result.calls if isinstance(call, ToolCall) else result.errors).append(call)
        return result

    def format_calls(self, calls: Sequence[ToolCall], thought: str = "") -> str:
        lines = [f"CALL {call.name}({json.dumps(call.arguments)})" for call in calls]
        return "\n".join(([thought] if thought else []) + lines)

    def instructions(self, tools: Sequence[Mapping[str, Any]]) -> str:
        listing = "\n".join(
            f"- {tool['function']['name']}: {tool['function'].get('description', '').splitlines()[0]} "
            f"Arguments: {json.dumps(tool['function'].get('parameters', {}).get('properties', {}))}"
            for tool in tools
        )
        return (
            f"You can use these tools:\n{listing}\n\n"
            'To call one, write a line CALL <tool>(<JSON object of arguments>), e.g. CALL calculator({"expression": '
            '"2+2"}), and stop; its output comes back to you. When you know the answer, reply without a CALL line.'
        )


PARSERS.add(CallLinesParser.name, CallLinesParser())
