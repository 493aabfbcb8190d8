import time

import pytest

from agentfly_envs.sandbox import SandboxLimits, SandboxPool
from agentfly_envs.tools import CallStatus, get_tool
from agentfly_envs.tools.python_executor import NO_OUTPUT

PYTHON = get_tool("python")


@pytest.fixture(scope="module")
def tight_pool():
    with SandboxPool(SandboxLimits(timeout_s=1.0, file_bytes=1 << 20, memory_bytes=256 << 20), workers=1) as pool:
        yield pool


def test_runs_code_in_a_sandbox_process_and_returns_output():
    import os

    result = PYTHON({"code": f"import os\nprint(6 * 7)\nprint(os.getpid() != {os.getpid()})"})
    assert result.status is CallStatus.OK
    assert result.content == "42\nTrue\n"


def test_each_call_starts_from_scratch():
    assert PYTHON({"code": "x = 1"}).content == NO_OUTPUT
    assert "NameError: name 'x' is not defined" in PYTHON({"code": "print(x)"}).content


def test_runs_in_an_empty_working_directory():
    assert PYTHON({"code": "import os; print(os.listdir('.'))"}).content.strip() == "[]"


def test_large_programs_are_passed_whole():
    code = "x = 0\n" + "x += 1\n" * 100_000 + "print(x)"  # ~700 kB, beyond the 128 KiB argv limit
    assert PYTHON({"code": code}).content == "100000\n"


def test_exception_traceback_is_returned():
    result = PYTHON({"code": "raise ValueError('bad input')"})
    assert result.status is CallStatus.OK
    assert 'File "<cell 1>", line 1' in result.content and "ValueError: bad input" in result.content


def test_runaway_code_is_stopped(tight_pool):
    tool = PYTHON.for_env(pool=tight_pool)
    start = time.perf_counter()
    result = tool({"code": "while True: pass"})
    assert time.perf_counter() - start < 5
    assert result.status is CallStatus.TOOL_ERROR
    assert result.content == "Error: the code was stopped: it ran longer than 1 s"


def test_output_flood_is_cut_at_the_limit(tight_pool):
    result = PYTHON.for_env(pool=tight_pool)({"code": "while True: print('x' * 1000)"})
    assert result.status is CallStatus.TOOL_ERROR
    assert result.content.startswith("Error: the code was stopped: the output reached 1048576 bytes")
    assert "bytes of output cut" in result.content
    assert len(result.content) <= tight_pool.limits.output_bytes + 200


def test_memory_bomb_fails_inside_the_sandbox(tight_pool):
    result = PYTHON.for_env(pool=tight_pool)({"code": "x = bytearray(4 * 1024**3)"})
    assert "MemoryError" in result.content


@pytest.mark.parametrize("code", ["import sys; sys.exit(3)", "\x00"])
def test_odd_exits_are_reported(code):
    assert PYTHON({"code": code}).content.startswith("Error:")
