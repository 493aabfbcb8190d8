"""MCP tools: an env's ``mcp:`` entries, with a server written here (FastMCP), the MCP project's published reference
server, servers that exit or answer nonsense, and a streamable-HTTP server."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import pytest

from agentfly_envs.tools.mcp_client import McpServerError
from tests.helpers.paths import REPO_ROOT
from tests.helpers.processes import free_port, lines_printed_without

pytest.importorskip("mcp", reason='needs the mcp SDK (the "mcp" extra)')

SERVERS = Path(__file__).parent / "mcp_servers"
TOOLBOX = f"mcp:{shlex.quote(sys.executable)} {SERVERS / 'toolbox.py'}"
"""The tests' FastMCP server, over stdio."""
EVERYTHING = shutil.which("mcp-server-everything") or str(
    REPO_ROOT / ".ci" / "mcp-servers" / "node_modules" / ".bin" / "mcp-server-everything"
)
"""The MCP project's reference server (npm: @modelcontextprotocol/server-everything), which .ci/run installs."""


def call(env: gym.Env, name: str, **arguments: object) -> tuple[str, dict]:
    """Plays one turn calling ``name``; its observation and info."""
    observation, _, _, _, info = env.step(
        f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"
    )
    return observation, info


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_until_gone(pid: int, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pid)


def test_a_servers_tools_are_the_envs_with_its_schemas_and_answer_calls():
    env = gym.make("agentfly/Arith-Calc", tools=["calculator", TOOLBOX], disable_env_checker=True)
    _, info = env.reset(seed=0)
    assert [tool["function"]["name"] for tool in info["tools"]] == [
        "calculator", "add", "shout", "fail", "nap", "pid", "die", "picture"
    ]  # fmt: skip
    add = info["tools"][1]["function"]
    assert add["description"] == "Add two integers."
    assert add["parameters"]["required"] == ["a", "b"]
    assert add["parameters"]["properties"]["a"]["type"] == "integer"

    assert call(env, "add", a=2, b=40)[0] == "42"
    assert call(env, "calculator", expression="6*7")[0] == "42"
    assert call(env, "shout", text=12)[0] == "12"  # a number for a string parameter is passed on as text
    assert call(env, "picture")[0] == "[image: image/png, 70 bytes]"
    observation, info = call(env, "fail", reason="the disk is full")
    assert observation == "Error: Error executing tool fail: the disk is full"
    assert info["error_counts"]["tool_error"] == 1 and "infra_failure" not in info
    observation, info = call(env, "add", a="two", b=2)
    assert observation.startswith("Error: bad arguments for add: argument 'a' must be a integer")
    assert info["error_counts"]["bad_arguments"] == 1
    pid = int(call(env, "pid")[0])
    assert int(call(env, "pid")[0]) == pid  # one server for the env's calls
    env.close()
    assert wait_until_gone(pid), "env.close() left the server running"


def test_a_call_past_the_timeout_is_an_error_observation_and_the_server_goes_on():
    env = gym.make("agentfly/Arith-Calc", tools=[TOOLBOX], tool_options={TOOLBOX: {"timeout_s": 0.5}})
    env.reset(seed=0)
    start = time.perf_counter()
    observation, info = call(env, "nap", seconds=30)
    assert observation == "Error: nap did not answer within 0.5 s"
    assert time.perf_counter() - start < 10 and info["error_counts"]["tool_error"] == 1
    assert call(env, "add", a=1, b=1)[0] == "2"
    assert env.unwrapped.tools["add"].connection.starts == 1
    env.close()


def test_a_dead_server_is_restarted_and_one_that_dies_again_is_an_infrastructure_failure():
    env = gym.make("agentfly/Arith-Calc", tools=[TOOLBOX])
    env.reset(seed=0)
    pid = int(call(env, "pid")[0])
    os.kill(pid, signal.SIGKILL)
    assert wait_until_gone(pid)
    observation, info = call(env, "add", a=2, b=3)  # the call is not lost: a new server answers it
    assert observation == "5" and "infra_failure" not in info and not any(info["error_counts"].values())
    assert int(call(env, "pid")[0]) != pid

    observation, reward, terminated, truncated, info = env.step(
        '<tool_call>{"name": "die", "arguments": {}}</tool_call>'
    )  # it kills the restarted server too
    assert (reward, terminated, truncated) == (0.0, False, True)
    assert info["infra_failure"].startswith(
        f"tool die: the MCP server {TOOLBOX.removeprefix('mcp:')} stopped answering and did not come back after a "
        "restart"
    )
    assert observation == f"Error: {info['infra_failure'].removeprefix('tool die: ')}"
    assert "\n" not in observation and not any(info["error_counts"].values())
    env.close()


