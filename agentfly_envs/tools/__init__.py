"""Tools agents can call: each module registers its functions in :data:`TOOLS`.

Built in: ``calculator`` (safe arithmetic), ``python`` (a program in a fresh sandboxed interpreter),
``python_executor`` (sandboxed Python with notebook semantics per episode), ``search`` (a retriever),
``answer`` (submits the final answer and ends the episode), ``act`` (a command to an interactive world) and
``click``, ``type``, ``press``, ``scroll`` (a web page's).
"""

from agentfly_envs.tools import act, answer, calculator, python, python_executor, search, web  # noqa: F401  (registers)
from agentfly_envs.tools.base import TOOLS, CallStatus, Tool, ToolError, ToolResult, get_tool, register_tool

__all__ = ["TOOLS", "CallStatus", "Tool", "ToolError", "ToolResult", "get_tool", "register_tool"]
