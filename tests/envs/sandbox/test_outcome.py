"""How a call ended: a reply and its output judged into an Execution (hand-picked cases, no sandbox needed)."""

from __future__ import annotations

import os

import pytest

from agentfly_envs.sandbox import ExecStatus
from agentfly_envs.sandbox.outcome import Output, classify, read_output
from agentfly_envs.sandbox.protocol import Reply

QUIET = Output("", False, False, 0)


def judge(reply, detail="", output=QUIET, file_bytes=100, timeout_s=2.0):
    return classify(reply, detail, output, file_bytes=file_bytes, timeout_s=timeout_s, seconds=0.5)


@pytest.mark.parametrize(
    ("reply", "status", "restarted"),
    [
        (Reply.OK, ExecStatus.OK, False),
        (Reply.ERROR, ExecStatus.ERROR, False),
        (Reply.TIMEOUT, ExecStatus.TIMEOUT, False),
        (Reply.CPU, ExecStatus.CPU_LIMIT, False),
        (Reply.KILLED, ExecStatus.TIMEOUT, True),
        (Reply.CPU_KILLED, ExecStatus.CPU_LIMIT, True),
        (Reply.CRASHED, ExecStatus.CRASHED, True),
    ],
)
def test_each_reply_has_its_status_and_only_the_pools_words_restart(reply, status, restarted):
    execution = judge(reply, "why")
    assert (execution.status, execution.restarted, execution.seconds) == (status, restarted, 0.5)


def test_exit_zero_is_ok_and_any_other_exit_is_exit():
    assert (judge(Reply.EXIT, "0").status, judge(Reply.EXIT, "0").detail) == (ExecStatus.OK, "0")
    assert (judge(Reply.EXIT, "2").status, judge(Reply.EXIT, "2").detail) == (ExecStatus.EXIT, "2")


def test_a_timeout_says_the_limit_it_ran_past():
    assert judge(Reply.TIMEOUT, "ignored", timeout_s=0.25).detail == "it ran longer than 0.25 s"
    assert judge(Reply.KILLED, "it did not stop at its time limit").detail == "it did not stop at its time limit"


def test_output_at_the_file_size_limit_overrides_ok_and_error_only():
    full = Output("x" * 10, True, False, 100)
    for reply in (Reply.OK, Reply.ERROR, Reply.EXIT):
        execution = judge(reply, "0", output=full)
        assert (execution.status, execution.detail) == (ExecStatus.OUTPUT_LIMIT, "the output reached 100 bytes")
    assert judge(Reply.CPU, output=full).status is ExecStatus.CPU_LIMIT
    assert judge(Reply.OK, output=Output("x", False, False, 99)).status is ExecStatus.OK


def test_the_output_is_passed_through():
    execution = judge(Reply.OK, output=Output("héllo\n", True, True, 7))
    assert (execution.output, execution.truncated, execution.invalid_utf8) == ("héllo\n", True, True)


def test_read_output_keeps_head_and_tail_around_a_marker():
    fd = os.memfd_create("test")
    try:
        os.write(fd, b"a" * 150 + b"b" * 50)
        output = read_output(fd, 100)
        assert output == Output("a" * 75 + "\n[... 100 bytes of output cut ...]\n" + "b" * 25, True, False, 200)
        assert read_output(fd, 200) == Output("a" * 150 + "b" * 50, False, False, 200)
    finally:
        os.close(fd)
