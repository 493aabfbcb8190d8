"""A new tool: a typed function whose Google-style docstring is the schema the model reads."""

from __future__ import annotations

from agentfly_envs.tools import ToolError, register_tool

METRES = {"mm": 0.001, "cm": 0.01, "m": 1.0, "km": 1000.0, "in": 0.0254, "ft": 0.3048, "mi": 1609.344}
"""Each unit's length in metres."""


@register_tool()
def convert_length(value: float, unit: str, to: str) -> str:
    """Converts a length from one unit to another.

    Args:
        value: The length, in `unit`.
        unit: Its unit: mm, cm, m, km, in, ft or mi.
        to: The unit to convert it to (the same choices).
    """
    for name in (unit, to):
        if name not in METRES:
            raise ToolError(f"unknown unit {name!r}; use one of {', '.join(METRES)}")  # the model sees this
    return f"{value * METRES[unit] / METRES[to]:g}"
