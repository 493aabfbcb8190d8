"""``TextSpace``: Gymnasium's ``Text`` space for arbitrary Unicode, with the utilities that must match.

Gymnasium's ``Text`` encodes characters as indices into a fixed charset, so it cannot hold model or
tool output (any Unicode). ``TextSpace`` accepts any string up to ``max_length`` characters and
encodes a character as its code point + 1 (0 = padding). The space utilities Gymnasium dispatches
on the space type (``flatten``, ``unflatten``, ``flatten_space``, and the shared-memory transport
of ``AsyncVectorEnv``) are registered for it here, so wrappers and vector envs work unchanged.
"""

from __future__ import annotations

import collections.abc
import string
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.spaces import utils as space_utils
from gymnasium.vector.utils import shared_memory

MAX_CODE_POINT = 0x10FFFF


class TextSpace(spaces.Text):
    """Any Unicode string of 0 to ``max_length`` characters.

    ``sample()`` draws printable ASCII; ``contains()`` accepts every character.

    Example:
        >>> space = TextSpace(16)
        >>> space.contains("½ ✓ 😀"), space.contains("x" * 17)
        (True, False)
        >>> space_utils.unflatten(space, space_utils.flatten(space, "héllo"))
        'héllo'
    """

    def __init__(self, max_length: int, seed: int | np.random.Generator | None = None) -> None:
        super().__init__(max_length=max_length, min_length=0, charset=string.printable, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"TextSpace(max_length={self.max_length})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TextSpace) and other.max_length == self.max_length


def encode_text(space: TextSpace, text: str) -> np.ndarray:
    """``(max_length,)`` int32: code point + 1 per character, 0 after the end of ``text``."""
    codes = np.zeros(space.max_length, dtype=np.int32)
    codes[: len(text)] = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32).astype(np.int32) + 1
    return codes


def decode_text(codes: np.ndarray) -> str:
    """Inverse of :func:`encode_text` for one row of codes."""
    codes = np.asarray(codes, dtype=np.int64)
    return (codes[codes > 0] - 1).astype(np.uint32).tobytes().decode("utf-32-le")


@space_utils.flatten.register(TextSpace)
def _flatten(space: TextSpace, x: str) -> np.ndarray:
    return encode_text(space, x)


@space_utils.unflatten.register(TextSpace)
def _unflatten(space: TextSpace, x: np.ndarray) -> str:
    return decode_text(x)


@space_utils.flatten_space.register(TextSpace)
def _flatten_space(space: TextSpace) -> spaces.Box:
    return spaces.Box(low=0, high=MAX_CODE_POINT + 1, shape=(space.max_length,), dtype=np.int32)


@shared_memory.write_to_shared_memory.register(TextSpace)
def _write(space: TextSpace, index: int, values: str, memory: Any) -> None:
    size = space.max_length
    destination = np.frombuffer(memory.get_obj(), dtype=np.int32)
    destination[index * size : (index + 1) * size] = encode_text(space, values)


class SharedTextBatch(collections.abc.Sequence):
    """A live view of ``n`` strings in shared memory, decoded on access.

    ``AsyncVectorEnv`` reads its observation buffer once, at construction, and relies on the result
    being a view that the workers' writes update (true for arrays). Gymnasium's own ``Text`` reader
    returns a tuple snapshot, so its async observations never change; this view fixes that for
    ``TextSpace``. ``deepcopy`` (what ``AsyncVectorEnv`` returns with ``copy=True``) gives a tuple.
    """

    def __init__(self, memory: Any, n: int, max_length: int) -> None:
        self._rows = np.frombuffer(memory.get_obj(), dtype=np.int32).reshape((n, max_length))

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return tuple(decode_text(row) for row in self._rows[index])
        return decode_text(self._rows[index])

    def __deepcopy__(self, memo: dict) -> tuple[str, ...]:
        return tuple(self)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, collections.abc.Sequence) and tuple(self) == tuple(other)

    def __repr__(self) -> str:
        return f"SharedTextBatch({tuple(self)!r})"


@shared_memory.read_from_shared_memory.register(TextSpace)
def _read(space: TextSpace, memory: Any, n: int = 1) -> SharedTextBatch:
    return SharedTextBatch(memory, n, space.max_length)
