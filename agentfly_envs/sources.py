"""Envs from other libraries by a prefix: ``openenv:<url>`` and ``verifiers:<module>`` name a Gymnasium id and its
kwargs, chosen by a lookup in :data:`ENV_SOURCES`.

``resolve_env("openenv:http://127.0.0.1:8000")`` is ``("agentfly/Remote", {"url": "http://127.0.0.1:8000"})``: the
client env of :mod:`agentfly_envs.remote.client`, which plays any server speaking OpenEnv's protocol (ours from
``python -m agentfly_envs serve``, or OpenEnv's own). ``resolve_env("verifiers:my_env")`` is
``("agentfly/Verifiers", {"taskset": "my_env"})`` (:mod:`agentfly_envs.adapters.verifiers`). Any other name is a
Gymnasium id with no kwargs (``module:id`` ids included: their prefix is not a source).

Example:
    >>> resolve_env("openenv:http://127.0.0.1:8000")
    ('agentfly/Remote', {'url': 'http://127.0.0.1:8000'})
    >>> resolve_env("agentfly/GSM8K-Calc")
    ('agentfly/GSM8K-Calc', {})
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentfly_envs.registry import Registry

EnvSource = Callable[[str], tuple[str, dict[str, Any]]]
"""What follows the prefix -> ``(Gymnasium id, gymnasium.make kwargs)``."""

ENV_SOURCES: Registry[EnvSource] = Registry(
    "env source", where="agentfly_envs/sources.py", how="@ENV_SOURCES.register(prefix) on a function"
)
"""Prefixes of ``agent.env`` values that name another library's env (``openenv``, ``verifiers``)."""


def resolve_env(name: str) -> tuple[str, dict[str, Any]]:
    """The Gymnasium id and kwargs that ``name`` stands for (see the module docstring).

    Raises:
        ValueError: a source's target is malformed (e.g. ``openenv:`` without a URL); the message says what to
            give, and the caller names the value.
    """
    prefix, colon, target = name.partition(":")
    if colon and prefix in ENV_SOURCES:
        return ENV_SOURCES.get(prefix)(target)
    return name, {}


@ENV_SOURCES.register("openenv")
def openenv_source(url: str) -> tuple[str, dict[str, Any]]:
    """``openenv:<url>``: the env served at ``url`` (``http(s)://`` or ``ws(s)://``), through ``agentfly/Remote``."""
    if not url.startswith(("http://", "https://", "ws://", "wss://")):
        raise ValueError(
            "give the server's URL, e.g. openenv:http://127.0.0.1:8000 (start one with "
            "`python -m agentfly_envs serve ENV_ID --port 8000`)"
        )
    return "agentfly/Remote", {"url": url}


@ENV_SOURCES.register("verifiers")
def verifiers_source(module: str) -> tuple[str, dict[str, Any]]:
    """``verifiers:<module>``: the verifiers taskset of that module, through ``agentfly/Verifiers``."""
    if not module:
        raise ValueError("name the module of a verifiers taskset, e.g. verifiers:my_taskset")
    return "agentfly/Verifiers", {"taskset": module}
