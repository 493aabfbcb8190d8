"""A stdio "MCP server" that answers nonsense, for the tests; no mcp SDK, raw JSON-RPC lines.

``python nonsense.py lines``: every line it reads is answered with a line that is not JSON.
``python nonsense.py calls``: the handshake and ``tools/list`` are answered as MCP says (one tool, ``echo``), every
``tools/call`` with a result of the wrong shape.
"""

import json
import sys

TOOL = {"name": "echo", "description": "Echo a text.", "inputSchema": {"type": "object", "properties": {}}}


def answer(request: dict) -> dict | None:
    """The JSON-RPC answer to ``request`` (``None`` for a notification)."""
    if "id" not in request:
        return None
    method = request.get("method")
    if method == "initialize":
        result = {
            "protocolVersion": request["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "nonsense", "version": "0"},
        }
    elif method == "tools/list":
        result = {"tools": [TOOL]}
    elif method == "tools/call":
        result = {"content": "bananas", "isError": "perhaps"}
    else:
        return {"jsonrpc": "2.0", "id": request["id"], "error": {"code": -32601, "message": f"no {method}"}}
    return {"jsonrpc": "2.0", "id": request["id"], "result": result}


if __name__ == "__main__":
    for line in sys.stdin:
        if sys.argv[1] == "lines":
            print("bananas are yellow", flush=True)
        elif (reply := answer(json.loads(line))) is not None:
            print(json.dumps(reply), flush=True)
