"""The bottom of the configuration: :class:`ConfigError` and the helpers that check one value of one key.

Every part that checks its own config section (a generation backend, an estimator, a launcher, a runtime) raises
through these, so a bad value is one line naming the key, the value and what would be valid.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from agentfly_envs.errors import UnknownNameError
from agentfly_envs.registry import Registry, close_match

T = TypeVar("T")


class ConfigError(ValueError):
    """A configuration key or value is invalid; the message names it and what would be valid."""


def check_choice(key: str, value: Any, choices: Sequence[str]) -> None:
    """Raises ``ConfigError`` when ``value`` of ``key`` is not one of the fixed ``choices`` (naming the closest)."""
    if value not in choices:
        close = close_match(str(value), choices)
        hint = f"; did you mean {close!r}?" if close else ""
        raise ConfigError(f"{key}={value!r} is not one of {list(choices)}{hint}")


def registered(key: str, registry: Registry[T], name: str) -> T:
    """The entry of ``registry`` that ``key`` names; ``ConfigError`` naming the closest name and how to add one."""
    try:
        return registry.get(name)
    except UnknownNameError as error:
        raise ConfigError(f"{key}: {error}") from None


def check_positive(key: str, value: int | float | None, allow_none: bool = False) -> None:
    """Raises ``ConfigError`` unless ``value`` of ``key`` is > 0 (or ``None`` with ``allow_none``)."""
    if value is None and allow_none:
        return
    if value is None or value <= 0:
        raise ConfigError(f"{key} must be > 0, got {value!r}")


def check_non_negative(key: str, value: int | float | None, note: str = "") -> None:
    """Raises ``ConfigError`` if ``value`` of ``key`` is < 0 (``None`` passes: the keys' "no limit"); ``note`` says
    what a value means, e.g. ``" (0: a CPU run)"``."""
    if value is not None and value < 0:
        raise ConfigError(f"{key} must be >= 0{note}, got {value!r}")
