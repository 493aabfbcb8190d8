import copy
import multiprocessing

import numpy as np
from gymnasium.spaces import utils as space_utils
from gymnasium.vector.utils import create_shared_memory, read_from_shared_memory, write_to_shared_memory

from agentfly_envs.spaces import TextSpace, decode_text, encode_text

TEXTS = ["", "plain", "ünïcödé ✓ 😀 中文", "\x00 nul inside", "x" * 32]


def test_contains_any_unicode_up_to_max_length():
    space = TextSpace(32)
    assert all(space.contains(text) for text in TEXTS)
    assert not space.contains("x" * 33)
    assert not space.contains(b"bytes")
    assert space.contains(space.sample())


def test_encode_decode_round_trip_and_padding():
    space = TextSpace(32)
    for text in TEXTS:
        codes = encode_text(space, text)
        assert codes.shape == (32,) and codes.dtype == np.int32
        assert (codes[len(text) :] == 0).all()
        assert decode_text(codes) == text


def test_flatten_utilities():
    space = TextSpace(16)
    flat = space_utils.flatten_space(space)
    assert flat.shape == (16,)
    codes = space_utils.flatten(space, "½ ✓")
    assert flat.contains(codes)
    assert space_utils.unflatten(space, codes) == "½ ✓"


def test_shared_memory_is_a_live_view_and_deepcopies_to_a_tuple():
    space = TextSpace(16)
    memory = create_shared_memory(space, n=2, ctx=multiprocessing.get_context())
    view = read_from_shared_memory(space, memory, n=2)
    write_to_shared_memory(space, 0, "first ✓", memory)
    write_to_shared_memory(space, 1, "😀", memory)
    assert tuple(view) == ("first ✓", "😀")
    snapshot = copy.deepcopy(view)
    write_to_shared_memory(space, 1, "changed", memory)
    assert view[1] == "changed" and snapshot == ("first ✓", "😀") and isinstance(snapshot, tuple)
    assert view[0:1] == ("first ✓",)
