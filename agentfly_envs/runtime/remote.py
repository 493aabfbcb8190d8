"""Envs hosted by Ray actors anywhere on a cluster, stepped through Gymnasium proxies.

A :class:`RayEnvPool` starts ``num_workers`` actors, each reserving ``worker_cpus`` CPUs and ``worker_resources``
(custom Ray resources, e.g. to pin tools to some nodes). Env ``i`` of the pool lives on actor ``i % num_workers``;
an actor steps up to :data:`MAX_CONCURRENT_STEPS` of its envs at once, in threads. :meth:`RayEnvPool.take` hands
out :class:`RemoteEnv` proxies: Gymnasium envs whose ``reset`` and ``step`` run on their actor and block until it
answers, so stepping several proxies from threads steps their envs concurrently.

Failures keep the env contract, as under every runtime (:mod:`agentfly_envs.runtime.failures`). When a step finds
its actor dead, or runs longer than ``step_timeout`` seconds, it returns an ``Error:`` observation and truncates the
episode (reward: the env's ``truncation_reward``, ``info["remote_failure"]``: ``actor_died`` or ``timeout``); the
pool counts the failure (:meth:`RayEnvPool.pop_failures`) and replaces the actor (killing what is left of it), so
the next ``reset`` starts on a fresh one. The other envs of a lost actor lose their episodes the same way at their
next step. :meth:`RayEnvPool.check_health`, between batches, finds dead actors before any step does: it replaces
them, and their envs start their next episode on the new actor, none lost.

Ray is imported when a pool is built, not with this module.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any, ClassVar, SupportsFloat

import gymnasium as gym
from gymnasium.error import ResetNeeded

from agentfly_envs.contract import truncation_reward
from agentfly_envs.errors import InfrastructureError
from agentfly_envs.runtime.base import ENV_RUNTIMES, PoolSettings
from agentfly_envs.runtime.failures import SERVER_PING_TIMEOUT_S, FailureCounts, WorkerLost, lost_episode, servers_down
from agentfly_envs.user_code import UserCode

INSTALL_HINT = 'needs Ray (the "ray" extra): pip install "agentfly-rl[ray]", or pip install "ray>=2.40"'
MAX_CONCURRENT_STEPS = 64
"""Envs of one actor stepped at the same time (the actor's threads)."""
START_TIMEOUT_S = 120.0
"""How long building an env may take, its actor's start included (a new process importing the env's modules)."""
CLOSE_TIMEOUT_S = 10.0
"""How long :meth:`RayEnvPool.close` waits for the actors to close their envs before killing them."""
PING_TIMEOUT_S = SERVER_PING_TIMEOUT_S + 3.0
"""How long a started actor may take to answer a health check (which pings its envs' servers meanwhile)."""


def ray_available() -> bool:
    """Whether Ray can be imported (imports it)."""
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


class RemoteEnvError(InfrastructureError):
    """Remote envs could not be started or reset: their actors cannot be placed, or keep dying (an infrastructure
    failure: an episode whose reset raises it is replayed or left out of training)."""


class _EnvHost:
    """The body of an env actor: envs of one id, by slot number."""

    def __init__(self, env_id: str, env_kwargs: Mapping[str, Any], user_code: UserCode) -> None:
        import agentfly_envs  # noqa: F401  (registers the ids in this process)

        user_code.load()  # the user's tools, rewards and envs, registered in this process too
        self.env_id = env_id
        self.env_kwargs = dict(env_kwargs)
        self.envs: dict[int, gym.Env] = {}
        self._making = threading.Lock()  # env modules import lazily, and concurrent imports of one module break

    def ready(self) -> bool:
        return True

    def ping(self) -> list[str]:
        """The health check's ping: the servers of this actor's envs that do not answer
        (:func:`~agentfly_envs.runtime.failures.servers_down`)."""
        return sorted(servers_down(list(self.envs.values())))  # a copy: make() may add envs meanwhile

    def make(self, slot: int) -> dict[str, Any]:
        """Builds env ``slot``; returns what its proxy exposes (spaces, metadata, truncation reward)."""
        with self._making:
            env = gym.make(self.env_id, disable_env_checker=True, **self.env_kwargs)
        self.envs[slot] = env
        return {
            "observation_space": env.observation_space,
            "action_space": env.action_space,
            "metadata": env.metadata,
            "truncation_reward": truncation_reward(env),
        }

    def reset(self, slot: int, seed: int | None, options: Mapping[str, Any] | None) -> tuple[Any, dict[str, Any]]:
        return self.envs[slot].reset(seed=seed, options=options)

    def step(self, slot: int, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        return self.envs[slot].step(action)

    def running_tool(self, slot: int) -> str | None:
        """The tool env ``slot`` is running, if any (asked of a step past its timeout)."""
        return getattr(self.envs[slot].unwrapped, "running_tool", None)

    def close(self, slot: int) -> None:
        env = self.envs.pop(slot, None)
        if env is not None:
            env.close()

    def close_all(self) -> None:
        for slot in list(self.envs):
            self.close(slot)


class RemoteEnv(gym.Env):
    """A Gymnasium env running on a Ray actor of a :class:`RayEnvPool` (made by :meth:`RayEnvPool.take`).

    ``reset`` and ``step`` behave as the hosted env's, with the failures described in the module docstring;
    ``truncation_reward`` is the hosted env's.
    """

    def __init__(self, pool: RayEnvPool, worker: int, slot: int, actor: Any, description: Mapping[str, Any]) -> None:
        self._pool = pool
        self._worker = worker
        self._slot = slot
        self._actor: Any = actor  # None: no env on an actor (lost); reset builds one on the worker's current actor
        self._error_counts: dict[str, int] = {}
        self.observation_space = description["observation_space"]
        self.action_space = description["action_space"]
        self.metadata = description["metadata"]
        self.truncation_reward: float = description["truncation_reward"]

    def reset(self, *, seed: int | None = None, options: Mapping[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """Starts an episode on the actor (on a fresh one, after a loss; one retry if that one is lost too).

        Raises:
            RemoteEnvError: the actor was lost twice in a row.
        """
        super().reset(seed=seed)
        if self._actor is not None and self._actor is not self._pool._current(self._worker):
            self._actor = None  # replaced since (a health check, another env's loss): its env went with it
        kind = ""
        for _ in range(2):
            try:
                if self._actor is None:
                    actor = self._pool._current(self._worker)
                    self._call(actor, START_TIMEOUT_S, "make")
                    self._actor = actor
                observation, info = self._call(self._actor, self._pool.step_timeout, "reset", seed, options)
            except WorkerLost as lost:
                kind = lost.kind
                continue
            self._error_counts = {}
            return observation, info
        raise RemoteEnvError(f"env {self._slot} of {self._pool.env_id}: its Ray actor was lost twice in reset ({kind})")

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """Plays one turn on the actor; a lost actor or a timeout ends the episode with an ``Error:`` observation.

        Raises:
            ResetNeeded: the episode was lost with its actor (a never-reset env raises the hosted env's own).
        """
        if self._actor is None:
            raise ResetNeeded("call reset() before step() (this env's episode was lost with its Ray actor)")
        try:
            observation, reward, terminated, truncated, info = self._call(
                self._actor, self._pool.step_timeout, "step", action
            )
        except WorkerLost as lost:
            return lost_episode(lost, self._pool.step_timeout, self._error_counts, self.truncation_reward)
        self._error_counts = dict(info.get("error_counts", {}))
        return observation, reward, terminated, truncated, info

    def close(self) -> None:
        """Frees the hosted env (without waiting for the actor)."""
        if self._actor is not None:
            self._actor.close.remote(self._slot)
            self._actor = None

    def _call(self, actor: Any, timeout: float, method: str, *args: Any) -> Any:
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

        try:
            return ray.get(getattr(actor, method).remote(self._slot, *args), timeout=timeout)
        except RayTaskError as error:  # the env itself raised: the caller gets the env's own exception
            raise error.cause from None
        except GetTimeoutError:
            lost = WorkerLost("timeout", self._running_tool(actor))
        except RayActorError:
            lost = WorkerLost("actor_died")
        self._actor = None
        self._pool._lost(self._worker, actor, lost.kind)
        raise lost

    def _running_tool(self, actor: Any) -> str | None:
        """The tool a stuck step is running, asked of its actor's other threads (``None``: no answer in 5 s)."""
        import ray
        from ray.exceptions import RayError

        try:
            return ray.get(actor.running_tool.remote(self._slot), timeout=5.0)
        except RayError:
            return None


@ENV_RUNTIMES.register("ray")
class RayEnvPool:
    """Env instances of one id on Ray actors, handed out as :class:`RemoteEnv` proxies.

    Connects to the running Ray if this process has one, else ``ray.init(address=address)`` (``None``: Ray's own
    choice: ``RAY_ADDRESS``, else a new local cluster, shut down again by :meth:`close`).

    Args:
        env_id: Registered id (``module:id`` ids import their module on the actors).
        env_kwargs: ``gymnasium.make`` keyword arguments (relative paths resolve in the driver's directory on this
            node; use absolute, shared paths on a multi-node cluster).
        num_workers: Actors.
        worker_cpus: CPUs each actor reserves.
        worker_resources: Other Ray resources each actor reserves (e.g. ``{"tools": 1}``).
        step_timeout: Seconds a reset or step may take before its actor is replaced (kept as an attribute, read at
            each call; building an env, actor start included, may take :data:`START_TIMEOUT_S`).
        address: Ray cluster to connect to when Ray is not initialised yet.
        user_code: The user's modules and reward file, loaded on each actor before it builds envs (paths as
            ``env_kwargs``'s).

    Raises:
        ImportError: Ray is not installed (with the install command).
        ValueError: a bad size, or more CPUs or resources than the cluster has.
        RemoteEnvError: the actors did not start within :data:`START_TIMEOUT_S` (the cluster's resources are taken).
    """

    steps_per_worker: ClassVar[int] = MAX_CONCURRENT_STEPS
    """Envs one actor steps at once."""

    @classmethod
    def unavailable(cls) -> str | None:
        """Why the runtime cannot run here: Ray is not installed (the install command), or ``None``."""
        return None if ray_available() else INSTALL_HINT

    @classmethod
    def from_settings(cls, env_id: str, env_kwargs: Mapping[str, Any], settings: PoolSettings) -> RayEnvPool:
        """The pool of a run: ``settings.workers`` actors (:class:`~agentfly_envs.runtime.base.PoolSettings`)."""
        return cls(
            env_id,
            env_kwargs,
            num_workers=settings.workers,
            worker_cpus=settings.worker_cpus,
            worker_resources=settings.worker_resources,
            step_timeout=settings.step_timeout,
            user_code=settings.user_code,
        )

    def __init__(
        self,
        env_id: str,
        env_kwargs: Mapping[str, Any],
        num_workers: int = 1,
        worker_cpus: float = 1.0,
        worker_resources: Mapping[str, float] | None = None,
        step_timeout: float = 300.0,
        address: str | None = None,
        user_code: UserCode | None = None,
    ) -> None:
        if not ray_available():
            raise ImportError(f"RayEnvPool {INSTALL_HINT}")
        import ray

        if num_workers < 1 or worker_cpus < 0 or step_timeout <= 0:
            raise ValueError(
                f"RayEnvPool needs num_workers >= 1, worker_cpus >= 0 and step_timeout > 0, got {num_workers}, "
                f"{worker_cpus}, {step_timeout}"
            )
        self.env_id = env_id
        self.env_kwargs = dict(env_kwargs)
        self.user_code = user_code or UserCode()
        self.step_timeout = float(step_timeout)
        self._started_ray = not ray.is_initialized()
        if self._started_ray:
            ray.init(address=address, logging_level="WARNING", include_dashboard=False)
        needs = {"CPU": num_workers * worker_cpus, **{k: num_workers * v for k, v in (worker_resources or {}).items()}}
        available = ray.cluster_resources()
        for name, amount in needs.items():
            if amount > available.get(name, 0.0):
                if self._started_ray:
                    ray.shutdown()
                raise ValueError(
                    f"{num_workers} env workers need {amount:g} {name} in all, the Ray cluster has "
                    f"{available.get(name, 0.0):g}: lower the workers or what each reserves"
                )
        self._host = ray.remote(_EnvHost).options(
            num_cpus=worker_cpus, resources=dict(worker_resources or {}), max_concurrency=MAX_CONCURRENT_STEPS
        )
        self._lock = threading.Lock()
        self._failures = FailureCounts()
        self._workers = [self._spawn() for _ in range(num_workers)]
        self._started = [True] * num_workers  # False: a replacement that has not answered yet (it may be starting)
        self.envs: list[RemoteEnv] = []
        self._wait_started()

    @property
    def actors(self) -> list[Any]:
        """The current actor handles, one per worker (a lost actor's replacement takes its place)."""
        with self._lock:
            return list(self._workers)

    def take(self, count: int) -> list[RemoteEnv]:
        """``count`` envs (the same proxies on every call; new ones are built on their actors concurrently).

        Raises:
            RemoteEnvError: the actors could not be placed or build their envs within :data:`START_TIMEOUT_S`.
        """
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

        slots = range(len(self.envs), count)
        actors = self.actors
        placed = [(slot, slot % len(actors), actors[slot % len(actors)]) for slot in slots]
        try:
            described = ray.get([actor.make.remote(slot) for slot, _, actor in placed], timeout=START_TIMEOUT_S)
        except RayTaskError as error:
            raise error.cause from None
        except (GetTimeoutError, RayActorError) as error:
            raise RemoteEnvError(
                f"env actors of {self.env_id} did not start within {START_TIMEOUT_S:g} s "
                f"({type(error).__name__}): does the Ray cluster have free CPUs and resources for them?"
            ) from None
        self.envs += [
            RemoteEnv(self, worker, slot, actor, description)
            for (slot, worker, actor), description in zip(placed, described, strict=True)
        ]
        return list(self.envs[:count])

    def pop_failures(self) -> dict[str, int]:
        """Failed remote calls since the last call, by kind (:data:`~agentfly_envs.runtime.failures.FAILURE_KINDS`)."""
        return self._failures.pop()

    def check_health(self) -> dict[str, int]:
        """Pings every actor at once and replaces those dead or silent past :data:`PING_TIMEOUT_S` (a replacement
        not started yet: :data:`START_TIMEOUT_S`); the actors ping their envs' servers meanwhile.

        Returns:
            ``{"restarted": actors replaced, "servers_down": servers of the envs that did not answer}``.
        """
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError

        with self._lock:
            actors, started = list(self._workers), list(self._started)
        pings = [actor.ping.remote() for actor in actors]
        sent = time.monotonic()
        restarted, down = 0, set()
        for worker, (actor, ping) in enumerate(zip(actors, pings, strict=True)):
            limit = PING_TIMEOUT_S if started[worker] else START_TIMEOUT_S
            try:
                down.update(ray.get(ping, timeout=max(sent + limit - time.monotonic(), 0.0)))
            except (GetTimeoutError, RayActorError):
                restarted += self._replace(worker, actor)
            else:
                self._answered(worker, actor)
        return {"restarted": restarted, "servers_down": len(down)}

    def close(self) -> None:
        """Closes the envs, stops the actors, and shuts Ray down if this pool started it."""
        import ray

        if self._started_ray and not ray.is_initialized():
            return
        workers, self._workers = self._workers, []
        closing = [actor.close_all.remote() for actor in workers]
        ray.wait(closing, num_returns=len(closing), timeout=CLOSE_TIMEOUT_S)  # dead or stuck actors: killed anyway
        for actor in workers:
            ray.kill(actor)
        self.envs.clear()
        if self._started_ray:
            ray.shutdown()

    def _wait_started(self) -> None:
        """Waits for the actors to run (closing the pool if they do not)."""
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError

        try:
            ray.get([actor.ready.remote() for actor in self._workers], timeout=START_TIMEOUT_S)
        except GetTimeoutError:
            problem = f"did not start within {START_TIMEOUT_S:g} s: are the cluster's CPUs and resources taken?"
        except RayActorError as error:
            problem = f"died while starting: {str(error).strip().splitlines()[0]}"
        else:
            return
        count = len(self._workers)
        self.close()
        raise RemoteEnvError(f"the {count} env actors of {self.env_id} {problem}")

    def _spawn(self) -> Any:
        return self._host.remote(self.env_id, self.env_kwargs, self.user_code)

    def _current(self, worker: int) -> Any:
        with self._lock:
            return self._workers[worker]

    def _lost(self, worker: int, actor: Any, kind: str) -> None:
        """Counts a failed call and replaces its actor, unless another env's failure already did."""
        self._failures.add(kind)
        self._replace(worker, actor)

    def _replace(self, worker: int, actor: Any) -> bool:
        """Kills ``actor`` and starts another in its place, unless it was replaced already; whether this call did."""
        import ray

        with self._lock:
            if not self._workers or self._workers[worker] is not actor:
                return False
            ray.kill(actor)  # stuck (timeout) or unreachable: it must not keep its reservation
            self._workers[worker] = self._spawn()
            self._started[worker] = False
            return True

    def _answered(self, worker: int, actor: Any) -> None:
        """Marks ``worker``'s actor started, if it is still ``actor``."""
        with self._lock:
            if self._workers and self._workers[worker] is actor:
                self._started[worker] = True
