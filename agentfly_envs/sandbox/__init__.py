"""A sandbox for model-written Python: warm worker processes, per-session namespaces and resource limits.

See :class:`SandboxPool` (the pool and its isolation), :class:`SandboxSession` (one interpreter with
notebook semantics) and :class:`SandboxLimits`. The README's sandbox section says what is and is not
guaranteed.
"""

from agentfly_envs.sandbox.default import default_pool
from agentfly_envs.sandbox.limits import SandboxLimits
from agentfly_envs.sandbox.pool import SandboxPool, SandboxSession
from agentfly_envs.sandbox.results import ExecStatus, Execution, Isolation, SandboxError, SandboxUnavailableError

__all__ = [
    "ExecStatus",
    "Execution",
    "Isolation",
    "SandboxError",
    "SandboxLimits",
    "SandboxPool",
    "SandboxSession",
    "SandboxUnavailableError",
    "default_pool",
]
