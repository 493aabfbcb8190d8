"""Health checks of ``agentfly/Remote`` envs' servers (``check_health()`` of agentfly_envs/runtime/): a stopped
server is counted down once, however many envs play on it, and up again once it is back; under both runtimes."""

from __future__ import annotations

import urllib.parse

import gymnasium as gym
import pytest

import agentfly_envs  # noqa: F401  (registers the env ids)
from agentfly_envs.runtime import LocalEnvPool, RayEnvPool

pytest.importorskip("openenv", reason='needs openenv-core (the "openenv" extra)')
from agentfly_envs.remote import ServerThread, create_app

KWARGS = {"level": "easy"}
HEALTHY = {"restarted": 0, "servers_down": 0}
DOWN = {"restarted": 0, "servers_down": 1}


def serve(url: str | None = None) -> ServerThread:
    """A started server of Arith-Calc, on ``url``'s port when given (a stopped server's restart)."""
    server = ServerThread(create_app("agentfly/Arith-Calc", KWARGS))
    if url is not None:
        server._server.config.port = urllib.parse.urlsplit(url).port  # ServerThread picks a free port otherwise
        server.url = url
    server.start()
    return server


def test_a_stopped_server_is_down_once_for_all_its_envs_and_up_again_when_back():
    server = serve()
    pool = LocalEnvPool("agentfly/Remote", {"url": server.url})
    envs = pool.take(3)
    for env in envs:
        env.reset(options={"index": 0})
    assert pool.check_health() == HEALTHY
    server.stop()
    assert pool.check_health() == DOWN
    server = serve(server.url)
    try:
        assert pool.check_health() == HEALTHY
        here = gym.make("agentfly/Arith-Calc", **KWARGS)
        here.reset(options={"index": 1})
        envs[0].reset(options={"index": 1})  # a new session on the server back up
        assert envs[0].step(here.unwrapped.golden_actions()[-1])[1:3] == (1.0, True)
    finally:
        pool.close()
        server.stop()


@pytest.mark.xdist_group("ray")
def test_env_actors_ping_the_servers_of_their_envs(ray_cluster):
    server = serve()
    pool = RayEnvPool("agentfly/Remote", {"url": server.url}, num_workers=1, worker_cpus=0.5)
    try:
        for env in pool.take(2):
            env.reset(options={"index": 0})
        assert pool.check_health() == HEALTHY
        server.stop()
        assert pool.check_health() == DOWN
    finally:
        pool.close()
