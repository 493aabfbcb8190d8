"""An env's tools as an MCP server (``python -m agentfly_envs serve ENV_ID --mcp``), so that any MCP client can use
our sandboxed Python, search and calculator.

The server lists every tool of the env (``gymnasium.make(env_id, **env_kwargs)``) but the ones that need an episode
(a world's tools) or end one (``answer``), with the schemas the env shows its agent; ``tools/call`` runs the tool as
the env would (arguments checked against the schema, the output cut to the env's ``max_tool_output_chars``). Any
``Error:`` the env would show the agent (bad arguments, the tool's own error, an infrastructure failure) is a result
marked ``isError`` with the message. Calls run one at a time, in a worker thread.

The tools keep their state for the server's life (the ``python_executor`` notebook's variables, shared by the
server's clients); a search tool needs a corpus or service of its own (``tool_options={"search": {"backend":
"bm25", "corpus_file": ...}}``): the default backend searches an episode's paragraphs, and there is no episode here.

Needs the ``mcp`` extra (``pip install "agentfly-rl[mcp]"``).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import gymnasium as gym

from agentfly_envs.core import ToolEnv, truncate_middle
from agentfly_envs.tools import CallStatus, Tool
from agentfly_envs.tools.world import WorldTool

try:
    import anyio
    from mcp.server.lowlevel import Server
    from mcp.types import CallToolResult, ListToolsResult, TextContent
    from mcp.types import Tool as ToolInfo
except ImportError as error:  # the extra is missing
    raise ImportError(
        'serving tools over MCP needs the mcp SDK (the "mcp" extra): pip install "agentfly-rl[mcp]"'
    ) from error


def served_tools(env: ToolEnv) -> dict[str, Tool]:
    """The tools of ``env`` an MCP client can call: all but a world's (they need an episode) and those that end an
    episode (``answer``)."""
    return {name: tool for name, tool in env.tools.items() if not tool.ends_episode and not isinstance(tool, WorldTool)}


def create_mcp_server(env: gym.Env) -> Server[Any]:
    """The MCP server of ``env``'s tools (see the module docstring).

    Raises:
        ValueError: ``env`` is not a :class:`~agentfly_envs.core.ToolEnv`, or has no tool to serve.
    """
    if not isinstance(env, ToolEnv):
        raise ValueError(f"only an agentfly tool env's tools can be served over MCP, not a {type(env).__name__}'s")
    tools = served_tools(env)
    if not tools:
        raise ValueError(f"the env's tools {list(env.tools)} need an episode or end one: none can be served over MCP")
    listing = [
        ToolInfo(
            name=name,
            description=tool.schema["function"].get("description", ""),
            input_schema=tool.schema["function"].get("parameters") or {"type": "object", "properties": {}},
        )
        for name, tool in tools.items()
    ]
    one_at_a_time = threading.Lock()

    def run(name: str, arguments: Mapping[str, Any]) -> CallToolResult:
        tool = tools.get(name)
        if tool is None:
            text, failed = f"unknown tool {name!r}; available tools: {', '.join(tools)}", True
        else:
            with one_at_a_time:
                result = tool(arguments)
            text, failed = result.content, result.status is not CallStatus.OK
        text = truncate_middle(text.removeprefix("Error: ") if failed else text, env.max_tool_output_chars)
        return CallToolResult(content=[TextContent(type="text", text=text)], is_error=failed)

    async def on_list_tools(context: Any, params: Any) -> ListToolsResult:
        return ListToolsResult(tools=listing)

    async def on_call_tool(context: Any, params: Any) -> CallToolResult:
        return await anyio.to_thread.run_sync(run, params.name, params.arguments or {})

    return Server("agentfly", on_list_tools=on_list_tools, on_call_tool=on_call_tool)


def serve_mcp(env_id: str, env_kwargs: Mapping[str, Any], transport: str, host: str, port: int) -> None:
    """Serves the tools of ``gymnasium.make(env_id, **env_kwargs)`` over MCP until the client leaves (``stdio``:
    the protocol on stdin and stdout) or the process is stopped (``http``: streamable HTTP at
    ``http://host:port/mcp``); the env is closed at the end.

    Raises:
        ValueError: the env has no tool to serve, or ``transport`` is neither ``stdio`` nor ``http``.
    """
    if transport not in ("stdio", "http"):
        raise ValueError(f"--mcp takes stdio or http, got {transport!r}")
    env = gym.make(env_id, disable_env_checker=True, **env_kwargs)
    try:
        server = create_mcp_server(env.unwrapped)
        if transport == "stdio":
            from mcp.server.stdio import stdio_server

            async def main() -> None:
                async with stdio_server() as (read, write):
                    await server.run(read, write, server.create_initialization_options())

            anyio.run(main)
        else:
            import uvicorn

            uvicorn.run(server.streamable_http_app(host=host), host=host, port=port, log_level="warning")
    finally:
        env.close()
