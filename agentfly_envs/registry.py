"""A name -> object registry with a decorator to fill it and helpful errors on lookup.

Each kind of component has one :class:`Registry`: tools, parsers, rewards and task sources here, and in
``agentfly_train`` advantage estimators, KL penalties and controllers, loss aggregations, generation backends and
launchers.

Example:
    >>> COLOURS = Registry("colour", where="my_module.py")
    >>> @COLOURS.register("red")
    ... def red() -> str:
    ...     return "#f00"
    >>> COLOURS.get("red")()
    '#f00'
    >>> COLOURS.get("rad")
    Traceback (most recent call last):
    ...
    agentfly_envs.errors.UnknownNameError: colour 'rad' is not registered; did you mean 'red'? Known: red. ...
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Generic, TypeVar

from agentfly_envs.errors import DuplicateRegistrationError, UnknownNameError

T = TypeVar("T")


def close_match(name: str, names: Iterable[str]) -> str | None:
    """The registered name a user most likely meant by ``name``, or ``None``.

    A name that contains ``name`` (or whose ``_``-separated words all appear in it) wins, the closest in length
    first; then the name sharing the most words with it; then the closest spelling
    (:func:`difflib.get_close_matches`, cutoff 0.6).

    Example:
        >>> close_match("math_reward", ["qa_f1_reward", "math_equal", "math_reward_string_equal"])
        'math_reward_string_equal'
        >>> close_match("calculater", ["calculator", "search"])
        'calculator'
    """
    names = sorted(names)
    words = set(name.split("_"))
    containing = [other for other in names if name and (name in other or set(other.split("_")) <= words)]
    if containing:
        return min(containing, key=lambda other: (abs(len(other) - len(name)), other))
    shared = {other: len(words & set(other.split("_"))) for other in names}
    most = max(shared.values(), default=0)
    if most:
        tied = [other for other in names if shared[other] == most]
        return max(tied, key=lambda other: difflib.SequenceMatcher(None, name, other).ratio())
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    return close[0] if close else None


def load_entry_point(entry_point: str) -> Any:
    """The object an entry point names: ``"package.module:attribute"`` -> ``getattr(import_module(module), attr)``."""
    module, _, attribute = entry_point.partition(":")
    return getattr(importlib.import_module(module), attribute)


class Registry(Generic[T]):
    """A mapping of snake_case names to components of one kind.

    Args:
        kind: What the registry holds, used in error messages ("tool", "reward", ...).
        where: Where a user adds a new entry, used in error messages.
        how: How to add an entry, for error messages, when it is not ``@<KIND>S.register(name)`` on the object
            itself (e.g. tools wrap a function).
    """

    def __init__(self, kind: str, where: str, how: str | None = None) -> None:
        self.kind = kind
        self.where = where
        self.how = how or f"@{kind.upper()}S.register(name)"
        self._entries: dict[str, T] = {}
        self._entry_points: dict[str, str] = {}
        self._aliases: dict[str, str] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator that files the decorated object under ``name``; a second use of a name raises."""

        def decorator(obj: T) -> T:
            self.add(name, obj)
            return obj

        return decorator

    def add(self, name: str, obj: T) -> None:
        """Files ``obj`` under ``name``.

        Raises:
            DuplicateRegistrationError: ``name`` is already taken.
        """
        self._check_free(name)
        self._entries[name] = obj

    def add_entry_point(self, name: str, entry_point: str) -> None:
        """Files under ``name`` the object at ``entry_point``, ``"package.module:attribute"``, imported the first
        time ``name`` is looked up (as Gymnasium's ``register(id, entry_point=...)``): a registry can then name
        members that live in modules above it without importing them.

        Raises:
            DuplicateRegistrationError: ``name`` is already taken.
        """
        self._check_free(name)
        self._entry_points[name] = entry_point

    def add_alias(self, alias: str, name: str) -> None:
        """Makes ``alias`` a second name of the entry filed under ``name`` (another library's word for it, e.g.
        AgentFly's ``agent_type=hf`` for the ``tool_calls`` parser): :meth:`get` and ``in`` accept it, listings
        name the entry once, under ``name``.

        Raises:
            DuplicateRegistrationError: ``alias`` is already taken.
            UnknownNameError: nothing is filed under ``name``.
        """
        self._check_free(alias)
        if name not in self:
            self.get(name)  # raises, naming what is registered
        self._aliases[alias] = name

    def canonical(self, name: str) -> str:
        """The name an entry is filed under: ``name`` itself, or the one an alias stands for."""
        return self._aliases.get(name, name)

    def _check_free(self, name: str) -> None:
        if name in self:
            filed = self.canonical(name)
            taken = self._entries[filed] if filed in self._entries else self._entry_points[filed]
            raise DuplicateRegistrationError(
                f"{self.kind} {name!r} is already registered (to {taken!r}); pick another name."
            )

    def get(self, name: str) -> T:
        """Returns the entry filed under ``name``.

        Raises:
            UnknownNameError: nothing is filed under ``name``; the message suggests close matches.
        """
        if isinstance(name, str):
            name = self.canonical(name)
        if isinstance(name, str) and name in self._entry_points:
            self._entries[name] = load_entry_point(self._entry_points[name])
            del self._entry_points[name]
        try:
            return self._entries[name]
        except (KeyError, TypeError):
            close = close_match(str(name), [*self, *self._aliases])
            guess = f"; did you mean {close!r}?" if close else "."
            also = f" (also {', '.join(sorted(self._aliases))})" if self._aliases else ""
            raise UnknownNameError(
                f"{self.kind} {name!r} is not registered{guess} Known: {', '.join(self)}{also}. "
                f"Add one with {self.how} in {self.where}."
            ) from None

    def items(self) -> list[tuple[str, T]]:
        """``(name, entry)`` pairs, sorted by name (importing every entry point not imported yet)."""
        return [(name, self.get(name)) for name in self]

    def __contains__(self, name: object) -> bool:
        return name in self._entries or name in self._entry_points or name in self._aliases

    def __iter__(self) -> Iterator[str]:
        """The names, sorted; nothing is imported."""
        return iter(sorted([*self._entries, *self._entry_points]))

    def __len__(self) -> int:
        return len(self._entries) + len(self._entry_points)
