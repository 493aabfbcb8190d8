"""Adapter from agentfly env ids to stock ``trl.GRPOTrainer(environment_factory=...)``.

TRL's contract: the factory returns an object whose public methods are the tools (their signatures
and docstrings become the schemas), whose ``reset(**row)`` starts an episode from a dataset row, and
whose optional ``get_reward()`` scores the finished rollout. TRL runs the tool-calling loop itself
and never shows the env the model's last, tool-free message, so the env's reward can only come
from a tool call: the adapter therefore always exposes the ``answer`` tool, and the prompt tells
the model to finish with it. A rollout that never calls ``answer`` gets the env's truncation reward.

Each tool call TRL makes is one ``env.step`` (a turn with one structured call), so the env's turn
budget counts calls here. This module imports neither TRL nor torch.

Example:
    >>> factory = make_trl_environment("agentfly/Arith-Calc", level="easy")
    >>> env = factory()
    >>> env.reset(question="Ava has 2 boxes with 3 pens in each box. How many pens?",
    ...           answer="<<2*3=6>>6\\n#### 6") is not None
    True
    >>> env.calculator(expression="2*3"), env.answer(answer="6"), env.get_reward()
    ('6', '6', 1.0)
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym

from agentfly_envs.core import ToolEnv
from agentfly_envs.tools import Tool

ANSWER_TOOL = "answer"


class TRLEnvironment:
    """Base class of the per-env classes :func:`make_trl_environment` builds; one instance = one rollout.

    Class attributes set by the factory: ``env_id`` and ``env_kwargs`` (passed to ``gymnasium.make``).
    """

    env_id: str = ""
    env_kwargs: Mapping[str, Any] = {}

    def __init__(self) -> None:
        self.env = gym.make(self.env_id, **self.env_kwargs)
        self._reward = 0.0
        self._done = True
        self.last_info: dict[str, Any] = {}

    @property
    def tool_env(self) -> ToolEnv:
        """The unwrapped :class:`ToolEnv`."""
        return self.env.unwrapped

    def reset(self, **row: Any) -> str | None:
        """Starts an episode from a dataset row (TRL passes every column of the row).

        The task is the row itself when it has the task's fields (e.g. ``question`` and ``answer``),
        row ``index`` when it has an ``index`` column, else a task drawn by the env. Returns
        ``None`` when the row has a ``prompt`` (the dataset already carries the conversation), else
        the instructions and question, which TRL appends to the user turn.
        """
        fields = {k: v for k, v in row.items() if k != "prompt"}
        if all(name in fields for name in self.tool_env.tasks.required_fields):
            options = {"task": fields}
        elif "index" in fields:
            options = {"index": int(fields["index"])}
        else:
            options = None
        observation, info = self.env.reset(options=options)
        self._reward, self._done, self.last_info = self.tool_env.truncation_reward, False, info
        if "prompt" in row:
            return None
        return f"{info['messages'][0]['content']}\n\n{observation}"

    def get_reward(self) -> float:
        """The env's reward for the rollout: the ``answer`` call's score, or the truncation reward."""
        return self._reward

    def _call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        if self._done:
            return "Error: the episode is over; no more tool calls are run."
        message = {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": name, "arguments": arguments}}],
        }
        observation, reward, terminated, truncated, info = self.env.step(message)
        self.last_info = info
        if terminated or truncated:
            self._reward, self._done = float(reward), True
        return observation


def _tool_method(tool: Tool) -> Callable[..., str]:
    """A method with the tool's name, signature, type hints and docstring that forwards to the env."""

    def method(self: TRLEnvironment, **arguments: Any) -> str:
        return self._call_tool(tool.name, arguments)

    receiver = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    signature = inspect.signature(tool.function)
    method.__signature__ = signature.replace(parameters=[receiver, *signature.parameters.values()])
    method.__annotations__ = typing.get_type_hints(tool.function)
    method.__doc__ = tool.function.__doc__
    method.__name__ = method.__qualname__ = tool.name
    return method


def make_trl_environment(env_id: str, **env_kwargs: Any) -> type[TRLEnvironment]:
    """Builds a TRL ``environment_factory`` for an agentfly env id.

    Args:
        env_id: A registered id, e.g. ``"agentfly/GSM8K-Calc"``.
        **env_kwargs: Overrides passed to ``gymnasium.make`` (``data_files=``, ``max_turns=``, ...).
            The ``answer`` tool is added to ``tools`` if missing (see the module docstring).

    Returns:
        A class; calling it (no arguments) makes one environment, as TRL's factory contract wants.
    """
    spec_kwargs = dict(gym.spec(env_id).kwargs)
    tools = tuple(env_kwargs.get("tools", spec_kwargs.get("tools", ())))
    if ANSWER_TOOL not in tools:
        tools = (*tools, ANSWER_TOOL)
    env_kwargs = {**env_kwargs, "tools": tools}
    probe = gym.make(env_id, **env_kwargs).unwrapped
    methods = {name: _tool_method(tool) for name, tool in probe.tools.items()}
    probe.close()
    class_name = "".join(ch for ch in env_id.split("/")[-1].title() if ch.isalnum()) + "TRLEnvironment"
    return type(class_name, (TRLEnvironment,), {"env_id": env_id, "env_kwargs": env_kwargs, **methods})


def trl_dataset_rows(env_id: str, num_rows: int | None = None, **env_kwargs: Any) -> list[dict[str, Any]]:
    """Rows for a TRL ``train_dataset``: each task's fields plus ``prompt`` (the env's opening messages).

    Args:
        env_id: A registered id.
        num_rows: How many tasks, from index 0 in file order; default all.
        **env_kwargs: The same overrides given to :func:`make_trl_environment` (so prompts match).

    Returns:
        Dicts with ``prompt`` (system + user messages) and the task row's fields; pass them to
        ``datasets.Dataset.from_list``.
    """
    factory = make_trl_environment(env_id, **env_kwargs)
    env = gym.make(env_id, **factory.env_kwargs)
    count = len(env.unwrapped.tasks) if num_rows is None else min(num_rows, len(env.unwrapped.tasks))
    rows = []
    for index in range(count):
        _, info = env.reset(options={"index": index})
        rows.append({**info["task"], "prompt": info["messages"]})
    env.close()
    return rows
