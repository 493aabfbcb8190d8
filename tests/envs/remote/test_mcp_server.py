"""``python -m agentfly_envs serve ENV_ID --mcp``: an env's tools served to MCP clients, over stdio and streamable
HTTP, played by the mcp SDK's own client and by an env's ``mcp:`` entry."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time

import anyio
import gymnasium as gym
import pytest

from agentfly_envs.__main__ import main
from agentfly_envs.tools.mcp_client import McpServerError
from tests.helpers.paths import REPO_ROOT
from tests.helpers.processes import free_port
from tests.helpers.readme import readme_command, runs_readme_command

pytest.importorskip("mcp", reason='needs the mcp SDK (the "mcp" extra)')


@runs_readme_command("python -m agentfly_envs serve agentfly/Arith-Calc --mcp")
def test_the_sdks_client_lists_and_calls_the_served_tools(readme):
    from mcp.client import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    command = readme_command(readme)
    executable, *args = command.argv

    async def session() -> tuple[list, list]:
        parameters = StdioServerParameters(command=executable, args=args, cwd=str(REPO_ROOT))
        async with Client(stdio_client(parameters)) as client:
            listing = (await client.list_tools()).tools
            results = [
                await client.call_tool("calculator", {"expression": "6 * 7"}),
                await client.call_tool("calculator", {"expression": "1 / 0"}),
                await client.call_tool("calculator", {"expr": "1"}),
                await client.call_tool("python", {"code": "print(1)"}),
            ]
            return listing, results

    listing, results = anyio.run(session)
    assert [tool.name for tool in listing] == ["calculator"]
    assert listing[0].description.startswith("Evaluate an arithmetic expression and return its value.")
    assert listing[0].input_schema["required"] == ["expression"]
    assert [(result.content[0].text, result.is_error) for result in results] == [
        ("42", False),
        ("division by zero", True),
        (
            "bad arguments for calculator: unknown argument(s) ['expr']; missing required argument(s) ['expression']. "
            "calculator takes (expression: string).",
            True,
        ),
        ("unknown tool 'python'; available tools: calculator", True),
    ]


@pytest.mark.slow  # two starts of the served env's process (the listing, then the session): about 15 s
def test_an_env_plays_another_envs_served_tools_with_their_state():
    kwargs = json.dumps({"tools": ["calculator", "python_executor", "answer"]})
    entry = f"mcp:{shlex.quote(sys.executable)} -m agentfly_envs serve agentfly/Arith-Calc --mcp --env-kwargs "
    entry += shlex.quote(kwargs)
    env = gym.make("agentfly/Arith-Calc", tools=[entry, "answer"])
    _, info = env.reset(seed=0)
    assert [tool["function"]["name"] for tool in info["tools"]] == ["calculator", "python_executor", "answer"]
    turn = '<tool_call>{"name": "python_executor", "arguments": {"code": %s}}</tool_call>'
    assert env.step(turn % json.dumps("x = 20\nprint(x)"))[0] == "20\n"
    assert env.step(turn % json.dumps("print(x + 22)"))[0] == "42\n"  # the served notebook keeps its variables
    observation, _, _, _, info = env.step(turn % json.dumps("1/0"))
    assert "ZeroDivisionError" in observation and not any(info["error_counts"].values())  # the code's own output
    env.close()


@pytest.mark.slow  # a served env's process and two sessions with it: about 8 s
def test_the_tools_are_served_over_streamable_http():
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "agentfly_envs", "serve", "agentfly/Arith-Calc", "--mcp", "http", "--port", str(port)],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                env = gym.make("agentfly/Arith-Calc", tools=[f"mcp:http://127.0.0.1:{port}/mcp"])
                break
            except McpServerError:
                assert server.poll() is None and time.monotonic() < deadline, server.communicate()[1][-2000:]
                time.sleep(0.2)
        env.reset(seed=0)
        turn = '<tool_call>{"name": "calculator", "arguments": {"expression": "2 ** 10"}}</tool_call>'
        assert env.step(turn)[0] == "1024"
        env.close()
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_an_env_with_nothing_to_serve_is_a_one_line_error(capsys):
    assert main(["serve", "agentfly/Arith-Calc", "--mcp", "--env-kwargs", '{"tools": ["answer"]}']) == 2
    error = capsys.readouterr().err
    assert error == (
        "error: cannot serve agentfly/Arith-Calc: the env's tools ['answer'] need an episode or end one: none can be "
        "served over MCP\n"
    )
