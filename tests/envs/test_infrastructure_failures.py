"""Two kinds of failure, told apart at the source: the agent's mistakes are observations it is scored on, the
infrastructure's (a sandbox, a retrieval service, a judge, a runtime that failed) end the episode unscored with
``info["infra_failure"]``, never counted as the agent's."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import gymnasium as gym
import pytest

import agentfly_envs
from agentfly_envs import ERROR_KINDS, TOOLS, EpisodeFinishedError, InfrastructureError, Tool, ToolError
from agentfly_envs.rewards import REWARDS, RewardResult
from agentfly_envs.runtime.failures import WorkerLost, lost_episode
from agentfly_envs.sandbox import SandboxPool
from agentfly_envs.tools import CallStatus
from tests.envs.retrieval.server import serve_retrieval

ROW = {"question": "What is 6 times 7?", "answer": "#### 42"}
NO_ERRORS = dict.fromkeys(ERROR_KINDS, 0)


def call(name: str, **arguments: object) -> dict:
    return {"role": "assistant", "tool_calls": [{"function": {"name": name, "arguments": arguments}}]}


def calls(*turn: dict) -> dict:
    return {"role": "assistant", "tool_calls": [c for message in turn for c in message["tool_calls"]]}


def _service(query: str) -> str:
    """Ask the service.

    Args:
        query: What to ask.
    """
    if query == "down":
        raise InfrastructureError("the service at http://127.0.0.1:9/ask did not answer\nwithin 5 s")
    if query == "bug":
        raise ValueError("a bug in the tool")
    if query == "mistake":
        raise ToolError("ask about something else")
    return f"answer to {query}"


SERVICE = Tool(_service, name="service")


def assert_lost_to(step: tuple, observation: str, failure: str) -> None:
    """The step ended the episode as an infrastructure failure: truncated, unscored, nothing counted."""
    seen, reward, terminated, truncated, info = step
    assert seen == observation
    assert (reward, terminated, truncated) == (0.0, False, True) and type(reward) is float
    assert info["infra_failure"] == failure
    assert info["error_counts"] == NO_ERRORS and "reward_error" not in info


def assert_agent_mistake(step: tuple, kind: str) -> None:
    """The step is an observation the agent is scored on: the episode goes on and the mistake is counted."""
    observation, _, terminated, truncated, info = step
    assert observation.startswith("Error: ") and not (terminated or truncated)
    assert "infra_failure" not in info and info["error_counts"][kind] == 1


# --- the tool wrapper and the env ---------------------------------------------------------------------------------


def test_a_tool_raising_infrastructure_error_is_an_infra_error_result():
    result = SERVICE({"query": "down"})
    assert result.status is CallStatus.INFRA_ERROR
    assert result.content == "Error: the service at http://127.0.0.1:9/ask did not answer within 5 s"
    assert SERVICE({"query": "bug"}).status is CallStatus.TOOL_EXCEPTION
    assert SERVICE({"query": "mistake"}).status is CallStatus.TOOL_ERROR
    assert issubclass(InfrastructureError, agentfly_envs.AgentflyError)
    assert "InfrastructureError" in agentfly_envs.__all__


def test_a_tool_infrastructure_failure_ends_the_episode_unscored_and_skips_the_rest_of_the_turn(monkeypatch):
    monkeypatch.setitem(TOOLS._entries, "service", SERVICE)
    env = gym.make("agentfly/Arith-Calc", tools=("service",), truncation_reward=-0.5)
    env.reset(options={"task": ROW})
    assert env.step(call("service", query="six"))[0] == "answer to six"
    step = env.step(calls(call("service", query="seven"), call("service", query="down"), call("service", query="x")))
    failure = "the service at http://127.0.0.1:9/ask did not answer within 5 s"
    assert_lost_to(step, f"answer to seven\n\nError: {failure}", f"tool service: {failure}")
    assert len(step[4]["tool_calls"]) == 2  # the call after the failure did not run
    with pytest.raises(EpisodeFinishedError):
        env.step("The answer is \\boxed{42}.")
    env.reset(options={"task": ROW})  # the next episode runs as usual
    assert "infra_failure" not in env.step(call("service", query="six"))[4]


@pytest.mark.parametrize(
    ("action", "kind"),
    [
        (call("service", query="bug"), "tool_exception"),
        (call("service", query="mistake"), "tool_error"),
        (call("servise", query="six"), "unknown_tool"),
        (call("service", question="six"), "bad_arguments"),
    ],
    ids=["tool_raises_value_error", "tool_error", "unknown_tool", "bad_arguments"],
)
def test_agent_mistakes_have_no_infra_failure(monkeypatch, action, kind):
    monkeypatch.setitem(TOOLS._entries, "service", SERVICE)
    env = gym.make("agentfly/Arith-Calc", tools=("service",))
    env.reset(options={"task": ROW})
    assert_agent_mistake(env.step(action), kind)


def _judge_down(response: str, ground_truth: object) -> RewardResult:
    raise InfrastructureError("the judge at http://judge:8000 answered HTTP 503")


def _judge_bug(response: str, ground_truth: object) -> RewardResult:
    raise ValueError("cannot parse the judge's verdict")


def test_a_reward_raising_infrastructure_error_ends_the_episode_unscored(monkeypatch):
    monkeypatch.setitem(REWARDS._entries, "judge", _judge_down)
    env = gym.make("agentfly/Arith-Calc", reward="judge")
    env.reset(options={"task": ROW})
    step = env.step("The answer is \\boxed{42}.")
    assert_lost_to(step, "", "reward judge: the judge at http://judge:8000 answered HTTP 503")
    assert step[4]["reward_components"] == {}
    with pytest.raises(EpisodeFinishedError):
        env.step("again")


def test_a_reward_raising_anything_else_scores_zero_as_before(monkeypatch):
    monkeypatch.setitem(REWARDS._entries, "judge", _judge_bug)
    env = gym.make("agentfly/Arith-Calc", reward="judge")
    env.reset(options={"task": ROW})
    _, reward, terminated, truncated, info = env.step("The answer is \\boxed{42}.")
    assert (reward, terminated, truncated) == (0.0, True, False) and "infra_failure" not in info
    assert info["reward_error"] == "reward function 'judge' raised ValueError: cannot parse the judge's verdict"


# --- the sandbox ----------------------------------------------------------------------------------------------------


@pytest.fixture
def broken_pool():
    """A real pool whose fork server cannot start: every session it is asked for fails."""
    with SandboxPool(python="/bin/false", workers=1, spares=0) as pool:
        yield pool


def python_env(pool: SandboxPool) -> gym.Env:
    env = gym.make("agentfly/Arith-Calc", tools=("python_executor",), tool_options={"python_executor": {"pool": pool}})
    env.reset(options={"task": ROW})
    return env


def test_a_sandbox_that_cannot_start_a_session_is_an_infrastructure_failure(broken_pool):
    env = python_env(broken_pool)
    step = env.step(call("python_executor", code="print(6 * 7)"))
    observation, info = step[0], step[4]
    failure = observation.removeprefix("Error: ")
    assert failure.startswith("the sandbox's fork server did not start (/bin/false)")
    assert_lost_to(step, observation, f"tool python_executor: {failure}")
    assert info["messages"][0]["content"] == observation
    env.close()


def test_a_sandbox_at_its_session_cap_is_an_infrastructure_failure():
    with SandboxPool(workers=1, spares=0, max_sessions=1) as pool:
        holder, env = python_env(pool), python_env(pool)
        assert holder.step(call("python_executor", code="x = 1"))[0] == "(no output)"
        step = env.step(call("python_executor", code="print(6 * 7)"))
        assert step[4]["infra_failure"].startswith(
            "tool python_executor: this sandbox pool already has 1 live sessions"
        )
        assert_lost_to(step, step[0], step[4]["infra_failure"])
        holder.close()
        env.close()


def test_the_pool_replacing_a_killed_fork_server_is_no_failure():
    with SandboxPool(workers=1, spares=0) as pool:
        env = python_env(pool)
        assert env.step(call("python_executor", code="print(6 * 7)"))[0] == "42\n"
        os.kill(pool._fork_server.process.pid, signal.SIGKILL)
        pool._fork_server.process.wait()
        env.reset(options={"task": ROW})
        observation, _, _, truncated, info = env.step(call("python_executor", code="print(6 * 7)"))
        assert (observation, truncated) == ("42\n", False) and "infra_failure" not in info
        env.close()


def test_a_spare_session_killed_before_its_call_is_no_failure():
    """A spare interpreter killed while it waits (the code has not run) is replaced: the call runs in a fresh one and
    is neither the agent's crash nor a failure."""
    import psutil

    with SandboxPool(workers=1, spares=2) as pool:
        assert pool.run("print(1)").output == "1\n"  # the fork server is up with its spares
        spares = psutil.Process(pool._fork_server.process.pid).children(recursive=True)
        assert spares
        for process in spares:
            with contextlib.suppress(psutil.NoSuchProcess):  # the interpreter of the call above may just have ended
                process.kill()
        psutil.wait_procs(spares, timeout=5)
        for _ in range(3):
            execution = pool.run("print(6 * 7)")
            assert (execution.output, execution.status.value) == ("42\n", "ok")


