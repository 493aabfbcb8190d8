import pytest

from agentfly_envs import TOOLS, Tool, ToolError, register_tool
from agentfly_envs.errors import AgentflyError, DuplicateRegistrationError, ToolDefinitionError
from agentfly_envs.tools import CallStatus, get_tool
from tests.helpers.tools import NAP


def _scale(value: float, factor: int = 2, label: str = "x") -> str:
    """Scale a value.

    Args:
        value: The value.
        factor: The factor.
        label: A label.
    """
    if factor < 0:
        raise ToolError("factor must be >= 0")
    if factor == 13:
        raise RuntimeError("unlucky")
    return f"{label}={value * factor}"


SCALE = Tool(_scale, name="scale")


def test_valid_call_runs():
    result = SCALE({"value": 1.5, "factor": 3})
    assert (result.content, result.status) == ("x=4.5", CallStatus.OK)


def test_latency_is_the_calls_wall_time():
    result = NAP({"seconds": 0.05})
    assert result.status == CallStatus.OK and 0.05 <= result.latency_s < 1


@pytest.mark.parametrize(
    ("arguments", "fragment"),
    [
        ({}, "missing required argument(s) ['value']. scale takes (value: number, factor: integer, label: string)"),
        ({"value": 1, "size": 2}, "unknown argument(s) ['size']"),
        ({"value": "one"}, "argument 'value' must be a number, got str"),
        ({"value": 1, "factor": 2.5}, "argument 'factor' must be a integer"),
        ({"value": True}, "must be a number, got bool"),
        ("1.5", "takes 3 arguments; give them as a JSON object"),
    ],
)
def test_bad_arguments_become_error_results(arguments, fragment):
    result = SCALE(arguments)
    assert result.status is CallStatus.BAD_ARGUMENTS
    assert fragment in result.content


def test_numbers_for_string_parameters_are_passed_as_text():
    assert SCALE({"value": 1, "label": 7}).content == "7=2"


def test_tool_error_and_tool_crash_are_caught():
    assert SCALE({"value": 1, "factor": -1}).status is CallStatus.TOOL_ERROR
    crashed = SCALE({"value": 1, "factor": 13})
    assert crashed.status is CallStatus.TOOL_EXCEPTION
    assert "RuntimeError: unlucky" in crashed.content


def test_bare_string_goes_to_the_only_parameter():
    assert get_tool("calculator")("6*7").content == "42"


def test_register_tool_adds_to_registry_and_rejects_duplicates():
    @register_tool(name="test_echo_tool")
    def echo(text: str) -> str:
        """Echo text.

        Args:
            text: Text to echo.
        """
        return text

    try:
        assert get_tool("test_echo_tool")({"text": "hi"}).content == "hi"
        with pytest.raises(DuplicateRegistrationError):
            register_tool(name="test_echo_tool")(echo)
    finally:
        TOOLS._entries.pop("test_echo_tool")


def test_answer_tool_ends_episode_and_returns_answer():
    tool = get_tool("answer")
    assert tool.ends_episode
    assert tool({"answer": 18}).content == "18"


def _undocumented(text: str) -> str:
    return text


def _untyped(text) -> str:
    """Echo text.

    Args:
        text: Text to echo.
    """
    return text


def _unlisted(text: str, times: int) -> str:
    """Repeat text.

    Args:
        text: Text to repeat.
    """
    return text * times


def _no_args_section(text: str) -> str:
    """Echo text."""
    return text


def _unresolved(text: str) -> str:
    """Echo text.

    Args:
        text: Text to echo.
    """
    return text


_unresolved.__annotations__["text"] = "Nowhere"  # as ``text: Nowhere`` under ``from __future__ import annotations``


@pytest.mark.parametrize(
    ("function", "problem", "fix"),
    [
        (_undocumented, "it has no docstring", "a tool needs a Google-style docstring"),
        (_untyped, "Argument text is missing a type hint", "a tool needs a type hint on every argument"),
        (_unlisted, "the docstring has no description for the argument 'times'", "then `Args:` with one"),
        (_no_args_section, "the docstring has no description for the argument 'text'", "then `Args:` with one"),
        (_unresolved, "name 'Nowhere' is not defined", "a tool needs a type hint on every argument"),
    ],
)
def test_a_function_the_schema_cannot_be_built_from_is_one_line_naming_it_and_the_fix(function, problem, fix):
    with pytest.raises(ToolDefinitionError) as error:
        _ = Tool(function, name="mine").schema
    message = str(error.value)
    line = function.__code__.co_firstlineno
    assert message.startswith(f"tool 'mine' ({function.__name__} at {__file__}:{line}): {problem}")
    assert fix in message and "\n" not in message
    assert isinstance(error.value, AgentflyError)
