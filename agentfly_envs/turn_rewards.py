"""Per-turn rewards: what an env pays at each step on top of its outcome reward, in a registry keyed by name.

Every turn reward has one signature, ``fn(turn) -> float``: ``turn`` is a :class:`TurnStep`, what the assistant's
turn did (its tool calls, their errors, its output, whether it answered). The env (``ToolEnv(turn_reward=name)``,
``agent.turn_reward_name`` in training) adds the value to each step's reward, the last step's included, and
reports it in ``info["turn_reward"]``; the episode's return is the sum of its steps' rewards. A turn reward that
raises, or returns no finite number, pays 0 for that turn and the env reports why in ``info["turn_reward_error"]``.

Example:
    >>> step = TurnStep(turn=2, tool_calls=[], errors=1, output="Error: unknown tool 'calc'", answered=False)
    >>> get_turn_reward("tool_error_penalty")(step)
    -0.1
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentfly_envs.registry import Registry
from agentfly_envs.rewards import MAX_REWARD_ERROR_CHARS


@dataclass(frozen=True)
class TurnStep:
    """One assistant turn as a turn reward sees it.

    Attributes:
        turn: The turn's number in its episode, from 1.
        tool_calls: The calls the env parsed from it (OpenAI-style dicts, as ``info["tool_calls"]``).
        errors: The agent mistakes it made (the increase of ``info["error_counts"]`` over the turn: parse errors,
            unknown tools, bad arguments, failed calls, too many calls, a turn too long).
        output: The text the env answered with (the tool outputs and error observations; ``""`` after an answer).
        answered: Whether the turn was the final answer (the env then scores it with its outcome reward too).
    """

    turn: int
    tool_calls: list[dict[str, Any]]
    errors: int
    output: str
    answered: bool


TurnReward = Callable[[TurnStep], float]
TURN_REWARDS: Registry[TurnReward] = Registry("turn reward", where="agentfly_envs/turn_rewards.py")
"""Turn reward name (``ToolEnv(turn_reward=...)``, ``agent.turn_reward_name``) -> function."""


def get_turn_reward(name: str) -> TurnReward:
    """The registered turn reward ``name``; raises ``UnknownNameError`` with close matches."""
    return TURN_REWARDS.get(name)


def checked_turn_reward(name: str, fn: TurnReward, turn: TurnStep) -> tuple[float, str | None]:
    """The turn reward ``name`` of ``turn``, its failures turned into a 0 and a reason.

    Returns:
        ``(value, None)``; or, when ``fn`` raised or returned something that is not a finite number, ``(0.0, reason)``,
        the reason one line of at most :data:`~agentfly_envs.rewards.MAX_REWARD_ERROR_CHARS` characters.

    Example:
        >>> checked_turn_reward("broken", lambda turn: 1 / 0, TurnStep(1, [], 0, "", True))
        (0.0, "turn reward 'broken' raised ZeroDivisionError: division by zero")
        >>> checked_turn_reward("text", lambda turn: "1", TurnStep(1, [], 0, "", True))
        (0.0, "turn reward 'text' returned str '1', not a finite number")
    """
    try:
        value = fn(turn)
    except Exception as error:  # a user's function: any failure pays 0 and is reported, never crashes step()
        reason = f"raised {type(error).__name__}: {error}"
    else:
        if isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value):
            return float(value), None
        reason = f"returned {type(value).__name__} {value!r:.80}, not a finite number"
    return 0.0, " ".join(f"turn reward {name!r} {reason}".split())[:MAX_REWARD_ERROR_CHARS]


@TURN_REWARDS.register("tool_error_penalty")
def tool_error_penalty(turn: TurnStep) -> float:
    """−0.1 per agent mistake the turn made (a malformed or unknown call, bad arguments, a failed call...).

    Example:
        >>> tool_error_penalty(TurnStep(turn=1, tool_calls=[], errors=2, output="", answered=False))
        -0.2
    """
    return -0.1 * turn.errors if turn.errors else 0.0
