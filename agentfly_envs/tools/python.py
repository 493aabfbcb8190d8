"""``python``: runs model-written code in a separate, resource-limited interpreter process.

The sandbox is a fresh ``python -I`` subprocess in an empty temporary directory, in its own
session, with limits on CPU time, memory, file size and wall-clock time; its output goes to a
size-limited file, so neither a runaway loop nor a flood of prints can stall or bloat the env.
This isolates the env process from the code; it is not a security boundary against hostile code
(use a container for that).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile

from agentfly_envs.tools.base import ToolError, register_tool

TIMEOUT_S = 10.0
"""Wall-clock limit of one run, in seconds."""
CPU_LIMIT_S = 10
"""CPU-time limit of one run, in seconds."""
MEMORY_LIMIT_BYTES = 1 << 30
"""Address-space limit of the child process, in bytes."""
OUTPUT_LIMIT_BYTES = 1 << 20
"""Largest output file the child may write, in bytes; past it the child is stopped."""


# The child sets its own limits before running the code (no preexec_fn: it is unsafe in threaded
# parents such as a trainer), then runs the code (read from a file: argv is limited to 128 KiB) as
# __main__, with its own filename in tracebacks.
_BOOTSTRAP = f"""
import resource, sys
for limit, value in (
    (resource.RLIMIT_CPU, {CPU_LIMIT_S}),
    (resource.RLIMIT_AS, {MEMORY_LIMIT_BYTES}),
    (resource.RLIMIT_FSIZE, {OUTPUT_LIMIT_BYTES}),
    (resource.RLIMIT_CORE, 0),
):
    resource.setrlimit(limit, (value, value))
with open(sys.argv[1], encoding="utf-8") as source:
    code = source.read()
del sys.argv[1]
exec(compile(code, "<agent code>", "exec"), {{"__name__": "__main__"}})
"""


@register_tool()
def python(code: str) -> str:
    """Run a Python program in a fresh interpreter and return what it printed.

    Each call starts from scratch: variables do not persist between calls. Use print() to show
    results. Runs are stopped after 10 seconds.

    Args:
        code: A complete Python program.

    Returns:
        The program's standard output and error, or a line starting with "Error:".
    """
    if "\x00" in code:
        raise ToolError("code contains a NUL character")
    with tempfile.TemporaryDirectory(prefix="agentfly-py-") as scratch:
        workdir, code_path, output_path = (os.path.join(scratch, name) for name in ("cwd", "code.py", "output"))
        os.mkdir(workdir)
        with open(code_path, "w", encoding="utf-8", errors="surrogatepass") as source:
            source.write(code)
        with open(output_path, "wb") as output:
            process = subprocess.Popen(
                [sys.executable, "-I", "-c", _BOOTSTRAP, code_path],
                cwd=workdir,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={"PATH": os.environ.get("PATH", ""), "PYTHONIOENCODING": "utf-8"},
            )
            try:
                returncode = process.wait(timeout=TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                raise ToolError(f"the program ran longer than {TIMEOUT_S:g} seconds and was stopped") from None
            finally:
                if process.poll() is None:
                    os.killpg(process.pid, signal.SIGKILL)
        with open(output_path, "rb") as output:
            data = output.read(OUTPUT_LIMIT_BYTES)
    text = data.decode("utf-8", errors="replace")
    if len(data) >= OUTPUT_LIMIT_BYTES:  # the child's writes past the limit failed (EFBIG)
        return text + f"\nError: output exceeded {OUTPUT_LIMIT_BYTES} bytes and the program was stopped"
    if returncode == -signal.SIGXCPU or returncode == -signal.SIGKILL:
        return text + f"\nError: the program used more than {CPU_LIMIT_S} s of CPU time and was stopped"
    if returncode != 0 and not text:
        return f"Error: the program exited with status {returncode} and printed nothing"
    return text
