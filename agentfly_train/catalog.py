"""What a configuration can name: ``python -m agentfly_train list envs|tools|rewards|...|keys``.

Each listing reads the registry the configuration is checked against, so what a user registers (``agent.imports``)
is listed with the rest.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any


def _summary(entry: Any) -> str:
    """The first line of what an entry says of itself: a tool's schema description, else its docstring (an
    estimator's: its function's)."""
    schema = getattr(entry, "schema", None)
    if isinstance(schema, dict):
        doc = schema.get("function", {}).get("description", "")
    else:
        doc = inspect.getdoc(getattr(entry, "fn", entry))
    return doc.strip().splitlines()[0] if doc else ""


def _registry(module: str, name: str) -> Callable[[], list[tuple[str, str]]]:
    def entries() -> list[tuple[str, str]]:
        import importlib

        registry = getattr(importlib.import_module(module), name)
        return [(key, _summary(entry)) for key, entry in registry.items()]

    return entries


def _envs() -> list[tuple[str, str]]:
    import gymnasium as gym

    import agentfly_envs  # noqa: F401  (registers the env ids)

    rows = []
    for env_id, spec in sorted(gym.registry.items()):
        if not env_id.startswith("agentfly/"):
            continue
        kwargs = spec.kwargs or {}
        parts = [f"{key}={kwargs[key]!r}" for key in ("task", "world", "tools", "reward") if key in kwargs]
        rows.append((env_id, ", ".join(parts) or f"entry_point={spec.entry_point!r}"))
    return rows


def _templates() -> list[tuple[str, str]]:
    from agentfly_train.chat_templates import shipped_templates
    from agentfly_train.models import known_templates

    ours = set(shipped_templates())
    return [(name, "agentfly" if name in ours else "TRL") for name in known_templates()]


def _keys() -> list[tuple[str, str]]:
    from agentfly_train.config.reference import key_reference

    return [(doc.key, f"{doc.default!r}  {doc.help}") for doc in key_reference()]


LISTINGS: dict[str, Callable[[], list[tuple[str, str]]]] = {
    "envs": _envs,
    "tools": _registry("agentfly_envs.tools", "TOOLS"),
    "rewards": _registry("agentfly_envs.rewards", "REWARDS"),
    "parsers": _registry("agentfly_envs.parsers", "PARSERS"),
    "estimators": _registry("agentfly_train.algorithms", "ADVANTAGE_ESTIMATORS"),
    "backends": _registry("agentfly_train.generation", "GENERATION_BACKENDS"),
    "launchers": _registry("agentfly_train.launchers", "LAUNCHERS"),
    "templates": _templates,
    "keys": _keys,
}


def listing(kind: str) -> str:
    """The lines of ``list KIND``: one name per line, then its one-line description.

    Raises:
        KeyError: ``kind`` is not one of :data:`LISTINGS`.
    """
    rows = LISTINGS[kind]()
    width = max((len(name) for name, _ in rows), default=0)
    return "\n".join(f"{name:<{width}}  {text}".rstrip() for name, text in rows)
