"""The wire vocabulary: every reply word the session's interpreter writes is one the pool reads back as itself."""

from __future__ import annotations

import os
import socket
import time

import pytest

from agentfly_envs.sandbox import protocol
from agentfly_envs.sandbox.protocol import Reply

SESSION_WORDS = {Reply.OK, Reply.ERROR, Reply.EXIT, Reply.TIMEOUT, Reply.CPU}


@pytest.mark.parametrize("reply", list(Reply))
def test_every_reply_survives_the_wire(reply):
    message = protocol.decode(protocol.encode({"status": reply.value}))
    assert message == {"status": reply.value}
    assert Reply.parse(message["status"]) is reply


def test_only_the_sessions_own_words_mean_it_answered():
    assert {reply for reply in Reply if reply.answered} == SESSION_WORDS


@pytest.mark.parametrize("forged", ["OK", "Reply.OK", "", None, 1, ["ok"], {"ok": 1}])
def test_anything_else_is_a_crash(forged):
    assert Reply.parse(forged) is Reply.CRASHED
    assert not Reply.parse(forged).answered


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("x = 1", Reply.OK),
        ("1 / 0", Reply.ERROR),
        ("import sys; sys.exit(3)", Reply.EXIT),
        ("import time\nwhile True: time.sleep(0.01)", Reply.TIMEOUT),
    ],
)
def test_the_interpreters_replies_parse_as_what_it_meant(code, expected):
    """Runs one cell in a forked child (the interpreter takes over its stdio and ``__main__``) and parses its reply."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover (child)
        try:
            from agentfly_envs.sandbox.interpreter import Interpreter

            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 1)
            os.dup2(null, 2)
            reply = Interpreter(sweep=False).run({"id": "a", "code": code, "timeout_s": 0.2, "cpu_s": 10})
            os.write(write_end, protocol.encode(reply))
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    reply = protocol.decode(data)
    assert reply["id"] == "a"
    assert Reply.parse(reply["status"]) is expected
    assert reply["detail"] == {Reply.EXIT: "3", Reply.ERROR: "ZeroDivisionError: division by zero"}.get(expected, "")


def test_a_stream_reads_messages_sent_together_and_split_apart():
    """Several messages in one read, and one message over several reads, come out whole and in order."""
    ours, theirs = socket.socketpair()
    stream = protocol.MessageStream(ours)
    peer = protocol.MessageStream(theirs)
    try:
        peer.send({"pid": 7})
        peer.send({"ready": True, "cpu_s": 0.25})
        assert stream.wait(1.0)
        deadline = time.monotonic() + 5
        assert stream.receive(deadline) == {"pid": 7}
        assert stream.wait(0)  # the second message is already read: no system call needed
        assert stream.receive(deadline) == {"ready": True, "cpu_s": 0.25}
        data = protocol.encode({"id": "x" * 70_000})
        framed = len(data).to_bytes(4, "big") + data
        theirs.sendall(framed[:3])  # not even a whole header yet
        with pytest.raises(TimeoutError):
            stream.receive(time.monotonic() + 0.05)
        theirs.sendall(framed[3:])
        assert stream.receive(deadline) == {"id": "x" * 70_000}
        assert not stream.wait(0)
        peer.close()
        with pytest.raises(protocol.ProtocolError, match="closed"):
            stream.receive(deadline)
    finally:
        stream.close()
