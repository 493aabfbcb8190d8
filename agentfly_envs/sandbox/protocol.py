"""Messages between the pool and its worker processes (standard library only; both sides import it).

Session sockets are byte streams: each message is a 4-byte big-endian length and that many bytes
of JSON. The control socket of the fork server is a ``SOCK_SEQPACKET`` socket: one datagram per
message, with file descriptors attached. A message that breaks the framing raises
:class:`ProtocolError`; code in the sandbox can write to its socket, so the pool treats that as a
crashed session, never as data to trust.

:class:`Reply` is the one vocabulary of how a call ended: the session's interpreter writes it in its reply, the pool
reads it there and adds its own words where the session gave none.
"""

from __future__ import annotations

import enum
import errno
import json
import math
import os
import select
import socket
import struct
import time
from typing import Any

_HEADER = struct.Struct(">I")
MAX_MESSAGE_BYTES = 256 << 20
"""Largest message accepted, in bytes (a request carries the code to run)."""
MAX_REPLY_BYTES = 65_536
"""Largest reply of a session accepted, in bytes: a reply is an id, a status word and a summary line of at most 1,000
characters (the call's output goes through a file, not the socket), so anything larger is forged by the code."""
MAX_CONTROL_BYTES = 65_536
"""Largest control datagram, in bytes."""
_READ_BYTES = 65_536
"""Bytes asked of a session socket per read (more than a reply and a start-up message)."""


class ProtocolError(RuntimeError):
    """The peer closed the connection or sent something that is not a message."""


class Reply(str, enum.Enum):  # noqa: UP042  (not StrEnum: the sandbox's interpreter may predate Python 3.11)
    """How a call ended: the ``status`` of a session's reply, or the pool's verdict where the session gave none.

    Example:
        >>> Reply.parse("cpu"), Reply.parse("cpu").answered, Reply.parse("nonsense")
        (<Reply.CPU: 'cpu'>, True, <Reply.CRASHED: 'crashed'>)
    """

    # --- written by the session (interpreter.py) ---
    OK = "ok"
    """The code ran to its end."""
    ERROR = "error"
    """The code raised; the traceback is in the output, the summary in ``detail``."""
    EXIT = "exit"
    """The code called ``sys.exit``; ``detail`` is the exit status."""
    TIMEOUT = "timeout"
    """The code was interrupted at its wall-clock deadline; the session lives on."""
    CPU = "cpu"
    """The code was interrupted when it used up its CPU time; the session lives on."""
    # --- the pool's, where the session did not answer (call.py) ---
    KILLED = "killed"
    """The code did not stop at its deadline; its interpreter is killed."""
    CPU_KILLED = "cpu_killed"
    """The code used up its CPU time and did not stop; its interpreter is killed."""
    CRASHED = "crashed"
    """The interpreter died, or answered with a word not above."""

    @property
    def answered(self) -> bool:
        """A word a session writes: it answered and lives on (the pool's words: its interpreter is gone or must go)."""
        return self in _ANSWERS

    @classmethod
    def parse(cls, word: object) -> Reply:
        """The reply that ``word`` (a reply's ``status``) names; :attr:`CRASHED` for anything else."""
        try:
            return cls(word)
        except (ValueError, TypeError):
            return cls.CRASHED


_ANSWERS = frozenset({Reply.OK, Reply.ERROR, Reply.EXIT, Reply.TIMEOUT, Reply.CPU})


def encode(message: dict[str, Any]) -> bytes:
    """The JSON bytes of a message; lone surrogates in strings survive as JSON escapes."""
    return json.dumps(message, ensure_ascii=True).encode("ascii")


def decode(data: bytes) -> dict[str, Any]:
    """The message in ``data``; raises :class:`ProtocolError` unless it is a JSON object."""
    try:
        message = json.loads(data)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:  # RecursionError: nesting deeper than the stack
        raise ProtocolError(f"not a JSON message: {e}") from None
    if not isinstance(message, dict):
        raise ProtocolError(f"a message must be a JSON object, got {type(message).__name__}")
    return message


