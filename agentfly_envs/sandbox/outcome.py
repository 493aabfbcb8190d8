"""How a call ended, as its caller sees it: the session's output file read back, and the :class:`~.protocol.Reply`
judged into an :class:`~.results.Execution`."""

from __future__ import annotations

import codecs
import os
from typing import NamedTuple

from agentfly_envs.sandbox.protocol import Reply
from agentfly_envs.sandbox.results import ExecStatus, Execution

_STATUS = {
    Reply.OK: ExecStatus.OK,
    Reply.ERROR: ExecStatus.ERROR,
    Reply.TIMEOUT: ExecStatus.TIMEOUT,
    Reply.KILLED: ExecStatus.TIMEOUT,
    Reply.CPU: ExecStatus.CPU_LIMIT,
    Reply.CPU_KILLED: ExecStatus.CPU_LIMIT,
}
"""The status each reply means; ``EXIT`` depends on the exit status, and anything else is ``CRASHED``."""


class Output(NamedTuple):
    """A call's output as read back from the session's output file."""

    text: str
    """The output, cut in the middle past the limit; invalid UTF-8 shown as U+FFFD."""
    truncated: bool
    """Part of the output was cut."""
    invalid_utf8: bool
    """The output held bytes that are not UTF-8."""
    size: int
    """The size of the whole output, in bytes."""


def classify(
    reply: Reply, detail: str, output: Output, *, file_bytes: int, timeout_s: float, seconds: float
) -> Execution:
    """The :class:`Execution` of a call that ended with ``reply``.

    Args:
        reply: The session's reply, or the pool's verdict where it gave none.
        detail: The reply's ``detail`` (exception summary, exit status, failure).
        output: The call's output.
        file_bytes: ``SandboxLimits.file_bytes``: output this large hit the file-size limit, in bytes.
        timeout_s: The call's wall-clock limit, in seconds.
        seconds: The call's wall-clock time, in seconds.

    Example:
        >>> quiet = Output("", False, False, 0)
        >>> classify(Reply.EXIT, "0", quiet, file_bytes=100, timeout_s=2.0, seconds=0.1).status
        <ExecStatus.OK: 'ok'>
        >>> late = classify(Reply.KILLED, "", quiet, file_bytes=100, timeout_s=2.0, seconds=3.0)
        >>> late.status, late.restarted
        (<ExecStatus.TIMEOUT: 'timeout'>, True)
    """
    status = _STATUS.get(reply, ExecStatus.CRASHED)
    if reply is Reply.EXIT:
        status = ExecStatus.OK if detail == "0" else ExecStatus.EXIT
    if output.size >= file_bytes and status in (ExecStatus.OK, ExecStatus.ERROR):
        status, detail = ExecStatus.OUTPUT_LIMIT, f"the output reached {file_bytes} bytes"
    if reply is Reply.TIMEOUT:
        detail = f"it ran longer than {timeout_s:g} s"
    restarted = not reply.answered  # killed at its deadline, or died
    return Execution(output.text, status, detail, restarted, output.truncated, output.invalid_utf8, seconds)


def read_output(fd: int, limit: int) -> Output:
    """Reads a session's output file: ``(text, truncated, invalid_utf8, size in bytes)``.

    Output longer than ``limit`` bytes keeps its first 3/4 and last 1/4 around a marker.
    """
    size = os.fstat(fd).st_size
    if size <= limit:
        text, invalid = _decode(os.pread(fd, size, 0), cut_before=False, cut_after=False)
        return Output(text, False, invalid, size)
    head_size = limit * 3 // 4
    head, head_invalid = _decode(os.pread(fd, head_size, 0), cut_before=False, cut_after=True)
    tail, tail_invalid = _decode(os.pread(fd, limit - head_size, size - (limit - head_size)), True, False)
    marker = f"\n[... {size - limit} bytes of output cut ...]\n"
    return Output(head + marker + tail, True, head_invalid or tail_invalid, size)


def _decode(data: bytes, cut_before: bool, cut_after: bool) -> tuple[str, bool]:
    """UTF-8 text of ``data`` and whether it held invalid bytes; a character split by a cut is dropped."""
    if cut_before:
        skip = 0
        while skip < min(3, len(data)) and data[skip] & 0xC0 == 0x80:
            skip += 1
        data = data[skip:]
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        return decoder.decode(data, final=not cut_after), False
    except UnicodeDecodeError:
        return data.decode("utf-8", errors="replace"), True
