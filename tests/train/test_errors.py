"""agentfly_train.errors: an exception as the one line the command line prints."""

from __future__ import annotations

import pytest

from agentfly_train.errors import error_summary


@pytest.mark.parametrize(
    ("error", "line"),
    [
        (ValueError("bad value"), "ValueError: bad value"),
        (RuntimeError("first line\n\n   second line  \n"), "RuntimeError: first line second line"),
        (KeyboardInterrupt(), "KeyboardInterrupt"),
    ],
)
def test_an_error_is_its_type_and_its_message_on_one_line(error, line):
    assert error_summary(error) == line


def test_a_long_message_is_cut_at_the_limit():
    line = error_summary(OSError("x" * 1000), limit=20)
    assert line == "OSError: " + "x" * 17 + "..."