@pytest.mark.parametrize(
    ("entry", "options", "message"),
    [
        (
            f"mcp:{shlex.quote(sys.executable)} -c 'import sys; sys.exit(3)'",
            {},
            "did not start: Connection closed",
        ),
        (
            f"mcp:{shlex.quote(sys.executable)} {SERVERS / 'nonsense.py'} lines",
            {"startup_timeout_s": 1},
            "did not answer MCP's handshake within 1 s",
        ),
        ("mcp:no-such-mcp-server --port 1", {}, "did not start: [Errno 2] No such file or directory"),
        ("mcp:http://127.0.0.1:9/mcp", {}, "did not start: All connection attempts failed"),
    ],
    ids=["exits", "answers-nonsense", "no-such-command", "nothing-listening"],
)
def test_a_server_that_cannot_start_is_a_one_line_error_of_gym_make(entry, options, message):
    with pytest.raises(McpServerError) as caught:
        gym.make("agentfly/Arith-Calc", tools=[entry], tool_options={entry: options} if options else None)
    text = str(caught.value)
    assert text.startswith(f"the MCP server {entry.removeprefix('mcp:')} ") and message in text
    assert "\n" not in text


@pytest.mark.parametrize(
    ("tools", "options", "error", "message"),
    [
        (["mcp:"], None, ValueError, "mcp: needs a server: a command line (mcp:python my_server.py) or a URL"),
        (["mcp:python 'server.py"], None, ValueError, "mcp:python 'server.py is not a command line (No closing"),
        ([TOOLBOX, TOOLBOX], None, ValueError, f"{TOOLBOX} has tool(s) ['add', 'shout', 'fail', 'nap', 'pid'"),
        ([TOOLBOX], {TOOLBOX: {"timeout": 1}}, TypeError, f"tool_options[{TOOLBOX!r}]: "),
    ],
    ids=["empty", "unclosed-quote", "twice", "unknown-option"],
)
def test_a_bad_entry_or_option_is_a_one_line_error(tools, options, error, message):
    with pytest.raises(error) as caught:
        gym.make("agentfly/Arith-Calc", tools=tools, tool_options=options)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_a_server_answering_calls_with_nonsense_is_an_infrastructure_failure_after_one_restart():
    entry = f"mcp:{shlex.quote(sys.executable)} {SERVERS / 'nonsense.py'} calls"
    env = gym.make("agentfly/Arith-Calc", tools=[entry])
    env.reset(seed=0)
    observation, _, _, truncated, info = env.step('<tool_call>{"name": "echo", "arguments": {}}</tool_call>')
    assert truncated and info["infra_failure"].endswith(
        "stopped answering and did not come back after a restart (it answered echo with a CallToolResult that MCP "
        "does not allow)"
    )
    assert observation == f"Error: {info['infra_failure'].removeprefix('tool echo: ')}"
    assert env.unwrapped.tools["echo"].connection.starts == 2
    env.close()


def test_a_streamable_http_server_is_a_url_entry_and_its_loss_an_infrastructure_failure():
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, str(SERVERS / "toolbox.py"), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    entry = f"mcp:http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                env = gym.make("agentfly/Arith-Calc", tools=["calculator", entry])
                break
            except McpServerError:
                assert server.poll() is None and time.monotonic() < deadline, server.communicate()[1][-2000:]
                time.sleep(0.2)
        _, info = env.reset(seed=0)
        assert [tool["function"]["name"] for tool in info["tools"]][:3] == ["calculator", "add", "shout"]
        assert call(env, "add", a=20, b=22)[0] == "42"
        assert call(env, "pid")[0] == str(server.pid)
    finally:
        server.kill()
        server.wait(timeout=30)
    _, info = call(env, "add", a=1, b=2)
    assert info["infra_failure"].startswith(f"tool add: the MCP server http://127.0.0.1:{port}/mcp ")
    env.close()


@pytest.mark.skipif(
    not os.access(EVERYTHING, os.X_OK),
    reason="needs the MCP reference server: npm install --prefix .ci/mcp-servers "
    "@modelcontextprotocol/server-everything@2026.8.31 (as .ci/run does)",
)
def test_the_mcp_projects_published_reference_server_works_offline():
    entry = f"mcp:{EVERYTHING}"
    env = gym.make("agentfly/Arith-Calc", tools=["calculator", entry])
    _, info = env.reset(seed=0)
    schemas = {tool["function"]["name"]: tool["function"] for tool in info["tools"]}
    assert {"calculator", "echo", "get-sum", "get-tiny-image"} <= set(schemas)
    assert schemas["get-sum"]["description"] == "Returns the sum of two numbers"
    assert schemas["get-sum"]["parameters"]["required"] == ["a", "b"]
    assert call(env, "get-sum", a=2, b=3)[0] == "The sum of 2 and 3 is 5."
    assert call(env, "echo", message="hello")[0] == "Echo: hello"
    assert "\n[image: image/png, 4033 bytes]\n" in call(env, "get-tiny-image")[0]
    observation, info = call(env, "get-sum", a="two", b=3)
    assert observation.startswith("Error: bad arguments for get-sum") and info["error_counts"]["bad_arguments"] == 1
    env.close()


def test_without_the_mcp_extra_an_entry_is_a_one_line_error_naming_it():
    code = (
        "import gymnasium as gym, agentfly_envs\n"
        "try:\n    gym.make('agentfly/Arith-Calc', tools=['mcp:python server.py'])\n"
        "except Exception as error:\n    print(type(error).__name__, error)"
    )
    assert lines_printed_without("mcp", code) == [
        'McpServerError MCP tools need the mcp SDK (the "mcp" extra): pip install "agentfly-rl[mcp]"'
    ]
