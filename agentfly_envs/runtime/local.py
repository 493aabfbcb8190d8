"""Envs in this process, reused across rollouts, each step waited on for at most ``step_timeout`` seconds."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future, wait
from typing import Any, ClassVar, SupportsFloat, TypeVar

import gymnasium as gym
from gymnasium.error import ResetNeeded

from agentfly_envs.contract import truncation_reward
from agentfly_envs.runtime.base import ENV_RUNTIMES, PoolSettings
from agentfly_envs.runtime.failures import FailureCounts, WorkerLost, lost_episode, servers_down
from agentfly_envs.runtime.remote import RemoteEnvError

T = TypeVar("T")


@ENV_RUNTIMES.register("local")
class LocalEnvPool:
    """Reusable env instances of one id in this process, created on demand.

    Each env's ``reset`` and ``step`` run in a thread of their own, waited on for ``step_timeout`` seconds. A step
    past it ends the episode with an ``Error:`` observation (see :mod:`agentfly_envs.runtime.failures`); a Python
    thread cannot be stopped, so the stuck env is left to its thread (closed from another one) and the env's next
    ``reset`` builds a fresh one in its place. A reset past it is retried once on a fresh env.

    Args:
        env_id: Registered id.
        env_kwargs: ``gymnasium.make`` keyword arguments.
        step_timeout: Seconds a reset or step may take (kept as an attribute, read at each call).

    Raises:
        ValueError: ``step_timeout`` is not positive.

    Example:
        >>> import agentfly_envs
        >>> pool = LocalEnvPool("agentfly/Arith-Calc", {"level": "easy"})
        >>> envs = pool.take(2)
        >>> pool.take(1)[0] is envs[0]
        True
        >>> pool.close()
    """

    steps_per_worker: ClassVar[int] = 1
    """Envs one stepping thread steps at once."""

    @classmethod
    def unavailable(cls) -> str | None:
        """Why the runtime cannot run here: never."""
        return None

    @classmethod
    def from_settings(cls, env_id: str, env_kwargs: Mapping[str, Any], settings: PoolSettings) -> LocalEnvPool:
        """The pool of a run (:class:`~agentfly_envs.runtime.base.PoolSettings`; the user's code is loaded in this
        process already)."""
        return cls(env_id, env_kwargs, step_timeout=settings.step_timeout)

    def __init__(self, env_id: str, env_kwargs: Mapping[str, Any], step_timeout: float = 300.0) -> None:
        if step_timeout <= 0:
            raise ValueError(f"LocalEnvPool needs step_timeout > 0 (seconds), got {step_timeout}")
        self.env_id = env_id
        self.env_kwargs = dict(env_kwargs)
        self.step_timeout = float(step_timeout)
        self.envs: list[TimedEnv] = []
        self._failures = FailureCounts()

    def take(self, count: int) -> list[gym.Env]:
        """``count`` envs (the same instances on every call, grown as needed)."""
        while len(self.envs) < count:
            self.envs.append(TimedEnv(self, len(self.envs)))
        return list(self.envs[:count])

    def pop_failures(self) -> dict[str, int]:
        """Resets and steps lost to the timeout since the last call, by kind (only ``timeout`` occurs here)."""
        return self._failures.pop()

    def check_health(self) -> dict[str, int]:
        """Nothing to restart in this process; counts the servers of its ``agentfly/Remote`` envs that do not
        answer (:func:`~agentfly_envs.runtime.failures.servers_down`)."""
        return {"restarted": 0, "servers_down": len(servers_down(self.envs))}

    def close(self) -> None:
        """Closes every env (a stuck one is not waited for)."""
        for env in self.envs:
            env.close()
        self.envs.clear()

    def make_env(self) -> gym.Env:
        """A new env of the pool's id and kwargs, for a slot (at its first :meth:`take`, or in place of a stuck one);
        a subclass may hand out envs made otherwise."""
        return gym.make(self.env_id, disable_env_checker=True, **self.env_kwargs)


class TimedEnv(gym.Wrapper):
    """An env of a :class:`LocalEnvPool` whose calls give up after the pool's ``step_timeout`` (made by
    :meth:`LocalEnvPool.take`); a lost step returns the :func:`~agentfly_envs.runtime.failures.lost_episode` step."""

    def __init__(self, pool: LocalEnvPool, slot: int) -> None:
        super().__init__(pool.make_env())
        self._pool = pool
        self._slot = slot
        self._lost = False  # the wrapped env is stuck in a thread; reset replaces it
        self._error_counts: dict[str, int] = {}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """Starts an episode (on a fresh env after a lost call; one retry if that one times out too).

        Raises:
            RemoteEnvError: the reset timed out twice in a row.
        """
        for _ in range(2):
            if self._lost:
                self.env, self._lost = self._pool.make_env(), False
            try:
                observation, info = self._call(self.env.reset, seed=seed, options=options)
            except WorkerLost:
                continue
            self._error_counts = {}
            return observation, info
        raise RemoteEnvError(
            f"env {self._slot} of {self._pool.env_id}: reset timed out twice (step_timeout "
            f"{self._pool.step_timeout:g} s); raise actor_rollout_ref.rollout.env_step_timeout or fix the env's reset"
        )

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """Plays one turn; one past the timeout ends the episode with an ``Error:`` observation.

        Raises:
            ResetNeeded: the episode was lost to a timeout.
        """
        if self._lost:
            raise ResetNeeded("call reset() before step() (this env's episode was lost to a step timeout)")
        lost_reward = truncation_reward(self.env)
        try:
            result = self._call(self.env.step, action)
        except WorkerLost as lost:
            return lost_episode(lost, self._pool.step_timeout, self._error_counts, lost_reward)
        self._error_counts = dict(result[4].get("error_counts", {}))
        return result

    def close(self) -> None:
        """Closes the env (a stuck one is being closed by its own thread already)."""
        if not self._lost:
            self.env.close()

    def _call(self, method: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``method(*args, **kwargs)`` in a daemon thread (a stuck one does not hold up the interpreter's exit).

        Raises:
            WorkerLost: it ran past the timeout; the env is marked lost and closed from another thread.
        """
        future: Future[T] = Future()

        def run() -> None:
            try:
                future.set_result(method(*args, **kwargs))
            except BaseException as error:  # handed to the caller as is
                future.set_exception(error)

        threading.Thread(target=run, name=f"env-{self._slot}", daemon=True).start()
        if not wait([future], timeout=self._pool.step_timeout).done:
            stuck = self.env
            tool = getattr(stuck.unwrapped, "running_tool", None)
            self._lost = True
            self._pool._failures.add("timeout")
            threading.Thread(target=stuck.close, name=f"env-{self._slot}-close", daemon=True).start()
            raise WorkerLost("timeout", tool)
        return future.result()
