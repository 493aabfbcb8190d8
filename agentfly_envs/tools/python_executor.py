"""``python_executor``: model-written Python in the sandbox, with notebook semantics within an episode.

Each env gets its own copy of the tool (``Tool.for_env``), which holds one sandbox session per
episode: variables, functions and imports persist from call to call, and the next episode starts
from a fresh interpreter. With ``notebook=False`` every call runs in a fresh interpreter (that is
the ``python`` tool). Calls run in a :class:`~agentfly_envs.sandbox.SandboxPool` (the process's
default pool unless the env passes ``pool=``). Options, via the env's ``tool_options``::

    gym.make("agentfly/Math-Python", tool_options={"python_executor": {"notebook": False}})

Anything the code does comes back as text: its output and traceback, or an ``Error:`` (counted as a
``tool_error``) when the sandbox had to step in: a timeout, a crash, too much output, non-UTF-8 output.

A failure of the sandbox itself is not the agent's: a :class:`~agentfly_envs.sandbox.SandboxError` (the pool could not
start or reach a session, its fork server failed twice in a row, this process ran out of file descriptors, the
machine refuses the isolation asked for) is an :class:`~agentfly_envs.errors.InfrastructureError`, and the env ends
the episode unscored. An interpreter that dies while the code runs is the code's crash, whatever killed it: the
pool cannot tell the code's ``os._exit`` or segfault from a kill from outside (the OOM killer, a chaos test), and
counting such deaths as the infrastructure's would let code end a losing episode unscored by killing its own
interpreter. One that died between calls is replaced before the next call runs (the agent is told its variables
are gone); only a replacement that is gone too is the pool's failure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentfly_envs.sandbox import ExecStatus, Execution, SandboxPool, SandboxSession, default_pool
from agentfly_envs.tools.base import TOOLS, Tool, ToolError

NO_OUTPUT = "(no output)"
"""What a call that printed nothing returns (an empty observation reads as a lost message)."""


class PythonExecutor(Tool):
    """A Python tool backed by the sandbox.

    Args:
        name: The name the model calls.
        notebook: One interpreter per episode (state persists between calls); else a fresh one per call.
        pool: The sandbox pool to run in; ``None`` uses :func:`~agentfly_envs.sandbox.default_pool`.
        aliases: Other names calls may use.
    """

    def __init__(
        self,
        name: str = "python_executor",
        notebook: bool = True,
        pool: SandboxPool | None = None,
        aliases: Sequence[str] = ("python",),
    ) -> None:
        super().__init__(self.run_in_notebook if notebook else self.run_program, name=name, aliases=aliases)
        self.notebook = notebook
        self.pool = pool
        self._session: SandboxSession | None = None

    def for_env(self, notebook: bool | None = None, pool: SandboxPool | None = None) -> PythonExecutor:
        """A copy for one env, with its own session.

        Args:
            notebook: Override whether state persists between calls within an episode.
            pool: The sandbox pool to use instead of the default one (e.g. one with other limits).
        """
        notebook = self.notebook if notebook is None else notebook
        return PythonExecutor(self.name, notebook, pool or self.pool, self.aliases)

    def begin_episode(self, row: Mapping[str, Any]) -> None:
        """Drops the previous episode's interpreter; the next call starts a fresh one."""
        self.end_episode()

    def end_episode(self) -> None:
        """Kills the episode's interpreter and every process it started."""
        if self._session is not None:
            self._session.close()
            self._session = None

    def run_in_notebook(self, code: str) -> str:
        """Run Python code in a sandboxed interpreter and return what it printed.

        Variables, functions and imports persist between calls in this task, as in a notebook, and
        the value of a final expression is shown. Write files only in the working directory; there
        may be no network access. Long runs are stopped (after 10 seconds by default).

        Args:
            code: Python code to run.

        Returns:
            What the code printed (stdout and stderr, with any traceback), "(no output)", or a line starting
            with "Error:".
        """
        _check_code(code)
        if self._session is None:
            self._session = (self.pool or default_pool()).session()
        return describe(self._session.run(code), notebook=True)

    def run_program(self, code: str) -> str:
        """Run a Python program in a fresh interpreter and return what it printed.

        Each call starts from scratch: variables do not persist between calls. Use print() to show
        results. Runs are stopped after 10 seconds.

        Args:
            code: A complete Python program.

        Returns:
            The program's standard output and error, or a line starting with "Error:".
        """
        _check_code(code)
        return describe((self.pool or default_pool()).run(code), notebook=False)


def _check_code(code: str) -> None:
    if "\x00" in code:
        raise ToolError("code contains a NUL character")


def describe(execution: Execution, notebook: bool) -> str:
    """The tool's answer for one execution: the output (with a note when the interpreter had to be replaced
    after the call, e.g. because a thread it started kept running), or a :class:`ToolError` when the
    sandbox stepped in.

    Args:
        execution: The outcome of the call.
        notebook: Whether the caller keeps state between calls (a restart is then worth saying).

    Raises:
        ToolError: the code timed out, crashed, ran out of CPU time or output, or printed non-UTF-8 bytes.
    """
    output, status = execution.output, execution.status
    if status in (ExecStatus.OK, ExecStatus.ERROR) and not execution.invalid_utf8:
        if execution.restart_reason and notebook:
            separator = "\n" if output and not output.endswith("\n") else ""
            return (
                f"{output}{separator}Note: the interpreter was restarted ({execution.restart_reason}): variables "
                "and imports from earlier calls are gone"
            )
        return output or NO_OUTPUT
    if status is ExecStatus.EXIT:
        separator = "\n" if output and not output.endswith("\n") else ""
        return f"{output}{separator}Error: the program exited with status {execution.detail}"
    problem = {
        ExecStatus.TIMEOUT: f"the code was stopped: {execution.detail}",
        ExecStatus.CPU_LIMIT: "the code used up its CPU time and was stopped",
        ExecStatus.OUTPUT_LIMIT: f"the code was stopped: {execution.detail} (print less)",
        ExecStatus.CRASHED: f"the interpreter crashed or was killed: {execution.detail}",
    }.get(status, "the output is not valid UTF-8 (invalid bytes are shown as \ufffd)")
    if execution.restarted and notebook:
        problem += ". The interpreter was restarted: variables and imports from earlier calls are gone"
    raise ToolError(f"{problem}. Output:\n{output}" if output else problem)


TOOLS.add("python_executor", PythonExecutor())