@pytest.mark.parametrize(
    "code",
    ["import os; os._exit(3)", "import ctypes; ctypes.string_at(0)"],
    ids=["os_exit", "segfault"],
)
def test_code_that_kills_its_own_interpreter_is_the_agents(code):
    with SandboxPool(workers=1, spares=0) as pool:
        env = python_env(pool)
        assert_agent_mistake(env.step(call("python_executor", code=code)), "tool_error")
        assert "ZeroDivisionError" in env.step(call("python_executor", code="1 / 0"))[0]  # a traceback is output
        env.close()


def test_an_interpreter_killed_from_outside_mid_call_is_the_agents_crash():
    """The OOM killer or a chaos test's SIGKILL looks like the code's own os._exit: it stays the agent's."""
    with SandboxPool(workers=1, spares=0) as pool:
        env = python_env(pool)
        env.step(call("python_executor", code="x = 1"))
        session = env.unwrapped.tools["python_executor"]._session._process
        with ThreadPoolExecutor(1) as executor:
            running = executor.submit(env.step, call("python_executor", code="import time; time.sleep(5)"))
            while session.calls < 2:  # the second call has been sent
                time.sleep(0.01)
            os.kill(session.pid, signal.SIGKILL)
            step = running.result(timeout=5)
        assert_agent_mistake(step, "tool_error")
        assert "the interpreter crashed or was killed" in step[0]
        env.close()


