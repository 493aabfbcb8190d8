"""Env runtimes: envs in this process, and envs on the actors of a real local Ray cluster (dead actors and step
timeouts included)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time

import gymnasium as gym
import pytest
from gymnasium.error import ResetNeeded

from agentfly_envs.runtime import LocalEnvPool, RayEnvPool, RemoteEnv, RemoteEnvError
from agentfly_envs.runtime import remote as remote_runtime
from agentfly_envs.spaces import TextSpace
from agentfly_envs.tools import TOOLS
from tests.helpers.paths import OFFLINE_KWARGS, REPO_ROOT
from tests.helpers.processes import kill_actor, lines_printed_without
from tests.helpers.tools import NAP

pytestmark = pytest.mark.xdist_group("ray")
"""On one worker with the other Ray tests (one local cluster at a time)."""

ENV_ID = "agentfly/Math-Python"
KWARGS = {**OFFLINE_KWARGS[ENV_ID], "max_turns": 4}


def python_call(code: str) -> str:
    return f'<tool_call>{{"name": "python_executor", "arguments": {{"code": "{code}"}}}}</tool_call>'


def comparable(info: dict) -> str:
    """A step's info without what differs between any two runs: timings and the random tool-call ids."""
    return re.sub(r"call_[0-9a-f]{12}", "call_ID", json.dumps({k: v for k, v in info.items() if k != "tool_latency_s"}))


def nap_call(seconds: float) -> str:
    return f'<tool_call>{{"name": "nap", "arguments": {{"seconds": {seconds}}}}}</tool_call>'


@pytest.mark.timeout(30)
def test_a_local_step_past_the_timeout_ends_the_episode_and_a_fresh_env_takes_the_stuck_ones_place(monkeypatch):
    monkeypatch.setitem(TOOLS._entries, "nap", NAP)
    pool = LocalEnvPool("agentfly/Arith-Calc", {"tools": ["nap"], "truncation_reward": -0.5}, step_timeout=0.5)
    env = pool.take(1)[0]
    env.reset(options={"index": 0})
    assert env.step(nap_call(0.01))[0] == "rested"
    stuck = env.unwrapped
    start = time.perf_counter()
    observation, reward, terminated, truncated, info = env.step(nap_call(10))
    assert time.perf_counter() - start < 3
    assert observation == "Error: the environment step timed out after 0.5 s (in tool 'nap'); the episode ends here."
    assert (reward, terminated, truncated) == (-0.5, False, True)
    assert info["remote_failure"] == "timeout" and info["messages"][0]["content"] == observation
    assert info["infra_failure"] == observation.removeprefix("Error: ")
    assert pool.pop_failures() == {"actor_died": 0, "timeout": 1}
    with pytest.raises(ResetNeeded, match=r"episode was lost to a step timeout"):
        env.step(nap_call(0.01))
    env.reset(options={"index": 1})
    assert env.unwrapped is not stuck and pool.take(1) == [env]
    assert env.step(nap_call(0.01))[:4] == ("rested", 0.0, False, False)
    assert pool.pop_failures() == {"actor_died": 0, "timeout": 0}
    pool.close()


class HangingReset(gym.Env):
    """A toy env whose first ``hangs`` resets (counted over all instances) sleep for a minute."""

    observation_space = action_space = TextSpace(64)
    hangs = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if HangingReset.hangs > 0:
            HangingReset.hangs -= 1
            time.sleep(60)
        return "ready", {}


@pytest.mark.timeout(30)
def test_a_local_reset_past_the_timeout_is_retried_once_on_a_fresh_env(monkeypatch):
    gym.register("test/HangingReset", entry_point=HangingReset)
    monkeypatch.setattr(HangingReset, "hangs", 1)
    try:
        pool = LocalEnvPool("test/HangingReset", {}, step_timeout=0.3)
        env = pool.take(1)[0]
        first = env.unwrapped
        assert env.reset() == ("ready", {}) and env.unwrapped is not first
        assert pool.pop_failures() == {"actor_died": 0, "timeout": 1}
        HangingReset.hangs = 2
        with pytest.raises(RemoteEnvError, match=r"^env 0 of test/HangingReset: reset timed out twice \(step_timeout"):
            env.reset()
        pool.close()
    finally:
        del gym.registry["test/HangingReset"]


