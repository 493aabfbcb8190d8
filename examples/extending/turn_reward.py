"""A per-turn reward: ``fn(turn) -> float``, registered by name, paid by the env at each step."""

from __future__ import annotations

from agentfly_envs import TURN_REWARDS, TurnStep


@TURN_REWARDS.register("tool_call_bonus")
def tool_call_bonus(turn: TurnStep) -> float:
    """0.05 for a turn whose tool calls all ran without a mistake, else 0: a small push towards using the tools."""
    return 0.05 if turn.tool_calls and not turn.errors else 0.0
