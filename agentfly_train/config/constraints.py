"""What a configuration value must be, declared on its field (``dataclasses.field(metadata=...)``).

A schema field states its constraint with :func:`setting`, e.g. ``max_turns: int = setting(4, Positive())``; the
validation walks the schema and checks every declared constraint (:func:`constraint_of`), and the generated key
reference prints :meth:`Constraint.describe` beside the key. A constraint naming a registry holds the registry as a
``"module:attribute"`` string, imported only when a value is checked, so the schema imports nothing but the
standard library.

Example:
    >>> Positive().describe(), Within(0, 1, high_open=True).describe(), OneOf(("keep", "drop")).describe()
    ('> 0', 'in [0, 1)', 'one of keep, drop')
    >>> Within(0, 1).check("algorithm.gamma", 1.5)
    Traceback (most recent call last):
    ...
    agentfly_train.config.errors.ConfigError: algorithm.gamma must be in [0, 1], got 1.5
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import MISSING, Field, dataclass, field
from typing import Any

from agentfly_envs.registry import Registry, load_entry_point
from agentfly_train.config.errors import ConfigError, check_choice, check_non_negative, check_positive, registered

CHECK = "check"
"""The key of a field's metadata that holds its :class:`Constraint`."""


class Constraint(ABC):
    """What a value must be: :meth:`check` raises :class:`ConfigError` naming the key; :meth:`describe` says it."""

    @abstractmethod
    def check(self, key: str, value: Any) -> None:
        """Raises :class:`ConfigError` (one line naming ``key``) unless ``value`` satisfies the constraint."""

    @abstractmethod
    def describe(self) -> str:
        """The constraint in a few words, for the key reference (e.g. ``> 0``, ``in [0, 1]``)."""


@dataclass(frozen=True)
class Positive(Constraint):
    """``> 0`` (``allow_none``: or ``null``, the key's "unset")."""

    allow_none: bool = False

    def check(self, key: str, value: Any) -> None:
        check_positive(key, value, allow_none=self.allow_none)

    def describe(self) -> str:
        return "> 0 or null" if self.allow_none else "> 0"


@dataclass(frozen=True)
class NonNegative(Constraint):
    """``>= 0`` (``null`` passes); ``note`` says what a value means, e.g. ``" (0: a CPU run)"``."""

    note: str = ""

    def check(self, key: str, value: Any) -> None:
        check_non_negative(key, value, self.note)

    def describe(self) -> str:
        return f">= 0{self.note}"


@dataclass(frozen=True)
class AtLeast(Constraint):
    """``>= low``, or ``null`` where ``allow_none``; ``note`` is added to the error (e.g. what ``null`` means)."""

    low: float
    allow_none: bool = False
    note: str = ""

    def check(self, key: str, value: Any) -> None:
        if (value is None and self.allow_none) or (value is not None and value >= self.low):
            return
        raise ConfigError(f"{key} must be >= {self.low}{self.note}, got {value}")

    def describe(self) -> str:
        return f">= {self.low}" + (" or null" if self.allow_none else "")


@dataclass(frozen=True)
class Within(Constraint):
    """Between ``low`` and ``high``, each end included unless open (``[0, 1)``, ``(0, 1)``, ...)."""

    low: float
    high: float
    low_open: bool = False
    high_open: bool = False

    def check(self, key: str, value: Any) -> None:
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        if not (above and below):
            raise ConfigError(f"{key} must be {self.describe()}, got {value}")

    def describe(self) -> str:
        return f"in {'(' if self.low_open else '['}{self.low}, {self.high}{')' if self.high_open else ']'}"


@dataclass(frozen=True)
class OneOf(Constraint):
    """One of fixed ``choices`` (each item, for a list-valued key)."""

    choices: tuple[str, ...]

    def check(self, key: str, value: Any) -> None:
        for item in value if isinstance(value, list) else [value]:
            check_choice(key, item, self.choices)

    def describe(self) -> str:
        return f"one of {', '.join(self.choices)}"


@dataclass(frozen=True)
class Registered(Constraint):
    """A name in the registry at ``registry`` (``"module:attribute"``, imported when a value is checked); each item
    for a list-valued key; ``null`` passes; ``also`` are names accepted besides the registry's (e.g. ``auto``), and
    ``prefixes`` start values checked where they are used instead (e.g. ``mcp:`` tool entries, by the env)."""

    registry: str
    also: tuple[str, ...] = ()
    prefixes: tuple[str, ...] = ()

    def check(self, key: str, value: Any) -> None:
        entries = self.entries()
        for item in value if isinstance(value, list) else [] if value is None else [value]:
            if item not in self.also and not (isinstance(item, str) and item.startswith(self.prefixes)):
                registered(key, entries, item)

    def entries(self) -> Registry[Any]:
        """The registry, imported by its entry point."""
        return load_entry_point(self.registry)

    def describe(self) -> str:
        kind = self.registry.rpartition(":")[2].lower().replace("_", " ")
        return " or ".join([f"a name in {kind}", *self.also, *(f"{prefix}..." for prefix in self.prefixes)])


def setting(default: Any = MISSING, check: Constraint | None = None, *, factory: Any = MISSING) -> Any:
    """A schema field with a default (or a ``factory`` of it) and, optionally, the constraint on its values."""
    metadata = {} if check is None else {CHECK: check}
    if factory is not MISSING:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def constraint_of(item: Field[Any]) -> Constraint | None:
    """The constraint a schema field declares, or ``None``."""
    return item.metadata.get(CHECK)