def test_a_stuck_local_step_does_not_hold_up_the_interpreters_exit():
    code = textwrap.dedent("""
        import time
        from agentfly_envs.runtime import LocalEnvPool
        from agentfly_envs.tools import TOOLS
        from tests.helpers.tools import NAP
        TOOLS.add("nap", NAP)
        pool = LocalEnvPool("agentfly/Arith-Calc", {"tools": ["nap"]}, step_timeout=0.2)
        env = pool.take(1)[0]
        env.reset(options={"index": 0})
        print(env.step('<tool_call>{"name": "nap", "arguments": {"seconds": 600}}</tool_call>')[0])
        pool.close()
    """)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Error: the environment step timed out after 0.2 s (in tool 'nap')")
    assert time.perf_counter() - start < 30


@pytest.fixture(scope="module")
def pool(ray_cluster):
    """Two actors (half a CPU each) hosting Math-Python envs, shared by the module's tests."""
    pool = RayEnvPool(ENV_ID, KWARGS, num_workers=2, worker_cpus=0.5, step_timeout=60)
    yield pool
    pool.close()


def test_remote_envs_play_golden_episodes_exactly_as_local_envs(pool):
    local = LocalEnvPool(ENV_ID, KWARGS)
    remote_envs, local_envs = pool.take(3), local.take(3)
    assert all(isinstance(env, RemoteEnv) for env in remote_envs)
    assert [env._worker for env in remote_envs] == [0, 1, 0]  # spread over the actors
    assert remote_envs[0].observation_space == local_envs[0].observation_space
    assert remote_envs[0].unwrapped.truncation_reward == local_envs[0].unwrapped.truncation_reward
    for index, (remote, here) in enumerate(zip(remote_envs, local_envs, strict=True)):
        assert remote.reset(options={"index": index}) == here.reset(options={"index": index})
        for action in here.unwrapped.golden_actions():
            got, expected = remote.step(action), here.step(action)
            assert got[:4] == expected[:4]
            assert comparable(got[4]) == comparable(expected[4])
        assert got[1] == 1.0 and got[2]
    local.close()
    assert pool.take(2) == remote_envs[:2]  # the same proxies on every call
    assert pool.pop_failures() == {"actor_died": 0, "timeout": 0}


def test_the_envs_own_errors_come_back_as_themselves_in_one_line(pool):
    env = pool.take(1)[0]
    with pytest.raises(IndexError, match=r"^options\['index'\] must be an int in \[0, 12\), got 99$"):
        env.reset(options={"index": 99})
    fresh = pool.take(4)[3]
    with pytest.raises(ResetNeeded, match=r"before calling env.reset\(\)"):
        fresh.step("hello")


def test_a_killed_actor_ends_its_episodes_with_an_error_and_is_replaced(pool, ray_cluster):
    first, _, third = pool.take(3)  # envs 0 and 2 share actor 0
    for env in (first, third):
        env.reset(options={"index": 0})
        assert env.step(python_call("print(6 * 7)"))[0] == "42\n"
    dead = pool.actors[0]
    kill_actor(ray_cluster, dead)
    observation, reward, terminated, truncated, info = first.step(python_call("print(1)"))
    assert observation.startswith("Error: the worker running this environment died")
    assert (reward, terminated, truncated) == (first.truncation_reward, False, True)
    assert info["remote_failure"] == "actor_died" and info["messages"][0]["content"] == observation
    assert info["infra_failure"] == "the worker running this environment died; the episode ends here."
    assert pool.actors[0] is not dead
    assert third.step(python_call("print(2)"))[3]  # the other env of the dead actor lost its episode too
    assert pool.pop_failures() == {"actor_died": 2, "timeout": 0}
    with pytest.raises(ResetNeeded, match=r"episode was lost with its Ray actor"):
        first.step(python_call("print(1)"))
    for env in (first, third):  # a new episode runs on the replacement
        env.reset(options={"index": 1})
        assert env.step(python_call("print(6 * 7)"))[:4] == ("42\n", 0.0, False, False)
    assert pool.pop_failures() == {"actor_died": 0, "timeout": 0}


def test_a_step_past_the_timeout_ends_the_episode_and_the_next_one_runs(pool):
    env = pool.take(2)[1]
    env.reset(options={"index": 2})
    env.step(python_call("print(1)"))  # the sandbox is up
    stuck = pool.actors[1]
    pool.step_timeout = 2.0
    try:
        observation, _, _, truncated, info = env.step(python_call("import time; time.sleep(8)"))
    finally:
        pool.step_timeout = 60.0
    assert observation == (
        "Error: the environment step timed out after 2 s (in tool 'python_executor'); the episode ends here."
    )
    assert truncated and info["remote_failure"] == "timeout"
    assert pool.pop_failures() == {"actor_died": 0, "timeout": 1}
    assert pool.actors[1] is not stuck
    env.reset(options={"index": 2})
    assert env.step(python_call("print(3 * 3)"))[0] == "9\n"


