"""The :class:`Tool` wrapper, the tool registry, and the one place where tool calls are executed.

A tool is a plain typed Python function with a Google-style docstring; the JSON schema the model
reads is derived from them by ``transformers.utils.get_json_schema``. A tool reports a failure the
model should see by raising :class:`ToolError`, and a failure that is not the agent's doing (a sandbox,
simulator or service that died or timed out) by raising :class:`~agentfly_envs.errors.InfrastructureError`;
anything else it raises is caught too, so a tool bug becomes an error observation instead of a crashed rollout.

A tool with state per episode (a sandbox session, a search index over the task's documents) is a
:class:`Tool` subclass: the env takes its own copy with :meth:`Tool.for_env` and tells it when
episodes begin and end.
"""

from __future__ import annotations

import enum
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from agentfly_envs.errors import InfrastructureError, ToolDefinitionError, one_line
from agentfly_envs.registry import Registry


class ToolError(Exception):
    """Raised by a tool for a failure the model caused and can fix (bad expression, timeout, ...)."""


class CallStatus(enum.StrEnum):
    """How one tool call ended; every value but ``OK`` and ``INFRA_ERROR`` is an agent mistake, counted in
    ``info["error_counts"]``."""

    OK = "ok"
    UNKNOWN_TOOL = "unknown_tool"
    BAD_ARGUMENTS = "bad_arguments"
    TOOL_ERROR = "tool_error"
    TOOL_EXCEPTION = "tool_exception"
    INFRA_ERROR = "infra_error"
    """The tool raised :class:`~agentfly_envs.errors.InfrastructureError`: not the agent's doing; the env ends the
    episode."""


@dataclass(frozen=True)
class ToolResult:
    """What one call returned.

    Attributes:
        content: Text shown to the model (already truncated to the env's limit by the caller).
        status: How the call ended.
        latency_s: Wall-clock time of the call, in seconds.
    """

    content: str
    status: CallStatus
    latency_s: float


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list, tuple),
    "object": (dict,),
}


_DOCSTRING_FIX = (
    "a tool needs a Google-style docstring: a line saying what it does, then `Args:` with one "
    "`name: description` line per argument"
)
_TYPE_HINT_FIX = "a tool needs a type hint on every argument (str, int, float, bool, list, dict, ...), e.g. `text: str`"


def _json_schema(function: Callable[..., Any], name: str) -> dict[str, Any]:
    """``transformers.utils.get_json_schema(function)``, its failures one line naming the tool and the fix.

    Raises:
        ToolDefinitionError: ``function`` has no docstring, no ``Args:`` entry or no type hint for an argument,
            or a type hint that cannot be resolved.
    """
    # lazy: transformers takes ~1 s to import
    from transformers.utils.chat_template_utils import (
        DocstringParsingException,
        TypeHintParsingException,
        get_json_schema,
    )

    try:
        return get_json_schema(function)
    except DocstringParsingException as error:
        raise _definition_error(function, name, error, _DOCSTRING_FIX) from None
    except (TypeHintParsingException, NameError) as error:  # NameError: a string annotation naming nothing
        raise _definition_error(function, name, error, _TYPE_HINT_FIX) from None


def _definition_error(function: Callable[..., Any], name: str, error: Exception, fix: str) -> ToolDefinitionError:
    """``tool 'name' (function, file:line): what is wrong; fix``."""
    code = getattr(function, "__code__", None)
    where = getattr(function, "__qualname__", repr(function))
    where += f" at {code.co_filename}:{code.co_firstlineno}" if code else ""
    problem = re.sub(r"^Cannot generate JSON schema for \S+ because ", "", str(error)).rstrip("!")
    return ToolDefinitionError(f"tool {name!r} ({where}): {problem}; {fix}")


