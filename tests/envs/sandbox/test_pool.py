"""The pool's API: notebook sessions, output handling, concurrency, fork safety and recovery."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from agentfly_envs.sandbox import ExecStatus, SandboxError, SandboxLimits, SandboxPool, default_pool
from agentfly_envs.sandbox.outcome import read_output


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(SandboxLimits(timeout_s=2.0, output_bytes=1000), workers=2) as pool:
        yield pool


def test_session_keeps_state_and_echoes_the_last_expression(pool):
    with pool.session() as session:
        assert session.run("import math\nx = 6 * 7").output == ""
        assert session.run("x").output == "42\n"
        assert session.run("def f(y):\n    return y + x\nf(1)").output == "43\n"
        assert session.run("x = None\nx").output == ""  # None is not echoed
        assert session.run("print('a'); math.sqrt(16)").output == "a\n4.0\n"
        assert session.run("x", echo=False).output == ""


def test_program_run_is_fresh_and_not_echoed(pool):
    assert pool.run("x = 1\nx").output == ""
    result = pool.run("print(x)")
    assert result.status is ExecStatus.ERROR and "NameError" in result.detail


def test_exceptions_show_the_cells_traceback_only(pool):
    with pool.session() as session:
        session.run("def boom():\n    raise KeyError('k')")
        result = session.run("boom()")
    assert result.status is ExecStatus.ERROR and result.detail == "KeyError: 'k'"
    assert result.output.startswith('Traceback (most recent call last):\n  File "<cell 2>", line 1')
    assert 'File "<cell 1>", line 2, in boom\n    raise KeyError' in result.output
    assert "sandbox" not in result.output  # no frames of the sandbox's own code
    syntax = pool.run("def broken(:")
    assert syntax.status is ExecStatus.ERROR and syntax.output.startswith('  File "<cell 1>", line 1')


def test_stdout_and_stderr_keep_their_order(pool):
    code = "import sys, os\nprint('1')\nprint('2', file=sys.stderr)\nos.write(1, b'3\\n')\nprint('4')"
    assert pool.run(code).output == "1\n2\n3\n4\n"


def test_long_output_is_cut_in_the_middle_with_a_marker(pool):
    result = pool.run("print('H' * 2000 + 'T' * 2000)")
    assert result.truncated and result.status is ExecStatus.OK
    head, marker, tail = result.output.partition("\n[... 3001 bytes of output cut ...]\n")
    assert marker and head == "H" * 750 and tail == "T" * 249 + "\n"


def test_read_output_never_splits_characters_and_flags_invalid_bytes():
    fd = os.memfd_create("test")
    try:
        os.write(fd, "é".encode() * 100)  # 200 bytes of two-byte characters
        text, truncated, invalid, size = read_output(fd, 101)
        assert truncated and not invalid and size == 200
        assert set(text.replace("[... 99 bytes of output cut ...]", "").replace("\n", "")) == {"é"}
        os.write(fd, b"\xff")
        assert read_output(fd, 1000)[2]  # invalid UTF-8 is flagged (and shown as U+FFFD)
    finally:
        os.close(fd)


def test_timeout_interrupts_the_call_and_keeps_state(pool):
    with pool.session() as session:
        session.run("x = 1")
        result = session.run("import time\nwhile True: time.sleep(0.01)", timeout_s=0.3)
        assert (result.status, result.restarted) == (ExecStatus.TIMEOUT, False)
        assert 0.3 <= result.seconds < 1.0
        assert session.run("x").output == "1\n"


def test_code_that_swallows_the_interrupt_is_killed_and_the_session_restarts(pool):
    with pool.session() as session:
        session.run("x = 1")
        code = "import time\nwhile True:\n    try:\n        time.sleep(1)\n    except BaseException:\n        pass"
        result = session.run(code, timeout_s=0.3)
        assert (result.status, result.restarted) == (ExecStatus.TIMEOUT, True)
        assert "NameError" in session.run("x").output


def test_a_forged_reply_does_not_desynchronise_the_session(pool):
    forge = (
        "import json, os, struct\n"
        "fd = next(fd for fd in map(int, os.listdir('/proc/self/fd'))"
        " if os.readlink(f'/proc/self/fd/{fd}').startswith('socket:'))\n"
        "for guess in ('0', '1', 'a' * 16, None):\n"
        "    body = json.dumps({'id': guess, 'status': 'ok', 'detail': ''}).encode()\n"
        "    os.write(fd, struct.pack('>I', len(body)) + body)\n"
        "print('forger ran')"
    )
    with pool.session() as session:
        session.run("1")
        session.run(forge)  # its own reply or a forged one; either way what follows must line up
        assert session.run("print('next')").output == "next\n"
        assert session.run("print('and next')").output == "and next\n"


def test_many_threads_share_a_pool(pool):
    errors = []

    def worker(n: int) -> None:
        try:
            with pool.session() as session:
                for step in range(5):
                    session.run(f"v = {n} * 100 + {step}")
                    assert session.run("v").output == f"{n * 100 + step}\n"
        except BaseException as e:  # collected and re-raised in the main thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors


def test_at_most_workers_calls_run_at_once():
    with SandboxPool(workers=2, spares=4) as pool:
        sessions = [pool.session() for _ in range(4)]
        for session in sessions:
            session.run("import time")
        start = time.monotonic()
        threads = [threading.Thread(target=s.run, args=("time.sleep(0.3)",)) for s in sessions]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert 0.6 <= time.monotonic() - start < 2.0  # 4 sleeps of 0.3 s, two at a time
        for session in sessions:
            session.close()


def test_a_dead_fork_server_is_replaced(pool):
    with pool.session() as session:
        session.run("x = 1")
        root = Path(pool._fork_server.root)
        os.kill(pool._fork_server.process.pid, signal.SIGKILL)
        pool._fork_server.process.wait()
        deadline = time.monotonic() + 5
        while (result := session.run("x")).status is ExecStatus.OK and time.monotonic() < deadline:
            time.sleep(0.01)  # the session dies with its guard, which dies with the fork server
        assert result.restarted  # it died during the call, or before it and the call ran in a fresh interpreter
        assert result.status is ExecStatus.CRASHED or "NameError" in result.output
        assert session.run("x = 2\nx").output == "2\n"
    assert pool.run("print('ok')").output == "ok\n"
    assert not root.exists()  # the dead server's directory was removed when its successor started


def _run_in_child(queue) -> None:
    pool = default_pool()
    queue.put(pool.run("print(2 + 2)").output)


def test_default_pool_works_in_forked_children():
    parent_pool = default_pool()
    assert parent_pool.run("print(1)").output == "1\n"
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    children = [context.Process(target=_run_in_child, args=(queue,)) for _ in range(2)]
    for child in children:
        child.start()
    results = [queue.get(timeout=60) for _ in children]
    for child in children:
        child.join(timeout=60)
    assert results == ["4\n", "4\n"]
    assert default_pool() is parent_pool and parent_pool.run("print(3)").output == "3\n"


def test_a_pool_refuses_use_after_fork_or_close():
    pool = SandboxPool()
    pool.run("1")
    context = multiprocessing.get_context("fork")
    queue = context.Queue()

    def child() -> None:
        try:
            pool.run("1")
            queue.put("ran")
        except SandboxError as e:
            queue.put(str(e))

    process = context.Process(target=child)
    process.start()
    assert "cannot be used across fork()" in queue.get(timeout=60)
    process.join(timeout=60)
    pool.close()
    with pytest.raises(SandboxError, match="closed"):
        pool.run("1")


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [({"timeout_s": 0}, "timeout_s must be > 0"), ({"output_bytes": 10}, ">= 64"), ({"disk_bytes": 10}, "1 MiB")],
)
def test_limits_are_validated(kwargs, fragment):
    with pytest.raises(ValueError, match=fragment):
        SandboxLimits(**kwargs)


def test_pool_arguments_are_validated():
    with pytest.raises(ValueError, match="isolation must be"):
        SandboxPool(isolation="docker")
    with pytest.raises(ValueError, match="workers and max_sessions must be >= 1"):
        SandboxPool(workers=0)


def test_sessions_whose_descriptors_are_numbered_past_1024_run_and_time_out(pool):
    """A process serving a thousand sessions holds descriptors numbered past 1,024, where ``select()`` refuses
    them: the pool waits on its sockets and pidfds with ``poll()``."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 2048:
        pytest.skip(f"needs 2,048 open files (hard limit {hard})")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 2048), hard))
    filler = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        with SandboxPool(SandboxLimits(timeout_s=0.5), workers=1, spares=0) as high:
            assert high.run("print(6 * 7)").output == "42\n"
            slept = high.run("import time\ntime.sleep(5)")
            assert slept.status is ExecStatus.TIMEOUT, slept
    finally:
        for fd in filler:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
