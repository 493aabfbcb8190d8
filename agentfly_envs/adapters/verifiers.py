"""``agentfly/Verifiers``: a verifiers taskset (``verifiers.v1``) as a Gymnasium env, scored by its own rewards.

``gymnasium.make("agentfly/Verifiers", taskset="my_taskset")`` (``agent.env=verifiers:my_taskset`` in the trainer)
loads the taskset of the importable module ``my_taskset`` (a module exporting its ``vf.Taskset`` subclass in
``__all__``, as ``vf.load_taskset`` wants) and plays its tasks as single-turn episodes: the opening is the task's
``system_prompt`` and ``prompt``; the assistant's turn is its reply, which ends the episode; the reward is the
task's ``@vf.reward`` functions (and configured judges) scored on a verifiers ``Trace`` of the conversation
(``trace.reward``: their weighted sum), with each one in ``info["reward_components"]``.

The model is the agent here, so verifiers' harnesses (agent programs in a runtime) and tools are not used, and
rewards that need a runtime (a ``runtime`` parameter without a default) are skipped, as verifiers does when it
scores without one. Tasks are rows of the task's data (``TaskData`` fields), the first ``num_tasks`` of the
taskset in order.

Needs ``pip install "agentfly-rl[verifiers]"``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, ClassVar, SupportsFloat

import gymnasium as gym
from gymnasium.error import ResetNeeded

from agentfly_envs.errors import AgentflyError, EpisodeFinishedError, TaskFormatError
from agentfly_envs.parsers import Action, get_parser
from agentfly_envs.spaces import TextSpace

INSTALL_HINT = 'agentfly/Verifiers needs verifiers: pip install "agentfly-rl[verifiers]"'


class TaskRows:
    """The taskset's tasks as rows (their data's fields), by index."""

    required_fields: tuple[str, ...] = ()

    def __init__(self, tasks: list[Any]) -> None:
        self.tasks = tasks

    def __len__(self) -> int:
        return len(self.tasks)

    def row(self, index: int) -> dict[str, Any]:
        """Task ``index``'s data (fields left at their defaults omitted)."""
        return self.tasks[index].data.model_dump(mode="json", exclude_defaults=True)

    def validate(self, row: Mapping[str, Any]) -> None:
        """Checks that ``row`` is data of the taskset's tasks.

        Raises:
            TaskFormatError: it is not (the message names the field).
        """
        from pydantic import ValidationError

        try:
            type(self.tasks[0].data).model_validate(dict(row))
        except ValidationError as error:
            first = error.errors()[0]
            raise TaskFormatError(
                f"a row of this verifiers taskset: field {'.'.join(map(str, first['loc']))}: {first['msg']}"
            ) from None

    def golden(self, row: Mapping[str, Any]) -> None:
        """No task has a golden solution (verifiers tasks carry no reference turns)."""
        return None


