"""Full transcripts of golden and sloppy replays, reduced to one digest, to show that a change to the envs left every
observation, reward and info of an episode as it was.

A transcript is every ``reset`` and ``step`` return value of a replay, serialised as sorted-key JSON, with the
random parts made stable: call ids become ``call_0``, ``call_1``, ... in order of appearance, and
``info["tool_latency_s"]`` (wall-clock timings) is left out.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Sequence
from typing import Any

import gymnasium as gym

_CALL_ID = re.compile(r"call_[0-9a-f]{12}")

SLOPPY_TURNS = (
    '<tool_call>{"name": "calculator", "arguments": {"expression": "3*(4+"}}</tool_call>',
    '<tool_call>{"name": "calculator", "arguments": {"expression": 1+}}</tool_call>',
    '<tool_call>{"name": "calc", "arguments": {"expression": "2+2"}}</tool_call>',
    '<tool_call>{"name": "calculator", "arguments": {"expr": "2+2"}}</tool_call>',
    '<tool_call>{"name": "calculator", "arguments": {"expression": 12}}</tool_call>',
    '<tool_call>{"name": "calculator", "arguments": {"expression": ["1"]}}</tool_call>',
    '<tool_call>{"name": "calculator", "arguments": {"expression": "1/0"}}</tool_call>',
    '<tool_call>{"name": "calculator", "arguments": {"expression": "2^10 + 1,000"}}</tool_call>',
    '<tool_call>{"name": "calculator", "arguments": {"expression": "9**9**9"}}</tool_call>',
    '<tool_call>["calculator"]</tool_call>',
    "<tool_call>{}</tool_call> and <tool_call>",
    {"role": "assistant", "content": "", "tool_calls": [{"id": "x1", "function": {"name": "calculator"}}]},
    "Thinking out loud: the answer is 17.",
    "#### 1,000.50",
    "x" * 40_000,
)
"""Mistakes a model makes, one of which goes into each sloppy episode."""


def sloppy_plan(plan: Sequence[Any], index: int) -> list[Any]:
    """Golden plan ``index`` with mistakes: one of :data:`SLOPPY_TURNS` before the plan, and on every other episode
    the golden turns repeated with no answer, so the episode runs out of turns (truncated)."""
    mistake = SLOPPY_TURNS[index % len(SLOPPY_TURNS)]
    if index % 2:
        return [mistake, *plan[:-1] * 8]
    return [mistake, *plan]


def replay(env_id: str, plans: Sequence[Sequence[Any]], **kwargs: Any) -> Iterator[Any]:
    """Every ``reset`` return value and then ``step`` return value of the plans' episodes, in order; each plan
    stops where its episode ends."""
    env = gym.make(env_id, **kwargs)
    try:
        for index, actions in enumerate(plans):
            yield env.reset(options={"index": index})
            for action in actions:
                result = env.step(action)
                yield result
                if result[2] or result[3]:
                    break
    finally:
        env.close()


def transcript_digest(env_id: str, plans: Sequence[Sequence[Any]], **kwargs: Any) -> str:
    """SHA-256 of the golden replay of ``plans`` then the sloppy one (:func:`sloppy_plan`), in hex."""
    ids: dict[str, str] = {}
    digest = hashlib.sha256()
    sloppy = [sloppy_plan(plan, index) for index, plan in enumerate(plans)]
    for returned in (*replay(env_id, plans, **kwargs), *replay(env_id, sloppy, **kwargs)):
        info = returned[-1]
        text = json.dumps(
            [*returned[:-1], {key: value for key, value in info.items() if key != "tool_latency_s"}],
            sort_keys=True,
            default=repr,
        )
        digest.update(_CALL_ID.sub(lambda m: ids.setdefault(m.group(0), f"call_{len(ids)}"), text).encode())
    return digest.hexdigest()