def test_a_pool_in_another_process_joins_the_cluster_of_ray_address_and_leaves_it_running(ray_cluster):
    code = (
        "import ray\n"
        "from agentfly_envs.runtime import RayEnvPool\n"
        "pool = RayEnvPool('agentfly/Arith-Calc', {}, num_workers=1, worker_cpus=0.5)\n"
        "env = pool.take(1)[0]\n"
        "env.reset(options={'index': 0})\n"
        "print(env.step('The answer is \\\\boxed{0}.')[2], ray.is_initialized())\n"
        "pool.close()\n"
        "print(ray.is_initialized())\n"
    )
    address = ray_cluster.get_runtime_context().gcs_address
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env={**os.environ, "RAY_ADDRESS": address},
        timeout=300,
        check=True,
    )
    assert result.stdout.splitlines() == ["True True", "False"]  # it answered; Ray was joined, then left
    assert ray_cluster.cluster_resources()["CPU"] == 2


def test_a_pool_larger_than_the_cluster_is_refused_in_one_line(ray_cluster):
    with pytest.raises(ValueError, match=r"^3 env workers need 3 CPU in all, the Ray cluster has 2: lower"):
        RayEnvPool(ENV_ID, KWARGS, num_workers=3, worker_cpus=1.0)


def test_actors_the_cluster_cannot_start_in_time_are_refused_in_one_line(pool, monkeypatch):
    monkeypatch.setattr(remote_runtime, "START_TIMEOUT_S", 3.0)
    # The module's pool holds 1 of the 2 CPUs: the second actor of 1 CPU waits for one in vain.
    with pytest.raises(RemoteEnvError, match=r"^the 2 env actors of agentfly/Math-Python did not start within 3 s"):
        RayEnvPool(ENV_ID, KWARGS, num_workers=2, worker_cpus=1.0)
    monkeypatch.undo()
    RayEnvPool(ENV_ID, KWARGS, num_workers=1, worker_cpus=1.0).close()  # the refused pool gave its CPU back


def test_the_runtime_imports_without_ray_and_says_what_to_install():
    code = (
        "from agentfly_envs.runtime import RayEnvPool, ray_available\n"
        "print(ray_available())\n"
        "try:\n"
        "    RayEnvPool('agentfly/Arith-Calc', {})\n"
        "except ImportError as error:\n"
        "    print(error)\n"
    )
    assert lines_printed_without("ray", code) == [
        "False",
        'RayEnvPool needs Ray (the "ray" extra): pip install "agentfly-rl[ray]", or pip install "ray>=2.40"',
    ]


def test_the_docs_example_runs_as_written(ray_cluster, monkeypatch):
    readme = (REPO_ROOT / "docs" / "ray.md").read_text()
    block = next(b for b in re.findall(r"```python\n(.*?)```", readme, re.DOTALL) if "RayEnvPool(" in b)
    monkeypatch.chdir(REPO_ROOT)
    namespace: dict = {}
    exec(compile(textwrap.dedent(block), "docs/ray.md", "exec"), namespace)
    assert len(namespace["envs"]) == 8 and namespace["info"]["task_index"] == 0
    assert ray_cluster.is_initialized()  # the pool joined the session's Ray and left it running


def test_env_actors_load_the_users_code_before_they_build_envs(ray_cluster, tmp_path):
    # a reward that exists only in the user's file: the actor must load it to build the env
    from agentfly_envs.user_code import UserCode

    path = tmp_path / "double_reward.py"
    path.write_text("def doubled(response, ground_truth):\n    return 0.5 if ground_truth in response else 0.0\n")
    code = UserCode(reward_file=str(path), reward_function="doubled")
    pool = RayEnvPool("agentfly/Arith-Calc", {"reward": "doubled"}, num_workers=1, worker_cpus=0.5, user_code=code)
    try:
        here = gym.make("agentfly/Arith-Calc")
        here.reset(options={"index": 0})
        env = pool.take(1)[0]
        env.reset(options={"index": 0})
        *_, reward, terminated, _, _ = env.step(here.unwrapped.golden_actions()[-1])
        assert (reward, terminated) == (0.5, True)
    finally:
        pool.close()