class MessageStream:
    """Length-prefixed messages over a stream socket (a session's). Reads take whatever has arrived in one system
    call and keep what is left for the next message, so messages sent together (a guard's and its session's, at
    start-up) cost one read.

    Args:
        sock: A blocking stream socket; the stream owns it from now on.
    """

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._unread = bytearray()

    def send(self, message: dict[str, Any]) -> None:
        """Writes one message."""
        data = encode(message)
        self.sock.sendall(_HEADER.pack(len(data)) + data)

    def receive(self, deadline: float | None = None, max_bytes: int = MAX_MESSAGE_BYTES) -> dict[str, Any]:
        """Reads one message.

        Args:
            deadline: ``time.monotonic()`` value after which to give up, or ``None`` to wait forever.
            max_bytes: Largest message accepted (its header is checked before the rest of it is read).

        Raises:
            TimeoutError: the deadline passed first.
            ProtocolError: the peer closed the socket or broke the framing, or announced more than ``max_bytes``.
        """
        self._fill(_HEADER.size, deadline)
        (size,) = _HEADER.unpack_from(self._unread)
        if size > max_bytes:
            raise ProtocolError(f"message of {size} bytes is over the {max_bytes}-byte limit")
        end = _HEADER.size + size
        self._fill(end, deadline)
        data = bytes(self._unread[_HEADER.size : end])
        del self._unread[:end]
        return decode(data)

    def wait(self, timeout_s: float) -> bool:
        """Whether a message's first bytes have arrived (or the peer closed the socket) within ``timeout_s``
        seconds."""
        return bool(self._unread) or wait_readable(self.sock, timeout_s)

    def close(self) -> None:
        """Closes the socket."""
        self.sock.close()

    def _fill(self, size: int, deadline: float | None) -> None:
        """Reads until ``size`` bytes are unread; with a ``deadline``, each read that would block waits in
        :func:`wait_readable` first (no timeout mode on the socket: switching it costs two system calls a read)."""
        flags = 0 if deadline is None else socket.MSG_DONTWAIT
        while len(self._unread) < size:
            try:
                chunk = self.sock.recv(min(max(size - len(self._unread), _READ_BYTES), 1 << 20), flags)
            except BlockingIOError:
                if not wait_readable(self.sock, deadline - time.monotonic()):
                    raise TimeoutError("no message before the deadline") from None
                continue
            except OSError as e:
                raise ProtocolError(f"connection failed: {e}") from None
            if not chunk:
                raise ProtocolError("the peer closed the connection")
            self._unread += chunk


def wait_readable(file: socket.socket | int, timeout_s: float) -> bool:
    """Whether ``file`` (a socket or a file descriptor, of any number: ``poll``, not ``select``) turns readable (or
    reaches its end) within ``timeout_s`` seconds; ``False`` at once for ``timeout_s <= 0`` unless it already is."""
    poller = select.poll()
    poller.register(file, select.POLLIN)
    return bool(poller.poll(max(0, math.ceil(timeout_s * 1000))))


def send_control(sock: socket.socket, message: dict[str, Any], fds: list[int] | tuple[int, ...] = ()) -> None:
    """Sends one control datagram with file descriptors attached."""
    socket.send_fds(sock, [encode(message)], list(fds))


def receive_control(sock: socket.socket, max_fds: int = 4) -> tuple[dict[str, Any], list[int]]:
    """Receives one control datagram and its file descriptors.

    Raises:
        ProtocolError: end of stream, or a failed connection.
        OSError: ``EMFILE``: the descriptors sent did not fit in this process (it is out of file descriptors; the
            kernel closed those it could not pass).
    """
    try:
        data, fds, flags, _ = socket.recv_fds(sock, MAX_CONTROL_BYTES, max_fds)
    except TimeoutError:
        raise
    except OSError as e:
        raise ProtocolError(f"control connection failed: {e}") from None
    if not data or flags & socket.MSG_CTRUNC:
        for fd in fds:
            os.close(fd)
        if data:
            raise OSError(errno.EMFILE, "the file descriptors sent did not fit in this process")
        raise ProtocolError("the peer closed the control socket")
    return decode(data), fds