class Tool:
    """A named, documented function that an agent can call.

    Args:
        function: The implementation; its signature and docstring define the schema.
        name: The name the model calls; defaults to ``function.__name__``.
        ends_episode: A successful call ends the episode; the tool's return value is the answer that is scored.
        aliases: Other names calls may use (e.g. ``python_executor`` answers the ``code`` format's ``python``
            calls); a tool of the env that has the name itself takes precedence.
    """

    def __init__(
        self,
        function: Callable[..., str],
        name: str | None = None,
        ends_episode: bool = False,
        aliases: Sequence[str] = (),
    ):
        self.function = function
        self.name = name or function.__name__
        self.ends_episode = ends_episode
        self.aliases = tuple(aliases)

    def for_env(self, **options: Any) -> Tool:
        """The tool as one env uses it, configured with ``options`` (the env's ``tool_options[name]``).

        A stateless tool is shared by every env and takes no options; a tool with per-episode state
        returns a new copy.

        Raises:
            TypeError: an option this tool does not take.
        """
        if options:
            raise TypeError(f"tool {self.name!r} takes no options, got {sorted(options)}")
        return self

    def begin_episode(self, row: Mapping[str, Any]) -> None:
        """Called by the env when an episode starts on the task ``row``; stateful tools reset here."""

    def end_episode(self) -> None:
        """Called by the env when an episode ends or the env closes; stateful tools free resources here."""

    def close(self) -> None:
        """Called by the env when it closes; tools that keep a process across episodes (a world) stop it here."""

    @cached_property
    def schema(self) -> dict[str, Any]:
        """The OpenAI-style function schema ``{"type": "function", "function": {...}}`` (computed once)."""
        schema = _json_schema(self.function, self.name)
        schema["function"]["name"] = self.name
        return schema

    def check_arguments(self, arguments: Mapping[str, Any]) -> str | None:
        """Returns a message describing what is wrong with ``arguments``, or ``None`` if they fit the schema."""
        properties = self._properties
        unknown = [key for key in arguments if key not in properties]
        missing = [key for key in self._required if key not in arguments]
        if unknown or missing:
            problems = [f"unknown argument(s) {unknown}"] if unknown else []
            problems += [f"missing required argument(s) {missing}"] if missing else []
            expected = ", ".join(f"{key}: {value.get('type', 'any')}" for key, value in properties.items())
            return f"{'; '.join(problems)}. {self.name} takes ({expected})."
        for key, value in arguments.items():
            json_type = properties[key].get("type")
            allowed = _JSON_TYPES.get(json_type or "")
            if allowed and (not isinstance(value, allowed) or (json_type != "boolean" and isinstance(value, bool))):
                return f"argument {key!r} must be a {json_type}, got {type(value).__name__} {value!r:.80}."
        return None

    def _coerce_numbers_to_strings(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Models often send ``{"answer": 18}`` for a string parameter; pass such numbers on as text."""
        properties = self._properties
        return {
            key: str(value)
            if isinstance(value, int | float)
            and not isinstance(value, bool)
            and properties.get(key, {}).get("type") == "string"
            else value
            for key, value in arguments.items()
        }

    @cached_property
    def _properties(self) -> dict[str, dict[str, Any]]:
        """The schema's ``parameters.properties`` (looked up once: every call checks its arguments against them)."""
        return self.schema["function"].get("parameters", {}).get("properties", {})

    @cached_property
    def _required(self) -> list[str]:
        """The schema's ``parameters.required``."""
        return self.schema["function"].get("parameters", {}).get("required", [])

    def __call__(self, arguments: Mapping[str, Any] | str) -> ToolResult:
        """Validates ``arguments`` and runs the tool; never raises.

        Args:
            arguments: Keyword arguments decoded from the model's call, or a bare string (ReAct's
                plain ``Action Input``), which is passed to the tool's only parameter.

        Returns:
            The result, with ``status`` saying whether the call succeeded; an
            :class:`~agentfly_envs.errors.InfrastructureError` is ``INFRA_ERROR`` with ``Error: <its message on one
            line>``.
        """
        start = time.perf_counter()
        if isinstance(arguments, str):
            if len(self._properties) != 1:
                message = f"Error: {self.name} takes {len(self._properties)} arguments; give them as a JSON object."
                return ToolResult(message, CallStatus.BAD_ARGUMENTS, 0.0)
            arguments = {next(iter(self._properties)): arguments}
        arguments = self._coerce_numbers_to_strings(arguments)
        problem = self.check_arguments(arguments)
        if problem is not None:
            return ToolResult(f"Error: bad arguments for {self.name}: {problem}", CallStatus.BAD_ARGUMENTS, 0.0)
        try:
            content, status = str(self.function(**arguments)), CallStatus.OK
        except InfrastructureError as e:
            content, status = f"Error: {one_line(e)}", CallStatus.INFRA_ERROR
        except ToolError as e:
            content, status = f"Error: {e}", CallStatus.TOOL_ERROR
        except Exception as e:  # a tool bug must not end the rollout; the model sees what happened
            content, status = f"Error: {self.name} failed: {type(e).__name__}: {e}", CallStatus.TOOL_EXCEPTION
        return ToolResult(content, status, time.perf_counter() - start)

    def __repr__(self) -> str:
        return f"Tool({self.name!r})"


TOOLS: Registry[Tool] = Registry(
    "tool",
    where="a module imported before the env is made (for python -m agentfly_train: a module in agentfly_envs/tools/ "
    "imported by its __init__.py)",
    how="`from agentfly_envs.tools import register_tool` and @register_tool() on a typed function whose "
    "Google-style docstring describes it and its arguments",
)


def register_tool(name: str | None = None, ends_episode: bool = False) -> Callable[[Callable], Callable]:
    """Decorator that registers a function as a :class:`Tool` and returns the function unchanged.

    Args:
        name: Registry and call name; defaults to the function's name.
        ends_episode: Whether a call to this tool is the agent's final answer.
    """

    def decorator(function: Callable[..., str]) -> Callable[..., str]:
        tool = Tool(function, name=name, ends_episode=ends_episode)
        TOOLS.add(tool.name, tool)
        return function

    return decorator


def get_tool(name: str) -> Tool:
    """Returns the registered tool called ``name``; raises ``UnknownNameError`` with close matches."""
    return TOOLS.get(name)