class VerifiersEnv(gym.Env[str, Action]):
    """A verifiers taskset's tasks as single-turn episodes (see the module docstring).

    Args:
        taskset: The module of the taskset (or a built-in verifiers taskset id).
        taskset_options: Fields of the taskset's config (``vf.TasksetConfig`` or its own subclass).
        num_tasks: Tasks taken from the taskset, in order.
        max_turns: Turns per episode; only 1 is meaningful (the reply ends the episode).
        parser: The format of the replies (a registered parser; default ``tool_calls``): the tasks have no tools, so
            every reply is the final answer, and the rewards read its text.
        truncation_reward: Never given (an episode always ends scored); kept for the trainer.

    Raises:
        ImportError: verifiers is not installed, or the module cannot be imported (verifiers' message).
        ValueError: the taskset has no tasks.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}
    reward_fn: ClassVar[None] = None
    """The taskset's own rewards score the episodes (the env contract's ``reward_fn``)."""

    def __init__(
        self,
        taskset: str,
        taskset_options: Mapping[str, Any] | None = None,
        num_tasks: int = 1024,
        max_turns: int = 1,
        parser: str | None = None,
        truncation_reward: float = 0.0,
    ) -> None:
        try:
            import verifiers.v1 as vf
        except ImportError as error:
            raise ImportError(INSTALL_HINT) from error
        self._vf = vf
        config = vf.taskset_config_type(taskset)(id=taskset, **dict(taskset_options or {}))
        tasks = list(vf.load_taskset(config).take(num_tasks))
        if not tasks:
            raise ValueError(f"the verifiers taskset {taskset!r} has no tasks")
        self.taskset = taskset
        self.parser = get_parser(parser or "tool_calls")
        self.tasks = TaskRows(tasks)
        self.truncation_reward = float(truncation_reward)
        self.observation_space = TextSpace(1 << 20)
        self.action_space = TextSpace(1 << 20)
        self._task: Any = None
        self._messages: list[Any] = []
        self._done = True

    def reset(self, *, seed: int | None = None, options: Mapping[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Starts task ``options["index"]``, task ``options["task"]`` (a row), or one drawn with ``seed``."""
        super().reset(seed=seed)
        options = dict(options or {})
        if "task" in options:
            self.tasks.validate(options["task"])
            row, index = dict(options["task"]), None
        else:
            index = int(options.get("index", self.np_random.integers(len(self.tasks))))
            row = self.tasks.row(index)
        template = self.tasks.tasks[0]
        data = type(template.data).model_validate(row)
        self._task = type(template)(data, template.config)
        vf = self._vf
        self._messages = [vf.SystemMessage(content=data.system_prompt)] if data.system_prompt else []
        if isinstance(data.prompt, str):
            self._messages.append(vf.UserMessage(content=data.prompt))
        else:
            self._messages.extend(data.prompt or [])
        self._done = False
        messages = [message.model_dump(mode="json", exclude_none=True) for message in self._messages]
        user = messages[-1].get("content", "") if messages else ""
        return user if isinstance(user, str) else str(user), {
            "messages": messages,
            "tools": [],
            "task": row,
            "task_index": index,
        }

    def step(self, action: Action) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
        """Scores the reply with the task's rewards; the episode ends.

        Raises:
            ResetNeeded: no episode was started.
            EpisodeFinishedError: the episode has ended.
        """
        if self._task is None:
            raise ResetNeeded("call reset() before step()")
        if self._done:
            raise EpisodeFinishedError("the episode has ended; call reset() to start another")
        text = action if isinstance(action, str) else str(action.get("content") or "")
        trace = self._trace(text)
        asyncio.run(self._task.score(trace))
        self._done = True
        components = {name: reward.score for name, reward in trace.rewards.items() if reward is not None}
        info = {
            "messages": [],
            "tool_calls": [],
            "parse_errors": [],
            "error_counts": {},
            "turn": 1,
            "answer": text,
            "reward_components": components,
        }
        return "", float(trace.reward), True, False, info

    def golden_actions(self, row: Mapping[str, Any] | None = None) -> list[Action]:
        """Raises: verifiers tasks carry no reference turns (a warm start needs ``sft.enable=false``).

        Raises:
            AgentflyError: always.
        """
        raise AgentflyError(f"the verifiers taskset {self.taskset!r} has no golden solutions")

    def answer_action(self, answer: str, final: str | None = None) -> Action:
        """Raises: verifiers tasks have no golden answers to guess from, so no answer turn is ever asked for.

        Raises:
            AgentflyError: always.
        """
        raise AgentflyError(f"the verifiers taskset {self.taskset!r} has no golden answers to answer with")

    def _trace(self, reply: str) -> Any:
        """A verifiers trace of the conversation so far with ``reply`` as the model's turn."""
        from verifiers.v1.graph import MessageNode
        from verifiers.v1.trace import AgentInfo, TraceTask

        vf, task = self._vf, self._task
        messages = [*self._messages, vf.AssistantMessage(content=reply)]
        nodes = [
            MessageNode(parent=index - 1 if index else None, message=message, sampled=index == len(messages) - 1)
            for index, message in enumerate(messages)
        ]
        traced = TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash)
        return vf.Trace(task=traced, agent=AgentInfo(config=vf.AgentConfig()), nodes=nodes)
