"""``answer``: the final-answer tool, for agent formats that end an episode with a call."""

from __future__ import annotations

from agentfly_envs.tools.base import register_tool


@register_tool(ends_episode=True)
def answer(answer: str) -> str:
    """Submit the final answer to the task. This ends the episode; call it once, last.

    Args:
        answer: The final answer, for example "18".

    Returns:
        The submitted answer.
    """
    return answer
