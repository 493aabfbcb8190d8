"""Serving envs in OpenEnv's protocol (agentfly_envs/remote/server.py) and playing them with agentfly/Remote
(agentfly_envs/remote/client.py)."""

from __future__ import annotations

import asyncio
import json
import os
import resource
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import gymnasium as gym
import pytest

import agentfly_envs  # noqa: F401  (registers the env ids)
from agentfly_envs import TOOLS, InfrastructureError, Tool
from agentfly_envs.errors import EpisodeFinishedError
from agentfly_envs.runtime import RemoteEnvError
from tests.envs.hostile import HOSTILE_ACTIONS
from tests.helpers.paths import REPO_ROOT
from tests.helpers.processes import run_cli

pytest.importorskip("openenv", reason='needs openenv-core (the "openenv" extra)')
from agentfly_envs.remote import ServerThread, create_app

KWARGS = {"level": "easy"}


@pytest.fixture(scope="module")
def url():
    with ServerThread(create_app("agentfly/Arith-Calc", KWARGS, max_sessions=4)) as served:
        yield served


def info(url: str) -> dict:
    with urllib.request.urlopen(url + "/info", timeout=10) as response:
        return json.loads(response.read())


def test_openenv_client_plays_a_golden_episode(url):
    from openenv.core.generic_client import GenericEnvClient

    local = gym.make("agentfly/Arith-Calc", **KWARGS)
    local.reset(options={"index": 3})
    with GenericEnvClient(base_url=url).sync() as client:
        result = client.reset(index=3)
        assert result.observation["messages"][1]["role"] == "user" and result.observation["tools"]
        for action in local.unwrapped.golden_actions():
            result = client.step({"text": action})
            assert result.observation["text"] == local.step(action)[0]
        assert (result.reward, result.done, result.observation["terminated"]) == (1.0, True, True)
        assert result.observation["info"]["reward_components"]["correct"] == 1.0


def test_remote_env_steps_as_the_local_env(url):
    remote, local = gym.make("agentfly/Remote", url=url), gym.make("agentfly/Arith-Calc", **KWARGS)
    assert len(remote.unwrapped.tasks) == len(local.unwrapped.tasks)
    for reset in ({"index": 1}, {"task": local.unwrapped.tasks.row(2)}):
        opening, local_opening = remote.reset(options=reset), local.reset(options=reset)
        assert opening == local_opening
        for action in [*HOSTILE_ACTIONS[:12], *local.unwrapped.golden_actions()]:
            if isinstance(action, str) or "tool_calls" in action:
                result, expected = remote.step(action), local.step(action)
                drop = ("tool_latency_s",)
                assert result[:4] == expected[:4]
                assert {k: v for k, v in result[4].items() if k not in drop} == {
                    k: v for k, v in expected[4].items() if k not in drop
                }
                if expected[2] or expected[3]:
                    break
    with pytest.raises(EpisodeFinishedError):
        remote.step("again")
    remote.close()


def test_bad_requests_get_clear_errors(url):
    from websockets.sync.client import connect

    env = gym.make("agentfly/Remote", url=url)
    with pytest.raises(RemoteEnvError, match=r"refused the reset: .*question"):
        env.reset(options={"task": {"level": 3}})
    env.close()
    with connect(url.replace("http", "ws") + "/ws") as ws:
        ws.send(json.dumps({"type": "reset", "data": {"index": 0}}))
        ws.recv(timeout=10)
        for action, problem in (({"txt": "hi"}, "Extra inputs are not permitted"), ({}, 'an action is {"text"')):
            ws.send(json.dumps({"type": "step", "data": action}))
            error = json.loads(ws.recv(timeout=10))
            assert error["type"] == "error" and error["data"]["code"] == "VALIDATION_ERROR"
            assert problem in error["data"]["errors"][0]["msg"]
        ws.send("not json")
        assert "Invalid JSON" in json.loads(ws.recv(timeout=10))["data"]["message"]
    with pytest.raises(ValueError, match="parses 'hermes' turns, not 'react'"):
        gym.make("agentfly/Remote", url=url, parser="react")


