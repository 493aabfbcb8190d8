"""``calculator``: a safe arithmetic evaluator (an AST walk over a whitelist, never ``eval``).

Bounds keep resource bombs cheap: the expression length, the nesting depth and the size of every
integer result are limited, and a power is checked *before* it is computed, so ``9**9**9**9`` or
``10**10**8`` fail in microseconds with an error message instead of hanging the rollout.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import NoReturn

from agentfly_envs.expressions import parse_expression
from agentfly_envs.tools.base import ToolError, register_tool

MAX_EXPRESSION_CHARS = 1000
"""Longest expression accepted, in characters."""
MAX_DEPTH = 64
"""Deepest nesting of operations accepted."""
MAX_INT_BITS = 4096
"""Largest integer any intermediate result may reach, in bits (about 1,233 decimal digits)."""
MAX_FACTORIAL = 300
"""Largest argument of ``factorial``."""

_BINARY: dict[type[ast.operator], Callable[[object, object], object]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[object], object]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_CONSTANTS = {"pi": math.pi, "e": math.e}


def _factorial(n: float) -> int:
    if n != int(n) or n < 0:
        raise ToolError(f"factorial needs a non-negative integer, got {n}")
    if n > MAX_FACTORIAL:
        raise ToolError(f"factorial argument {int(n)} is too large (limit {MAX_FACTORIAL})")
    return math.factorial(int(n))


def _round(x: float, digits: int = 0) -> float:
    if digits != int(digits) or abs(digits) > 15:
        raise ToolError("round's digits must be an integer between -15 and 15")
    return round(x, int(digits)) if digits else round(x)


def _log(x: float, base: float = math.e) -> float:
    return math.log(x, base)


_FUNCTIONS: dict[str, Callable[..., object]] = {
    "sqrt": math.sqrt,
    "exp": math.exp,
    "log": _log,
    "ln": math.log,
    "log10": math.log10,
    "log2": math.log2,
    "sin": math.sin,
    "cos": math.cos,
    "tan": math.tan,
    "abs": abs,
    "round": _round,
    "floor": math.floor,
    "ceil": math.ceil,
    "min": min,
    "max": max,
    "factorial": _factorial,
}


def _check_size(value: object) -> object:
    kind = type(value)
    if kind is int:  # the common cases first: a step costs a few of these checks
        if value.bit_length() > MAX_INT_BITS:
            raise ToolError(f"result is too large (more than {MAX_INT_BITS} bits)")
        return value
    if kind is float and math.isfinite(value):
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ToolError(f"result {value!r:.60} is not a real number")
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise ToolError(f"result is too large (more than {MAX_INT_BITS} bits)")
    if isinstance(value, float) and not math.isfinite(value):
        raise ToolError("result is not finite (overflow or undefined)")
    return value


def _check_power(base: object, exponent: object) -> None:
    """Rejects a power whose integer result would exceed ``MAX_INT_BITS``, before computing it."""
    integers = isinstance(base, int) and isinstance(exponent, int)
    if integers and exponent > 0 and abs(base) > 1 and exponent * math.log2(abs(base)) > MAX_INT_BITS:
        raise ToolError(f"result is too large (more than {MAX_INT_BITS} bits)")


def _check_product(left: object, right: object) -> None:
    if isinstance(left, int) and isinstance(right, int) and left.bit_length() + right.bit_length() > MAX_INT_BITS + 1:
        raise ToolError(f"result is too large (more than {MAX_INT_BITS} bits)")


def _evaluate(node: ast.AST, depth: int = 0) -> object:
    """The value of an allowed node; a node that is not allowed goes to :func:`_reject`. Dispatches on the node's
    exact type (what ``ast.parse`` builds), the cheapest test in CPython."""
    if depth > MAX_DEPTH:
        raise ToolError(f"expression is nested too deeply (limit {MAX_DEPTH})")
    kind = type(node)
    if kind is ast.BinOp:
        operator_type = type(node.op)
        binary = _BINARY.get(operator_type)
        if binary is not None:
            a, b = _evaluate(node.left, depth + 1), _evaluate(node.right, depth + 1)
            if operator_type is ast.Pow:
                _check_power(a, b)
            elif operator_type is ast.Mult:
                _check_product(a, b)
            return _check_size(binary(a, b))
    elif kind is ast.Constant:
        value = node.value
        if isinstance(value, int | float) and not isinstance(value, bool):
            return _check_size(value)
    elif kind is ast.Expression:
        return _evaluate(node.body, depth + 1)
    elif kind is ast.UnaryOp:
        unary = _UNARY.get(type(node.op))
        if unary is not None:
            return unary(_evaluate(node.operand, depth + 1))
    elif kind is ast.Name:
        if node.id in _CONSTANTS:
            return _CONSTANTS[node.id]
    elif kind is ast.Call:
        function = node.func
        if type(function) is ast.Name and function.id in _FUNCTIONS and not node.keywords:
            values = [_evaluate(arg, depth + 1) for arg in node.args]
            return _check_size(_FUNCTIONS[function.id](*values))
    _reject(node)


def _reject(node: ast.AST) -> NoReturn:
    """Raises the :class:`ToolError` that says why ``node`` is not allowed."""
    match node:
        case ast.Call(func=ast.Name(id=name)):
            raise ToolError(f"unknown function {name!r}; available: {', '.join(_FUNCTIONS)}")
        case ast.BinOp(op=ast.BitXor()):
            raise ToolError("'^' is not a power here; write a**b")
        case ast.Tuple():
            raise ToolError("commas are not allowed in numbers; write 1000 instead of 1,000")
        case ast.Name(id=name):
            raise ToolError(f"unknown name {name!r}; only numbers, operators, pi, e and functions are allowed")
        case ast.Constant(value=value):
            raise ToolError(f"{value!r:.40} is not a number")
    raise ToolError(f"{type(node).__name__} is not allowed; use numbers, + - * / // % ** and parentheses")


def evaluate(expression: str) -> int | float:
    """Evaluates an arithmetic expression safely.

    Args:
        expression: Text such as ``"(48 / 2) * 3"``; at most ``MAX_EXPRESSION_CHARS`` characters.

    Returns:
        The value, an ``int`` when every step stayed integral, else a ``float``.

    Raises:
        ToolError: The expression is malformed, uses something not allowed, or its result is too large.

    Example:
        >>> evaluate("2 * (3 + 4) ** 2")
        98
        >>> evaluate("sqrt(16) + 7 // 2")
        7.0
    """
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ToolError(f"expression has {len(expression)} characters; the limit is {MAX_EXPRESSION_CHARS}")
    text = expression.strip().replace("×", "*").replace("÷", "/")
    if not text:
        raise ToolError("expression is empty")
    if "=" in text:
        raise ToolError("give an expression to evaluate, not an equation (no '=')")
    try:
        tree = parse_expression(text)
    except (RecursionError, SystemError):
        raise ToolError(f"expression is nested too deeply to parse (limit {MAX_DEPTH})") from None
    except (SyntaxError, ValueError, MemoryError) as e:
        hint = "; '%' is modulo, write 50/100 for 50 percent" if "%" in text else ""
        raise ToolError(f"could not parse {text!r:.80}: {getattr(e, 'msg', e)}{hint}") from None
    try:
        return _evaluate(tree)
    except ZeroDivisionError:
        raise ToolError("division by zero") from None
    except OverflowError:
        raise ToolError("result is too large") from None
    except (ValueError, TypeError) as e:  # math domain errors, wrong arity of a function
        raise ToolError(str(e)) from None


def format_number(value: int | float) -> str:
    """Formats a result for the model: integral values without ``.0``, others with 12 significant digits.

    Example:
        >>> format_number(24.0), format_number(0.1 + 0.2), format_number(10**20)
        ('24', '0.3', '100000000000000000000')
    """
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    if isinstance(value, float):
        return f"{value:.12g}"
    return str(value)


@register_tool()
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression and return its value.

    Supports + - * / // % ** and parentheses, decimals, pi, e, and the functions sqrt, exp, log, ln,
    log10, log2, sin, cos, tan, abs, round, floor, ceil, min, max and factorial.

    Args:
        expression: The expression to evaluate, for example "(48 / 2) * 3". No units, no '=' signs.

    Returns:
        The value as text, or a line starting with "Error:" that says what to fix.
    """
    return format_number(evaluate(expression))
