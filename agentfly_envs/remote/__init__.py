"""Envs over HTTP in OpenEnv's protocol: :mod:`.server` serves any agentfly env (``python -m agentfly_envs serve``),
:mod:`.client` plays any such server as a Gymnasium env (``gymnasium.make("agentfly/Remote", url=...)``)::

    from agentfly_envs.remote import ServerThread, create_app

    with ServerThread(create_app("agentfly/Arith-Calc")) as url:
        env = gymnasium.make("agentfly/Remote", url=url)

The client needs only ``websockets``; the server names (:func:`create_app`, :class:`ServerThread`,
:class:`ServedEnv`, :data:`MAX_MESSAGE_BYTES`) import openenv-core (the ``openenv`` extra) when first used.
"""

from __future__ import annotations

import importlib
from typing import Any

from agentfly_envs.remote.client import HTTPEnv

SERVER_NAMES = ("MAX_MESSAGE_BYTES", "AgentflyAction", "AgentflyObservation", "ServedEnv", "ServerThread", "create_app")

__all__ = ["HTTPEnv", *SERVER_NAMES]


def __getattr__(name: str) -> Any:
    if name in SERVER_NAMES:
        return getattr(importlib.import_module("agentfly_envs.remote.server"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
