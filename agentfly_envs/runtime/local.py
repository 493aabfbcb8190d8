"""Envs in this process, reused across rollouts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import gymnasium as gym


class EnvPool(Protocol):
    """Hands out env instances of one id; what the rollout engine steps."""

    def take(self, count: int) -> list[gym.Env]:
        """``count`` envs, the same instances on every call (grown as needed)."""
        ...

    def close(self) -> None:
        """Closes every env and frees what hosts them."""
        ...


class LocalEnvPool:
    """Reusable env instances of one id in this process, created on demand.

    Args:
        env_id: Registered id.
        env_kwargs: ``gymnasium.make`` keyword arguments.

    Example:
        >>> import agentfly_envs
        >>> pool = LocalEnvPool("agentfly/Arith-Calc", {"level": "easy"})
        >>> envs = pool.take(2)
        >>> pool.take(1)[0] is envs[0]
        True
        >>> pool.close()
    """

    def __init__(self, env_id: str, env_kwargs: Mapping[str, Any]) -> None:
        self.env_id = env_id
        self.env_kwargs = dict(env_kwargs)
        self.envs: list[gym.Env] = []

    def take(self, count: int) -> list[gym.Env]:
        """``count`` envs (the same instances on every call, grown as needed)."""
        while len(self.envs) < count:
            self.envs.append(gym.make(self.env_id, disable_env_checker=True, **self.env_kwargs))
        return self.envs[:count]

    def close(self) -> None:
        """Closes every env."""
        for env in self.envs:
            env.close()
        self.envs.clear()
