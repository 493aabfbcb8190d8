"""An MCP server for the tests, written with the mcp SDK's FastMCP (``MCPServer`` since mcp 2).

``python toolbox.py`` serves it over stdio; ``python toolbox.py --port N`` over streamable HTTP at
``http://127.0.0.1:N/mcp``.
"""

import argparse
import os
import time

from mcp.server.mcpserver import MCPServer
from mcp.types import ImageContent

server = MCPServer("toolbox")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def shout(text: str) -> str:
    """Return the text in capitals."""
    return text.upper()


@server.tool()
def fail(reason: str) -> str:
    """Fail with the reason given."""
    raise ValueError(reason)


@server.tool()
def nap(seconds: float) -> str:
    """Sleep for a number of seconds."""
    time.sleep(seconds)
    return "awake"


@server.tool()
def pid() -> int:
    """The server process's id."""
    return os.getpid()


@server.tool()
def die() -> str:
    """End the server process at once."""
    os._exit(3)


@server.tool()
def picture() -> ImageContent:
    """A 1x1 PNG image."""
    png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
    return ImageContent(type="image", data=png, mime_type="image/png")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int)
    args = parser.parse_args()
    if args.port is None:
        server.run()
    else:
        server.run("streamable-http", port=args.port)
