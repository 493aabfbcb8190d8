import time

import pytest

from agentfly_envs.tools import CallStatus, ToolError, get_tool
from agentfly_envs.tools.calculator import MAX_EXPRESSION_CHARS, evaluate, format_number


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("16-3-4", "9"),
        ("48/2", "24"),
        ("7/2", "3.5"),
        ("7//2", "3"),
        ("-7 % 3", "2"),
        ("2**10", "1024"),
        ("2**-1", "0.5"),
        ("(1 + 2) * (3 + 4)", "21"),
        (".5 * 4", "2"),
        ("0.1 + 0.2", "0.3"),
        ("1200 * 0.04", "48"),
        ("sqrt(16) + abs(-3)", "7"),
        ("round(2.345, 2)", "2.35"),
        ("floor(2.7) + ceil(2.1)", "5"),
        ("max(3, 8, 5) - min(4, 2)", "6"),
        ("(" * 150 + "1" + ")" * 150, "1"),
        ("factorial(5)", "120"),
        ("log(100, 10)", "2"),
        ("log10(1000)", "3"),
        ("2 × 3 ÷ 4", "1.5"),
        ("10**20", "100000000000000000000"),
        ("pi", "3.14159265359"),
    ],
)
def test_calculator_values(expression, expected):
    assert get_tool("calculator")({"expression": expression}).content == expected


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("9**9**9**9", "too large"),
        ("10**10**8", "too large"),
        ("2**5000", "too large"),
        ("10**1000 * 10**1000 * 10**1000 * 10**1000 * 10**1000", "too large"),
        ("factorial(100000)", "too large"),
        ("exp(1000)", "too large"),
        ("(" * 300 + "1" + ")" * 300, "could not parse"),
        ("-" * 999 + "1", "nested too deeply"),
        ("1+" * 600 + "1", "too long"),
        ("1/0", "division by zero"),
        ("5 % 0", "division by zero"),
        ("sqrt(-1)", "math domain error"),
        ("(-8) ** (1/3)", "not a real number"),
        ("2 ^ 3", "write a**b"),
        ("1,000 + 1", "commas"),
        ("x + 1", "unknown name 'x'"),
        ("__import__('os')", "unknown function '__import__'"),
        ("(lambda: 1)()", "not allowed"),
        ("[1, 2]", "not allowed"),
        ("'a' * 3", "is not a number"),
        ("True + 1", "is not a number"),
        ("1 < 2", "not allowed"),
        ("x = 3", "not an equation"),
        ("", "empty"),
        ("50%", "percent"),
        ("1e308 * 10", "not finite"),
        ("\x00", "could not parse"),
    ],
)
def test_calculator_rejects_with_message_fast(expression, message):
    if message == "too long":
        expression = expression[: MAX_EXPRESSION_CHARS + 1]
        message = f"limit is {MAX_EXPRESSION_CHARS}"
    start = time.perf_counter()
    result = get_tool("calculator")({"expression": expression})
    assert time.perf_counter() - start < 0.1, "a resource bomb must fail fast"
    assert result.status is CallStatus.TOOL_ERROR
    assert result.content.startswith("Error: ")
    assert message in result.content


def test_evaluate_keeps_integers_exact():
    assert evaluate("2**100 + 1") == 2**100 + 1
    with pytest.raises(ToolError):
        evaluate("1/0")


def test_format_number():
    assert format_number(24.0) == "24"
    assert format_number(-3) == "-3"
    assert format_number(1 / 3) == "0.333333333333"
    assert format_number(1e20) == "1e+20"


def test_schema_is_derived_from_signature_and_docstring():
    schema = get_tool("calculator").schema
    assert schema["type"] == "function"
    function = schema["function"]
    assert function["name"] == "calculator"
    assert function["parameters"]["required"] == ["expression"]
    assert function["parameters"]["properties"]["expression"]["type"] == "string"
    assert "(48 / 2) * 3" in function["parameters"]["properties"]["expression"]["description"]


def test_calls_from_many_threads_at_once_read_every_expression_as_they_would_alone():
    """A rollout steps its envs from threads: deeply nested and ordinary expressions parsed at the same time each
    get their own answer (CPython 3.11's parser shares a recursion counter between threads:
    :func:`agentfly_envs.expressions.parse_expression`)."""
    from concurrent.futures import ThreadPoolExecutor

    calculator = get_tool("calculator")
    expressions = ["-" * 999 + "1", "10**1000 * 10**1000 * 10**1000 * 10**1000 * 10**1000", "(2 + 3) * 4"] * 200
    alone = {expression: calculator({"expression": expression}).content for expression in set(expressions)}
    with ThreadPoolExecutor(8) as threads:
        together = list(threads.map(lambda expression: calculator({"expression": expression}).content, expressions))
    assert together == [alone[expression] for expression in expressions]
    assert alone["(2 + 3) * 4"] == "20" and "too large" in alone[expressions[1]]
