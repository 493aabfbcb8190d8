"""Exceptions raised for developer and configuration mistakes, and for failures of the infrastructure.

Agent mistakes (a malformed tool call, an unknown tool, bad arguments) never raise: the environment
turns them into an observation the model can act on and counts them in ``info["error_counts"]``.
Most of what is here is for the person wiring the environment up, and each message says how to fix it;
:class:`InfrastructureError` is how a tool or a reward says that what failed is not the agent's doing.
"""

from __future__ import annotations


class AgentflyError(Exception):
    """Base class of every exception agentfly raises on purpose."""


class UnknownNameError(AgentflyError, KeyError):
    """A name looked up in one of the registries (tools, parsers, rewards, tasks) is not there."""

    def __str__(self) -> str:  # KeyError would otherwise print the message with quotes around it
        return str(self.args[0]) if self.args else ""


class DuplicateRegistrationError(AgentflyError, ValueError):
    """Something was registered twice under one name."""


class ToolDefinitionError(AgentflyError, ValueError):
    """A function registered as a tool lacks what its JSON schema is built from: a Google-style docstring with an
    ``Args:`` entry per argument, or a type hint on every argument."""


class TaskFormatError(AgentflyError, ValueError):
    """A dataset row lacks a field the task needs, or a field has an unusable value."""


class DataUnavailableError(AgentflyError, RuntimeError):
    """The task data could not be loaded (no network for the Hub, a missing file, ...)."""


class EpisodeFinishedError(AgentflyError, RuntimeError):
    """``step()`` was called after the episode terminated or was truncated, without a ``reset()``."""


class WorldUnavailableError(AgentflyError, RuntimeError):
    """An interactive world cannot run here: its package or its runtime (Java) is missing, or it will not start."""


class InfrastructureError(AgentflyError, RuntimeError):
    """A failure that is not the agent's doing: a sandbox, a simulator, a service or a judge the env relies on
    failed (it died, hung, timed out or refused).

    A tool or a reward function raises it (or a subclass) for such a failure. The env does not show it to the
    agent as a mistake of its own: the step ends the episode, truncated and unscored, with
    ``info["infra_failure"]`` naming the failing part (see :class:`~agentfly_envs.core.ToolEnv`).
    """


class WorldStartError(WorldUnavailableError, InfrastructureError):
    """A world's simulator did not start this time (its JVM died or hung while starting): at a run's start it stops
    the run as an unavailable world does; at an episode's reset during training it is an infrastructure failure, and
    the episode is replayed or left out."""


class EnvContractError(AgentflyError, TypeError):
    """An env lacks a member of the env contract (:class:`agentfly_envs.contract.TrainableEnv`): what the trainer
    needs from it beyond Gymnasium's API."""


MAX_FAILURE_CHARS = 300
"""Longest one-line failure message (``info["infra_failure"]``), in characters; longer ones are cut."""


def one_line(error: BaseException) -> str:
    r"""The message of ``error`` on one line (every run of whitespace made one space), cut to
    :data:`MAX_FAILURE_CHARS` characters; its type's name when it has no message.

    Example:
        >>> one_line(InfrastructureError("the judge at http://judge:8000 did not answer\nTraceback ..."))
        'the judge at http://judge:8000 did not answer Traceback ...'
    """
    return " ".join(str(error).split())[:MAX_FAILURE_CHARS] or type(error).__name__