def test_code_reward_with_a_broken_sandbox_is_an_infrastructure_failure(monkeypatch, broken_pool):
    monkeypatch.setattr("agentfly_envs.sandbox.default_pool", lambda: broken_pool)
    env = gym.make("agentfly/Arith-Calc", reward="code_reward")  # the reference "42" runs as its one test
    env.reset(options={"task": ROW})
    _, reward, terminated, truncated, info = env.step("```python\ndef add(a, b):\n    return a + b\n```")
    assert (reward, terminated, truncated) == (0.0, False, True)
    assert info["infra_failure"].startswith("reward code_reward: the sandbox's fork server did not start (/bin/false)")
    env.close()


# --- the http retriever ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server_url():
    from agentfly_envs.retrieval import Passage

    with serve_retrieval([Passage("Paris", "The capital of France.")]) as url:
        yield url


def search_env(url: str, timeout_s: float = 5.0) -> gym.Env:
    options = {"search": {"backend": "http", "url": url, "timeout_s": timeout_s}}
    env = gym.make("agentfly/Arith-Calc", tools=("search",), tool_options=options)
    env.reset(options={"task": ROW})
    return env


@pytest.mark.parametrize(
    ("path", "timeout_s", "fragment"),
    [
        ("/broken", 5.0, "answered HTTP 500"),
        ("/slow", 0.3, "did not answer within 0.3 s"),
        ("/garbage", 5.0, "sent an unexpected answer"),
    ],
    ids=["http_500", "timeout", "garbage"],
)
def test_a_failing_retrieval_service_is_an_infrastructure_failure(server_url, path, timeout_s, fragment):
    step = search_env(server_url + path, timeout_s).step(call("search", query="capital of France"))
    failure = step[0].removeprefix("Error: ")
    assert failure.startswith(f"the search service at {server_url}{path}/retrieve") and fragment in failure
    assert_lost_to(step, step[0], f"tool search: {failure}")


def test_a_retrieval_service_that_is_not_there_is_an_infrastructure_failure():
    step = search_env("http://127.0.0.1:9").step(call("search", query="capital of France"))
    assert step[4]["infra_failure"].startswith("tool search: the search service at http://127.0.0.1:9/retrieve is")
    assert_lost_to(step, step[0], step[4]["infra_failure"])


@pytest.mark.parametrize("query", ["   ", "zebra quantum"], ids=["empty_query", "no_match"])
def test_a_bad_or_fruitless_search_is_the_agents(server_url, query):
    assert_agent_mistake(search_env(server_url).step(call("search", query=query)), "tool_error")


# --- the runtimes ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lost", "failure"),
    [
        (
            WorkerLost("timeout", "nap"),
            "the environment step timed out after 2 s (in tool 'nap'); the episode ends here.",
        ),
        (WorkerLost("actor_died"), "the worker running this environment died; the episode ends here."),
        (WorkerLost("server_lost"), "the environment server stopped answering; the episode ends here."),
        (
            WorkerLost("refused", detail="busy (503)"),
            "the environment server refused the turn: busy (503); the episode ends here.",
        ),
    ],
    ids=["timeout", "actor_died", "server_lost", "refused"],
)
def test_a_lost_episode_is_an_infrastructure_failure(lost, failure):
    observation, reward, terminated, truncated, info = lost_episode(lost, 2.0, {"tool_error": 1}, -0.5)
    assert observation == f"Error: {failure}" and (reward, terminated, truncated) == (-0.5, False, True)
    assert info["infra_failure"] == failure and info["remote_failure"] == lost.kind
    assert info["error_counts"] == {"tool_error": 1}
