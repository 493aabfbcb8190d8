"""Action parsers: the assistant's turn (text or an OpenAI-style message) -> tool calls.

Every parser accepts both kinds of action. A message dict with ``tool_calls`` is read structurally
(the OpenAI/vLLM/transformers format); text is read in the parser's own format:

- ``hermes``: the Qwen2.5/Hermes format, ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``,
  any number per turn; the chat template renders the tool schemas, so no extra instructions.
- ``react``: ``Thought: ... / Action: <tool> / Action Input: <json or text>``, ending with
  ``Final Answer: ...``; the system prompt carries the format and the tool list.
- ``code``: each fenced ```` ```python ```` block is a call of the ``python`` tool (or of a tool answering
  to that name, such as ``python_executor``); a plain ```` ``` ```` fence shows code without running it.
- ``gui``: GUI agents' actions (UI-TARS, Qwen2.5-VL's ``computer_use``), :mod:`agentfly_envs.parsers.gui`.
- ``tool_calls``: structured messages only; text never contains a call. The trainer's ``agent_type=hf`` uses
  it: the trainer reads the model's own tool-call format with the chat template's family (transformers' response
  parsing) and hands the env the message; a turn it cannot read carries ``parse_errors``.

A parser never raises on agent output: a malformed call becomes an entry of ``ParseResult.errors``.
Each parser can also write calls in its format (``format_calls``), the inverse of parsing, which
golden demonstrations use.
"""

from agentfly_envs.parsers.base import (
    PARSERS,
    Action,
    Parser,
    ParseResult,
    ToolCall,
    call_from_object,
    get_parser,
    parse_message,
)
from agentfly_envs.parsers.gui import GuiParser
from agentfly_envs.parsers.text import CodeParser, HermesParser, ReActParser, ToolCallsParser

__all__ = [
    "PARSERS",
    "Action",
    "CodeParser",
    "GuiParser",
    "HermesParser",
    "ParseResult",
    "Parser",
    "ReActParser",
    "ToolCall",
    "ToolCallsParser",
    "call_from_object",
    "get_parser",
    "parse_message",
]
