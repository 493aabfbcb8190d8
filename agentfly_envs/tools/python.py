"""``python``: runs a model-written program in a fresh sandboxed interpreter on every call.

It is :class:`~agentfly_envs.tools.python_executor.PythonExecutor` without notebook semantics: each
call takes a fresh session of the sandbox (see :mod:`agentfly_envs.sandbox` for the isolation and the
limits: 10 s wall clock and CPU time, 1 GiB of memory per process, 16 MiB of output) and discards it.
"""

from __future__ import annotations

from agentfly_envs.tools.base import TOOLS
from agentfly_envs.tools.python_executor import PythonExecutor

TOOLS.add("python", PythonExecutor(name="python", notebook=False, aliases=()))
