"""Exceptions raised for developer and configuration mistakes.

Agent mistakes (a malformed tool call, an unknown tool, bad arguments) never raise: the environment
turns them into an observation the model can act on and counts them in ``info["error_counts"]``.
Everything here is for the person wiring the environment up, and each message says how to fix it.
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


class EnvContractError(AgentflyError, TypeError):
    """An env lacks a member of the env contract (:class:`agentfly_envs.contract.TrainableEnv`): what the trainer
    needs from it beyond Gymnasium's API."""
