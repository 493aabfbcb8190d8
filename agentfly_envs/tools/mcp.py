"""Tools from MCP servers: ``tools=["calculator", "mcp:python my_server.py", "mcp:http://127.0.0.1:8000/mcp"]``.

An ``mcp:`` entry of an env's tools names a `Model Context Protocol <https://modelcontextprotocol.io>`_ server: a
command line (a stdio server the env starts as a child process) or an ``http(s)://`` URL (a streamable-HTTP server).
Every tool the server lists (``tools/list``) becomes a tool of the env under its own name, with the server's
description and JSON schema (so ``info["tools"]`` and the chat template show them); a call goes to ``tools/call``.
Options, via the env's ``tool_options`` keyed by the entry::

    {"mcp:python my_server.py": {"timeout_s": 10}}          # longest wait for one call (default 30 s)
    {"mcp:python my_server.py": {"startup_timeout_s": 120}}  # for the server to start (default 60 s)

Each env has its own session with each server (a stdio server runs once per env), opened at the env's first call
and closed by ``env.close()``; the first env of a process lists the tools (starting the server for that, and
stopping it), the others reuse the listing. The server's state is its own: an episode's start does not reset it.

What a call's result shows the agent: its text (an image, audio or binary resource as a bracketed line naming it),
or the structured result as JSON when there is no text. A result the server marks ``isError``, a call the server
refuses and a call that runs past ``timeout_s`` are ``Error:`` observations (``tool_error``). A server that is gone
(exited, unreachable, answering nonsense) is restarted once; if the restarted one fails too, the call is an
infrastructure failure (:class:`~agentfly_envs.tools.mcp_client.McpServerError`): the env ends the episode
unscored. A server that cannot be started when the env is made raises the same error from ``gymnasium.make``.

Needs the ``mcp`` extra (``pip install "agentfly-rl[mcp]"``).
"""

from __future__ import annotations

import json
import threading
from typing import TYPE_CHECKING, Any

from agentfly_envs.tools.base import Tool, ToolError
from agentfly_envs.tools.mcp_client import McpCallError, McpConnection, McpServerSpec

if TYPE_CHECKING:
    from mcp.types import CallToolResult
    from mcp.types import Tool as McpToolInfo

MCP_PREFIX = "mcp:"
"""The prefix of a tool entry that names an MCP server."""
NO_OUTPUT = "(no output)"
"""What a call whose result holds nothing returns."""

_listings: dict[McpServerSpec, list[dict[str, Any]]] = {}
"""The schemas each server listed, by server, for this process's later envs."""
_listings_lock = threading.Lock()


class McpTool(Tool):
    """One tool of an MCP server, called through the env's session with the server.

    Args:
        schema: The OpenAI-style function schema built from the server's listing.
        connection: The env's session with the server (shared by the server's tools; the first to close it wins).
    """

    def __init__(self, schema: dict[str, Any], connection: McpConnection) -> None:
        super().__init__(self.call, name=schema["function"]["name"])
        self.schema = schema  # the server's, instead of one read from a docstring
        self.connection = connection

    def call(self, **arguments: Any) -> str:
        """Calls the tool on the server; its result as text (see the module docstring).

        Raises:
            ToolError: the result is an error, or the server refused the call or did not answer in time.
            McpServerError: the server is gone and a restarted one failed too.
        """
        try:
            result = self.connection.call_tool(self.name, arguments)
        except McpCallError as error:
            raise ToolError(str(error)) from None
        text = result_text(result)
        if result.is_error:
            raise ToolError(text if text != NO_OUTPUT else f"{self.name} failed")
        return text

    def close(self) -> None:
        """Closes the session with the server (a stdio server's process ends)."""
        self.connection.close()

    def __repr__(self) -> str:
        return f"McpTool({self.name!r}, server={str(self.connection.spec)!r})"


def function_schema(tool: McpToolInfo) -> dict[str, Any]:
    """The OpenAI-style schema of an MCP tool: its name, description and input JSON schema."""
    parameters = dict(tool.input_schema or {"type": "object", "properties": {}})
    return {
        "type": "function",
        "function": {"name": tool.name, "description": tool.description or "", "parameters": parameters},
    }


def result_text(result: CallToolResult) -> str:
    """What the agent reads of a call's result: its text parts, a bracketed line for each other part, or the
    structured result as JSON when there are no parts; :data:`NO_OUTPUT` when there is nothing."""
    from mcp.types import AudioContent, EmbeddedResource, ImageContent, ResourceLink, TextContent

    parts = []
    for part in result.content:
        if isinstance(part, TextContent):
            parts.append(part.text)
        elif isinstance(part, ImageContent | AudioContent):
            kind = "image" if isinstance(part, ImageContent) else "audio"
            size = len(part.data) * 3 // 4 - (len(part.data) - len(part.data.rstrip("=")))  # of the base64 text
            parts.append(f"[{kind}: {part.mime_type}, {size} bytes]")
        elif isinstance(part, ResourceLink):
            parts.append(f"[resource link: {part.uri}]")
        elif isinstance(part, EmbeddedResource):
            text = getattr(part.resource, "text", None)
            parts.append(text if text is not None else f"[resource: {part.resource.uri}]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts) or NO_OUTPUT


def mcp_tools(entry: str, timeout_s: float = 30.0, startup_timeout_s: float = 60.0) -> list[McpTool]:
    """The tools of the server that ``entry`` (``mcp:<command line>`` or ``mcp:<url>``) names, for one env.

    Args:
        entry: The tool entry, with its ``mcp:`` prefix.
        timeout_s: Longest wait for one call, in seconds.
        startup_timeout_s: Longest wait for the server to start, in seconds.

    Raises:
        ValueError: ``entry`` names no server, or the server lists no tools.
        McpServerError: the server cannot be started or reached (when this process has not listed its tools yet).
    """
    spec = McpServerSpec.parse(entry.removeprefix(MCP_PREFIX))
    connection = McpConnection(spec, timeout_s, startup_timeout_s)
    with _listings_lock:
        schemas = _listings.get(spec)
    if schemas is None:
        lister = McpConnection(spec, timeout_s, startup_timeout_s)
        try:
            schemas = [function_schema(tool) for tool in lister.list_tools()]
        finally:
            lister.close()  # the env's session opens at its first call: a made env runs no server yet
        if not schemas:
            raise ValueError(f"the MCP server {spec} lists no tools")
        with _listings_lock:
            _listings[spec] = schemas
    return [McpTool(json.loads(json.dumps(schema)), connection) for schema in schemas]


def is_mcp_entry(name: str) -> bool:
    """Whether a tool entry names an MCP server (``mcp:...``)."""
    return name.startswith(MCP_PREFIX)
