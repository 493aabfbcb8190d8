"""Runs code cells inside a sandbox session, notebook style (standard library only).

One :class:`Interpreter` lives in each session process. It runs each cell in one ``__main__``
namespace, so variables and imports persist from call to call; with ``echo``, the value of a cell's
last expression is printed, as in a notebook. A cell is stopped at its wall-clock deadline
(``SIGALRM``) or CPU budget (``SIGXCPU``) by an exception that ordinary ``except Exception`` does not
catch, so the session and its state survive; code that does not stop (it can ignore both signals and
raise its own soft CPU limit) is killed by the pool, which watches the wall clock and the CPU time.
"""

from __future__ import annotations

import ast
import contextlib
import io
import linecache
import math
import os
import resource
import signal
import sys
import time
import traceback
import types
from typing import Any

from agentfly_envs.sandbox import protocol
from agentfly_envs.sandbox.protocol import Reply


class CellTimeout(BaseException):
    """Raised in the running cell when its wall-clock time is up."""


class CpuTimeExceeded(BaseException):
    """Raised in the running cell when it has used its CPU time."""


def _raise_timeout(signum: int, frame: types.FrameType | None) -> None:
    raise CellTimeout("the code ran past its time limit")


def _raise_cpu(signum: int, frame: types.FrameType | None) -> None:
    raise CpuTimeExceeded("the code used up its CPU time")


class Interpreter:
    """The session's code runner.

    Args:
        sweep: Kill every other process of the session after each call (only as pid 1 of a pid namespace).
    """

    def __init__(self, sweep: bool) -> None:
        self.sweep = sweep
        self.pid = os.getpid()
        self.cells = 0
        module = types.ModuleType("__main__")
        sys.modules["__main__"] = module
        self.namespace = module.__dict__
        self._stdout, self._stderr = os.dup(1), os.dup(2)
        self._restore_stdio()

    def serve(self, stream: protocol.MessageStream) -> None:
        """Answers run requests until the pool closes the socket."""
        while True:
            try:
                request = stream.receive()
            except protocol.ProtocolError:
                return
            stream.send(self.run(request))

    def run(self, request: dict[str, Any]) -> dict[str, Any]:
        """Runs one cell and returns the reply: ``{"id", "status", "detail"}`` (``id`` echoes the request's).

        ``status`` is a :class:`~.protocol.Reply` a session writes: ``ok``, ``error`` (the code raised; the
        traceback is in the output), ``exit`` (it called ``sys.exit``; ``detail`` is the code), ``timeout`` or ``cpu``.
        """
        self.cells += 1
        self._restore_stdio()
        status, detail = Reply.OK, ""
        try:
            try:
                self._arm(float(request["timeout_s"]), int(request["cpu_s"]))
                self._execute(str(request["code"]), bool(request.get("echo")))
            finally:
                self._disarm()
        except CellTimeout:
            status = Reply.TIMEOUT
        except CpuTimeExceeded:
            status = Reply.CPU
        except SystemExit as e:
            status, detail = Reply.EXIT, self._exit_code(e.code)
        except BaseException as e:
            status, detail = Reply.ERROR, self._report(e)
        if os.getpid() != self.pid:  # a process the cell forked must never answer for the session
            os._exit(0)
        self._flush()
        if self.sweep:
            _kill_other_processes()
        return {"id": request.get("id"), "status": status.value, "detail": detail}

    def _execute(self, code: str, echo: bool) -> None:
        filename = f"<cell {self.cells}>"
        tree = ast.parse(code, filename)  # raises SyntaxError (and ValueError for NUL bytes) into the cell
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        last = tree.body.pop() if echo and tree.body and isinstance(tree.body[-1], ast.Expr) else None
        exec(compile(tree, filename, "exec"), self.namespace)
        if last is not None:
            value = eval(compile(ast.Expression(last.value), filename, "eval"), self.namespace)
            if value is not None:
                print(repr(value))

    def _arm(self, timeout_s: float, cpu_s: int) -> None:
        signal.signal(signal.SIGALRM, _raise_timeout)
        signal.signal(signal.SIGXCPU, _raise_cpu)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        _, hard = resource.getrlimit(resource.RLIMIT_CPU)
        soft = math.ceil(usage.ru_utime + usage.ru_stime) + cpu_s
        resource.setrlimit(resource.RLIMIT_CPU, (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard))
        signal.setitimer(signal.ITIMER_REAL, timeout_s)

    def _disarm(self) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        _, hard = resource.getrlimit(resource.RLIMIT_CPU)
        resource.setrlimit(resource.RLIMIT_CPU, (hard, hard))
        signal.signal(signal.SIGALRM, signal.SIG_IGN)
        signal.signal(signal.SIGXCPU, signal.SIG_IGN)

    def _restore_stdio(self) -> None:
        """Points fds 1 and 2 and new ``sys.stdout``/``sys.stderr`` at the session's output (whatever the
        last cell did to them)."""
        os.dup2(self._stdout, 1)
        os.dup2(self._stderr, 2)
        sys.stdout = sys.__stdout__ = _unbuffered_text(1)
        sys.stderr = sys.__stderr__ = _unbuffered_text(2)

    @staticmethod
    def _report(error: BaseException) -> str:
        """Prints the traceback of ``error`` from the cell's first frame on, and returns its summary line."""
        tb = error.__traceback__
        while tb is not None and not tb.tb_frame.f_code.co_filename.startswith("<cell "):
            tb = tb.tb_next
        try:
            _write(2, "".join(traceback.format_exception(type(error), error, tb)))
            return f"{type(error).__name__}: {error}"[:1000]
        except BaseException:  # an exception whose __str__ fails; the code's own doing
            return f"{type(error).__name__} (unprintable)"

    @staticmethod
    def _exit_code(code: object) -> str:
        """The exit status ``sys.exit(code)`` means; a message is printed as Python would."""
        if code is None or isinstance(code, int):
            return str(code or 0)
        _write(2, f"{code}\n")
        return "1"

    @staticmethod
    def _flush() -> None:
        for stream in (sys.__stdout__, sys.__stderr__):
            with contextlib.suppress(OSError, ValueError):  # full output file (the pool reports it) or closed
                stream.flush()


def _unbuffered_text(fd: int) -> io.TextIOWrapper:
    """A text stream that writes straight to ``fd`` (as ``python -u``): nothing is held back when a write fails."""
    raw = io.FileIO(fd, "w", closefd=False)
    return io.TextIOWrapper(raw, encoding="utf-8", errors="backslashreplace", write_through=True)


def _write(fd: int, text: str) -> None:
    with contextlib.suppress(OSError):  # the output file is full; the pool reports that
        os.write(fd, text.encode("utf-8", "backslashreplace"))


def _kill_other_processes() -> None:
    """As pid 1 of the session's pid namespace: kills every other process in it and reaps them (within 1 s)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(-1, signal.SIGKILL)
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.001)
