"""A name -> object registry with a decorator to fill it and helpful errors on lookup.

Each kind of component (tools, parsers, rewards, task sources) has one :class:`Registry`.

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
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from agentfly_envs.errors import DuplicateRegistrationError, UnknownNameError

T = TypeVar("T")


class Registry(Generic[T]):
    """A mapping of snake_case names to components of one kind.

    Args:
        kind: What the registry holds, used in error messages ("tool", "reward", ...).
        where: Where a user adds a new entry, used in error messages.
    """

    def __init__(self, kind: str, where: str) -> None:
        self.kind = kind
        self.where = where
        self._entries: dict[str, T] = {}

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
        if name in self._entries:
            raise DuplicateRegistrationError(
                f"{self.kind} {name!r} is already registered (to {self._entries[name]!r}); pick another name."
            )
        self._entries[name] = obj

    def get(self, name: str) -> T:
        """Returns the entry filed under ``name``.

        Raises:
            UnknownNameError: nothing is filed under ``name``; the message suggests close matches.
        """
        try:
            return self._entries[name]
        except (KeyError, TypeError):
            close = difflib.get_close_matches(str(name), self._entries, n=1)
            guess = f"; did you mean {close[0]!r}?" if close else "."
            raise UnknownNameError(
                f"{self.kind} {name!r} is not registered{guess} Known: {', '.join(sorted(self._entries))}. "
                f"Add one with @{self.kind.upper()}S.register(name) in {self.where}."
            ) from None

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._entries))

    def __len__(self) -> int:
        return len(self._entries)
