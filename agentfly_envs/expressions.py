"""Python-syntax expressions read from model output (the calculator's arithmetic, GUI actions), parsed safely from
the many threads a rollout steps its envs in."""

from __future__ import annotations

import ast
import threading

_PARSING = threading.Lock()


def parse_expression(text: str) -> ast.Expression:
    """``ast.parse(text, mode="eval")``, one parse at a time in this process, retried once on a ``RecursionError`` or
    ``SystemError``.

    CPython 3.11 keeps the recursion counter of its AST construction in per-interpreter state (CPython issues
    gh-95185, gh-106905), so a parse that runs while another thread is parsing can fail with ``SystemError: AST
    constructor recursion depth mismatch`` or a false ``RecursionError`` on a shallow expression. The lock keeps this
    package's parses apart, and the retry absorbs a clash with a parse elsewhere; input that is really too deep fails
    both times.

    Raises:
        SyntaxError: not an expression.
        RecursionError: nested too deeply to parse.
        SystemError: CPython's recursion-counter error, twice.

    Example:
        >>> type(parse_expression("1 + 2").body).__name__
        'BinOp'
    """
    with _PARSING:
        try:
            return ast.parse(text, mode="eval")
        except (RecursionError, SystemError):
            return ast.parse(text, mode="eval")