FULL = "all 4 sessions of this server are open (serve --max-sessions): close one or try again later"


def test_sessions_are_bounded_and_one_more_is_refused_in_one_line(url):
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    assert info(url)["sessions"] == 0
    envs = [gym.make("agentfly/Remote", url=url) for _ in range(5)]
    for env in envs[:4]:
        env.reset(options={"index": 0})
    assert info(url)["sessions"] == 4
    with connect(url.replace("http", "ws") + "/ws") as ws:  # an OpenEnv client reads the error, then the close
        answer = json.loads(ws.recv(timeout=10))
        assert answer["data"]["code"] == "CAPACITY_REACHED" and answer["data"]["message"] == FULL
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
        assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (1013, FULL)
    line = f"the env server at {url} has no room for a session: {FULL} (CAPACITY_REACHED)"
    with pytest.raises(RemoteEnvError) as refused:
        envs[4].reset(options={"index": 0})
    assert str(refused.value) == line
    crossed = envs[4].unwrapped  # its reset sent after the server's refusal and close arrived: the close says it
    crossed._ws = crossed._session.enter_context(crossed._open())
    time.sleep(0.5)
    with pytest.raises(RemoteEnvError) as refused:
        crossed.reset(options={"index": 0})
    assert str(refused.value) == line
    envs[0].close()
    deadline = time.monotonic() + 10
    while info(url)["sessions"] == 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert envs[4].reset(options={"index": 0})[0]  # a refused env opens a session once there is room
    for env in envs:
        env.close()
    deadline = time.monotonic() + 10
    while info(url)["sessions"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert info(url)["sessions"] == 0


def test_64_sessions_open_at_once_play_without_errors_and_all_close():
    sessions = 64
    golden = gym.make("agentfly/Arith-Calc", **KWARGS).unwrapped
    rewards: dict[int, float] = {}
    with ServerThread(create_app("agentfly/Arith-Calc", KWARGS, max_sessions=sessions)) as served:
        envs = [gym.make("agentfly/Remote", url=served) for _ in range(sessions + 1)]

        def play(index: int) -> None:
            envs[index].reset(options={"index": index})
            for action in golden.golden_actions(golden.tasks.row(index)):
                _, reward, *_ = envs[index].step(action)
            rewards[index] = reward

        threads = [threading.Thread(target=play, args=(index,)) for index in range(sessions)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert info(served)["sessions"] == sessions
        with pytest.raises(RemoteEnvError, match=f"has no room for a session: all {sessions} sessions"):
            envs[sessions].reset(options={"index": 0})
        for env in envs:
            env.close()
        deadline = time.monotonic() + 30
        while info(served)["sessions"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert info(served)["sessions"] == 0
    assert rewards == dict.fromkeys(range(sessions), 1.0)


class SlowToOpen:
    """ASGI wrapper: a server too busy to answer a WebSocket handshake for ``delay`` seconds."""

    def __init__(self, app, delay: float) -> None:
        self.app, self.delay = app, delay

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "websocket":
            await asyncio.sleep(self.delay)
        await self.app(scope, receive, send)


def test_a_busy_server_gets_the_step_timeout_to_open_a_session():
    with ServerThread(SlowToOpen(create_app("agentfly/Arith-Calc", KWARGS), delay=1.5)) as served:
        env = gym.make("agentfly/Remote", url=served, connect_timeout=0.5)
        started = time.monotonic()
        opening, _ = env.reset(options={"index": 0})
        assert time.monotonic() - started >= 1.5 and opening
        env.close()
        hasty = gym.make("agentfly/Remote", url=served, timeout=0.5)
        with pytest.raises(RemoteEnvError, match="stopped answering"):
            hasty.reset(options={"index": 0})


def test_idle_sessions_time_out_and_a_dead_server_is_an_error_observation():
    server = ServerThread(create_app("agentfly/Arith-Calc", KWARGS, session_timeout=1.0))
    url = server.start()
    idle, live = gym.make("agentfly/Remote", url=url), gym.make("agentfly/Remote", url=url)
    idle.reset(options={"index": 0})
    deadline = time.monotonic() + 15  # openenv-core's reaper looks every 5 s
    while info(url)["sessions"] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert info(url)["sessions"] == 0
    observation, _, terminated, truncated, step_info = idle.step("The answer is \\boxed{1}.")
    assert observation.startswith("Error: the environment server") and (terminated, truncated) == (False, True)
    assert step_info["remote_failure"] in ("server_lost", "refused")
    live.reset(options={"index": 0})
    server.stop()
    observation, _, _, truncated, step_info = live.step("The answer is \\boxed{1}.")
    assert observation == "Error: the environment server stopped answering; the episode ends here." and truncated
    with pytest.raises(RemoteEnvError, match="cannot reset the env at"):
        live.reset(options={"index": 0})
    with pytest.raises(RemoteEnvError, match=r"cannot reach an env server at .*is it running"):
        gym.make("agentfly/Remote", url=url)


def _judge(claim: str) -> str:
    """Ask the judge, which is down.

    Args:
        claim: What to judge.
    """
    raise InfrastructureError("the judge did not answer")


def test_infrastructure_failures_come_through_and_a_lost_server_is_one(monkeypatch):
    monkeypatch.setitem(TOOLS._entries, "judge", Tool(_judge, name="judge"))
    judge_call = '<tool_call>{"name": "judge", "arguments": {"claim": "42"}}</tool_call>'
    with ServerThread(create_app("agentfly/Arith-Calc", {**KWARGS, "tools": ["judge"]})) as served:
        env = gym.make("agentfly/Remote", url=served)
        env.reset(options={"index": 0})
        observation, reward, terminated, truncated, step_info = env.step(judge_call)
        assert observation == "Error: the judge did not answer" and (reward, terminated, truncated) == (
            0.0,
            False,
            True,
        )
        assert step_info["infra_failure"] == "tool judge: the judge did not answer"
        assert "remote_failure" not in step_info and not any(step_info["error_counts"].values())
        env.reset(options={"index": 0})
    observation, _, _, truncated, step_info = env.step("The answer is \\boxed{1}.")
    assert truncated and step_info["remote_failure"] == "server_lost"
    assert step_info["infra_failure"] == "the environment server stopped answering; the episode ends here."


def test_serve_command_refuses_an_unknown_env_in_one_line():
    result = run_cli([sys.executable, "-m", "agentfly_envs", "serve", "agentfly/Arith-Calcc", "--port", "0"])
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert "cannot serve agentfly/Arith-Calcc" in result.stderr and "Arith-Calc" in result.stderr


def serve_under(soft: int, hard: int, *options: str) -> subprocess.Popen[str]:
    """``python -m agentfly_envs serve agentfly/Arith-Calc --port 0 *options`` started with at most ``soft`` open
    files (``hard``: the most it may raise that to), its output piped."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    return subprocess.Popen(
        [sys.executable, "-m", "agentfly_envs", "serve", "agentfly/Arith-Calc", "--port", "0", *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        preexec_fn=limit,
    )


def test_serve_raises_the_open_files_limit_and_refuses_more_sessions_than_it_allows():
    refused = serve_under(256, 256, "--max-sessions", "1000")
    _, stderr = refused.communicate(timeout=120)
    assert refused.returncode == 2 and stderr.count("\n") == 1, stderr
    assert "--max-sessions 1000 needs 1064 open files" in stderr and "pass --max-sessions 192 or less" in stderr
    for soft, hard, options, sessions in ((256, 256, (), 192), (128, 4096, ("--max-sessions", "1000"), 1000)):
        server = serve_under(soft, hard, *options)
        try:
            assert f"WebSocket at /ws; {sessions} sessions)" in server.stdout.readline()
            limits = Path(f"/proc/{server.pid}/limits").read_text().splitlines()
            open_files = next(line for line in limits if line.startswith("Max open files")).split()
            assert int(open_files[3]) == min(sessions + 64, hard)
        finally:
            server.terminate()
            server.communicate(timeout=60)
