"""Health checks between batches (``check_health()`` of agentfly_envs/runtime/): a dead or silent Ray actor is
replaced before any episode meets it, a replacement still starting is waited for, and a local pool has nothing to
restart. On a real local Ray cluster."""

from __future__ import annotations

import gymnasium as gym
import pytest

from agentfly_envs.runtime import LocalEnvPool, RayEnvPool
from agentfly_envs.runtime import remote as remote_runtime
from agentfly_envs.user_code import UserCode
from tests.helpers.processes import kill_actor

pytestmark = pytest.mark.xdist_group("ray")
"""On one worker with the other Ray tests (one local cluster at a time)."""

ENV_ID = "agentfly/Arith-Calc"
HEALTHY = {"restarted": 0, "servers_down": 0}
NO_FAILURES = {"actor_died": 0, "timeout": 0}


def play(env: gym.Env, index: int) -> tuple[float, bool]:
    """Plays task ``index``'s golden episode on ``env``; its last step's reward and ``terminated``."""
    here = gym.make(ENV_ID)
    here.reset(options={"index": index})
    env.reset(options={"index": index})
    for action in here.unwrapped.golden_actions():
        _, reward, terminated, _, _ = env.step(action)
    return reward, terminated


@pytest.fixture
def pool(ray_cluster):
    """Two actors (half a CPU each) hosting Arith-Calc envs."""
    pool = RayEnvPool(ENV_ID, {}, num_workers=2, worker_cpus=0.5)
    yield pool
    pool.close()


def test_a_dead_actor_is_replaced_before_the_next_batch_meets_it(pool, ray_cluster):
    envs = pool.take(4)  # envs 0 and 2 live on actor 0
    assert [play(env, index) for index, env in enumerate(envs)] == [(1.0, True)] * 4
    assert pool.check_health() == HEALTHY
    dead = pool.actors[0]
    kill_actor(ray_cluster, dead)
    assert pool.check_health() == {"restarted": 1, "servers_down": 0}
    assert pool.actors[0] is not dead and pool.take(4) == envs  # the trainer's envs stay the same objects
    assert [play(env, index) for index, env in enumerate(envs)] == [(1.0, True)] * 4
    assert pool.pop_failures() == NO_FAILURES  # no episode met the dead actor
    assert pool.check_health() == HEALTHY


def test_a_silent_actor_is_replaced_and_a_replacement_still_starting_is_waited_for(ray_cluster, tmp_path, monkeypatch):
    slow_start = tmp_path / "slow_start.py"
    slow_start.write_text("import time\n\ntime.sleep(2.5)\n")  # each actor takes 2.5 s to start
    pool = RayEnvPool(ENV_ID, {}, num_workers=1, worker_cpus=0.5, user_code=UserCode(imports=(str(slow_start),)))
    try:
        env = pool.take(1)[0]
        monkeypatch.setattr(remote_runtime, "PING_TIMEOUT_S", 0.0)  # no started actor answers in time
        silent = pool.actors[0]
        assert pool.check_health() == {"restarted": 1, "servers_down": 0} and pool.actors[0] is not silent
        monkeypatch.setattr(remote_runtime, "PING_TIMEOUT_S", 1.0)
        starting = pool.actors[0]
        assert pool.check_health() == HEALTHY and pool.actors[0] is starting  # waited for, up to START_TIMEOUT_S
        assert play(env, 0) == (1.0, True)
        assert pool.pop_failures() == NO_FAILURES
    finally:
        pool.close()


def test_a_local_pool_has_nothing_to_restart():
    pool = LocalEnvPool(ENV_ID, {})
    assert play(pool.take(2)[1], 0) == (1.0, True)
    assert pool.check_health() == HEALTHY
    pool.close()
