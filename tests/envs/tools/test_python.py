import time

import pytest

from agentfly_envs.tools import CallStatus, get_tool
from agentfly_envs.tools import python as python_module

PYTHON = get_tool("python")


def test_runs_code_in_a_subprocess_and_returns_output():
    result = PYTHON({"code": "import os\nprint(6 * 7)\nprint(os.getpid() != 1)"})
    assert result.status is CallStatus.OK
    assert result.content == "42\nTrue\n"


def test_runs_in_an_empty_temporary_directory():
    assert PYTHON({"code": "import os; print(os.listdir('.'))"}).content.strip() == "[]"


def test_large_programs_are_passed_whole():
    code = "x = 0\n" + "x += 1\n" * 100_000 + "print(x)"  # ~700 kB, beyond the 128 KiB argv limit
    assert PYTHON({"code": code}).content == "100000\n"


def test_exception_traceback_is_returned():
    result = PYTHON({"code": "raise ValueError('bad input')"})
    assert "ValueError: bad input" in result.content


def test_runaway_code_is_stopped(monkeypatch):
    monkeypatch.setattr(python_module, "TIMEOUT_S", 1.0)
    start = time.perf_counter()
    result = PYTHON({"code": "while True: pass"})
    assert time.perf_counter() - start < 5
    assert result.status is CallStatus.TOOL_ERROR
    assert "longer than 1 seconds" in result.content


def test_output_flood_is_cut_at_the_limit():
    result = PYTHON({"code": "while True: print('x' * 1000)"})
    assert "output exceeded" in result.content
    assert len(result.content) <= python_module.OUTPUT_LIMIT_BYTES + 200


def test_memory_bomb_fails_inside_the_child():
    result = PYTHON({"code": "x = bytearray(4 * 1024**3)"})
    assert "MemoryError" in result.content


@pytest.mark.parametrize("code", ["import sys; sys.exit(3)", "\x00"])
def test_odd_exits_are_reported(code):
    assert PYTHON({"code": code}).content.startswith("Error:")
