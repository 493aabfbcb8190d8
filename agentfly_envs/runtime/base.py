"""What an env runtime is: a pool that hands out envs of one id, chosen by name from :data:`ENV_RUNTIMES`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import gymnasium as gym

from agentfly_envs.registry import Registry
from agentfly_envs.user_code import UserCode


@dataclass(frozen=True)
class PoolSettings:
    """How a run hosts its envs (a trainer's ``actor_rollout_ref.rollout.env_*``).

    Attributes:
        workers: Hosts: threads stepping envs in this process, or env actors on a cluster.
        worker_cpus: CPUs each remote host reserves.
        worker_resources: Other resources each remote host reserves (e.g. ``{"tools": 1}``).
        step_timeout: Seconds an env reset or step may take.
        user_code: The user's modules and reward file, loaded wherever envs are built.
    """

    workers: int = 8
    worker_cpus: float = 1.0
    worker_resources: Mapping[str, float] = field(default_factory=dict)
    step_timeout: float = 300.0
    user_code: UserCode = field(default_factory=UserCode)


class EnvPool(Protocol):
    """Hands out env instances of one id; what the rollout engine steps.

    A runtime registered in :data:`ENV_RUNTIMES` is a class with this interface and the class-level
    ``steps_per_worker`` (envs one host steps at once), ``unavailable()`` (why it cannot run here, or ``None``) and
    ``from_settings(env_id, env_kwargs, settings)``.
    """

    def take(self, count: int) -> list[gym.Env]:
        """``count`` envs, the same instances on every call (grown as needed)."""
        ...

    def pop_failures(self) -> dict[str, int]:
        """Env calls lost since the last call (timeouts, dead hosts), by kind (``FAILURE_KINDS``)."""
        ...

    def check_health(self) -> dict[str, int]:
        """Pings every host the envs use, in a few seconds at most, and replaces the dead ones, so that no episode
        meets them: an env on a replaced host starts its next ``reset`` on the new one. Call it between batches.

        Returns:
            ``{"restarted": hosts replaced, "servers_down": servers of the envs that do not answer}`` (a server is
            not ours to restart: its episodes are lost as before).
        """
        ...

    def close(self) -> None:
        """Closes every env and frees what hosts them."""
        ...


ENV_RUNTIMES: Registry[Any] = Registry(
    "env runtime", where="agentfly_envs/runtime/", how="@ENV_RUNTIMES.register(name) on the pool class"
)
"""Env pool classes by runtime name (``local``, ``ray``)."""
