"""``ToolEnv``: a Gymnasium environment in which an LLM agent solves a task by calling tools.

An env is a composition, each part picked by registry name: a task source (the dataset rows), a
tool set, an action parser and a reward function. Observations and actions are text. An interactive world
(:mod:`agentfly_envs.worlds`) is one more tool, ``act``: the task rows name its games.
"""

from __future__ import annotations

import copy
import inspect
import json
import marshal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.error import ResetNeeded

from agentfly_envs.demonstrations import Demonstrator
from agentfly_envs.errors import AgentflyError, EpisodeFinishedError, InfrastructureError, TaskFormatError, one_line
from agentfly_envs.parsers import Action, Parser, ParseResult, ToolCall, get_parser
from agentfly_envs.registry import close_match
from agentfly_envs.rewards import WORLD_REWARDS, RewardFunction, checked_score, get_reward
from agentfly_envs.spaces import TextSpace
from agentfly_envs.tasks import Row, TaskSource, get_task_source
from agentfly_envs.tools import CallStatus, Tool, get_tool
from agentfly_envs.tools.mcp import McpTool, is_mcp_entry, mcp_tools
from agentfly_envs.tools.world import OBSERVATION_MODES, WorldTool, image_part, message_text
from agentfly_envs.turn_rewards import TurnReward, TurnStep, checked_turn_reward, get_turn_reward

ERROR_KINDS = (
    "parse_error",
    "unknown_tool",
    "bad_arguments",
    "tool_error",
    "tool_exception",
    "too_many_calls",
    "action_too_long",
)
"""Keys of ``info["error_counts"]``: how often each kind of agent mistake happened this episode."""


def truncate_middle(text: str, limit: int) -> str:
    """Shortens ``text`` to at most ``limit`` characters, keeping 3/4 head and 1/4 tail (errors are often last).

    Example:
        >>> truncate_middle("abcdefghijklmnopqrstuvwxyz" * 10, 60)
        'abcdefghijklmnopqrstuv\\n[... 230 characters cut ...]\\nstuvwxyz'
    """
    if len(text) <= limit:
        return text
    marker = ""
    for _ in range(3):  # the marker's length depends on the number it shows
        marker = f"\n[... {len(text) - limit + len(marker)} characters cut ...]\n"
    keep = limit - len(marker)
    if keep <= 0:
        return text[:limit]
    head = keep * 3 // 4
    return text[:head] + marker + text[len(text) - (keep - head) :]


@dataclass
class _Episode:
    """Mutable state of the current episode (never handed out; copies go into ``info``)."""

    row: Row
    ground_truth: Any
    messages: list[dict[str, Any]]
    turn: int = 0
    done: bool = False
    score: float = 0.0
    """The world's score after the last step (with ``progress_reward``)."""
    paid: float = 0.0
    """The progress rewards paid so far (with ``progress_reward``)."""
    error_counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ERROR_KINDS, 0))


Observation = str | dict[str, Any]
"""What ``reset``/``step`` return: the text, or with ``obs="screenshot"`` ``{"text": str, "image": (H, W, 3)
uint8}``."""


class ToolEnv(gym.Env[Observation, Action]):
    """A multi-turn tool-use environment over a task source.

    Each episode poses one task. ``step(action)`` takes the assistant's turn (raw text, or an
    OpenAI-style message dict with ``tool_calls``), runs the tool calls it contains and returns
    their output as the observation. A turn with no tool call is the final answer: the episode
    terminates and the reward function scores it. A turn that calls a tool marked
    ``ends_episode`` (``answer``) is scored on that call's argument. When ``max_turns`` assistant
    turns have passed without an answer the episode is truncated with ``truncation_reward``.

    With a world tool (``act``; the web tools ``click``, ``type``, ``press``, ``scroll``; see
    :mod:`agentfly_envs.tools.world`) the env is an interactive world: the user turn holds the game's goal and first
    observation, each turn's observation ends with the world's view, the episode also terminates when the world
    says the task is solved or failed, and the reward scores the world's final state (its ``report()``) instead of
    a reference answer. A world with a screen can be seen as images: with ``obs="screenshot"`` every observation is
    ``{"text": str, "image": (H, W, 3) uint8 array}`` (a ``Dict`` space), and the user and tool messages of ``info``
    carry the screen as a ``{"type": "image", "image": PIL.Image.Image}`` content part before their text.

    Agent mistakes never raise: malformed calls, unknown tools, bad arguments, tool failures,
    oversized turns each become an ``Error: ...`` observation and a count in ``info["error_counts"]``.
    Failures of the infrastructure are not the agent's: a tool call that fails with
    :class:`~agentfly_envs.errors.InfrastructureError` (a sandbox that cannot start a session, a simulator that died
    or hung, a search service that is down; the turn's later calls do not run), or a reward function that raises it
    (a judge that is down), ends the episode unscored: ``truncated=True``, reward 0, not counted in
    ``error_counts``, and ``info["infra_failure"]`` names the failing part in one line (``tool python_executor: the
    sandbox could not start a session (...)``, ``reward my_judge: ...``).

    Args:
        task: Registered task-source name (``"gsm8k"``, ``"arithmetic"``) or a ``TaskSource``.
        tools: Names of registered tools the agent may call.
        tool_options: Per-tool options, ``{tool name: {option: value}}``, for tools that take them, e.g.
            ``{"python_executor": {"notebook": False}}`` or ``{"search": {"backend": "http", "url": ...}}``.
        parser: Registered parser name: ``"hermes"``, ``"react"``, ``"code"`` or ``"tool_calls"``.
        reward: Registered reward name, e.g. ``"math_reward_string_equal"``.
        turn_reward: Registered turn reward name (:mod:`agentfly_envs.turn_rewards`), e.g. ``"tool_error_penalty"``:
            its value for each turn is added to that step's reward (the last step's too); ``None``: steps before the
            last pay 0.
        progress_reward: In a world env, pay the world's progress as it is made: each step before the last pays the
            increase of the world's score (``report()["score"]``, in [0, 1]) over the step, and the last step pays the
            outcome reward less what the earlier steps were paid, so the episode's return is the outcome reward
            (what the world's scoring says) either way; only when it is paid changes. (A potential-based shaping,
            Ng et al. 1999, with the score as potential: it leaves the best policy as it is.) An episode that an
            infrastructure failure ends keeps what it was paid (it is unscored: the trainer leaves it out).
        max_turns: Assistant turns per episode before truncation (turns, not tokens).
        truncation_reward: Reward of a truncated episode.
        max_action_chars: Longest assistant turn accepted, in characters; longer turns get an error observation.
        max_calls_per_turn: Most tool calls run per turn; the rest get an error observation.
        max_tool_output_chars: Longest tool output shown, in characters; longer output is cut in the middle.
        max_observation_chars: Size of the observation space, in characters.
        obs: ``"text"`` or ``"screenshot"`` (the world's screen after each turn, for a world that has one).
        render_mode: ``None`` or ``"ansi"`` (``render()`` returns the transcript as text).
        **task_kwargs: Passed to the task source, e.g. ``data_files=``/``split=`` for GSM8K, ``level=`` for arithmetic.

    ``reset(seed=None, options=None)`` options: ``{"task": row}`` runs that row, ``{"index": i}`` runs
    row ``i`` of the task source in file order; without either, a row is drawn with ``self.np_random``.

    Info of ``reset``: ``messages`` (system and user chat messages), ``tools`` (JSON schemas),
    ``task`` (the row), ``task_index``. Info of ``step``: ``messages`` (new role-``tool`` messages),
    ``tool_calls`` (OpenAI-style), ``parse_errors``, ``tool_latency_s``, ``error_counts`` (this episode),
    ``turn``, ``answer`` (the scored text, on termination), ``reward_components`` and, when the reward
    function raised or returned no finite number (the episode then scores 0), ``reward_error`` (why, one line),
    with ``progress_reward`` ``progress`` (the increase of the world's score over the step),
    with a turn reward ``turn_reward`` (what it added to the step's reward) and, when it failed (it then pays 0),
    ``turn_reward_error``, and, only on the step that an infrastructure failure ended (no turn reward is paid then),
    ``infra_failure`` (what failed, one line; the key is absent from every other step's info).

    Example:
        >>> env = ToolEnv(task="arithmetic", level="easy")
        >>> observation, info = env.reset(options={"index": 0})
        >>> observation
        'Uma has 6 boxes with 7 books in each box. Uma then gets 17 more books. How many books does Uma have now?'
        >>> env.step('<tool_call>{"name": "calculator", "arguments": {"expression": "6*7+17"}}</tool_call>')[:4]
        ('59', 0.0, False, False)
        >>> env.step("Uma has \\boxed{59} books.")[:4]
        ('', 1.0, True, False)
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(
        self,
        task: str | TaskSource = "arithmetic",
        tools: Sequence[str] = ("calculator",),
        tool_options: Mapping[str, Mapping[str, Any]] | None = None,
        parser: str = "hermes",
        reward: str = "math_reward_string_equal",
        turn_reward: str | None = None,
        progress_reward: bool = False,
        max_turns: int = 8,
        truncation_reward: float = 0.0,
        max_action_chars: int = 32_768,
        max_calls_per_turn: int = 16,
        max_tool_output_chars: int = 4_096,
        max_observation_chars: int = 65_536,
        obs: str = "text",
        render_mode: str | None = None,
        **task_kwargs: Any,
    ) -> None:
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        if render_mode not in (None, *self.metadata["render_modes"]):
            raise ValueError(f"render_mode {render_mode!r} is not supported; use None or 'ansi'")
        if isinstance(tools, str):
            raise TypeError(f"tools must be a sequence of tool names, e.g. ({tools!r},), not a string")
        if obs not in OBSERVATION_MODES:
            raise ValueError(f"obs must be one of {list(OBSERVATION_MODES)}, got {obs!r}")
        self.tasks: TaskSource = task if isinstance(task, TaskSource) else _make_task_source(task, task_kwargs)
        self.tools: dict[str, Tool] = _make_tools(tools, tool_options or {})
        self._aliases = {a: t for t in self.tools.values() for a in t.aliases if a not in self.tools}
        self.parser: Parser = get_parser(parser)
        if self.parser.calls_only is not None and self._tool(self.parser.calls_only) is None:
            raise ValueError(
                f"the {parser!r} format calls only the {self.parser.calls_only!r} tool, and tools={tuple(tools)} "
                f"has no tool answering to it; add 'python' or 'python_executor' to tools, or pick another parser"
            )
        self.reward_name = reward
        self.reward_fn: RewardFunction = get_reward(reward)
        self.turn_reward_name = turn_reward
        self.turn_reward_fn: TurnReward | None = None if turn_reward is None else get_turn_reward(turn_reward)
        self.running_tool: str | None = None
        """The tool a step is running now (read by the runtimes to name the tool of a step past its timeout)."""
        self.max_turns = max_turns
        self.truncation_reward = float(truncation_reward)
        self.max_action_chars = max_action_chars
        self.max_calls_per_turn = max_calls_per_turn
        self.max_tool_output_chars = max_tool_output_chars
        self.render_mode = render_mode
        self.obs = obs
        self._world = self._attach_world_tools(tuple(tools))
        if progress_reward and self._world is None:
            raise ValueError(f"progress_reward=True pays a world's score increments; tools {tuple(tools)} run no world")
        self.progress_reward = progress_reward
        self.max_observation_chars = max_observation_chars
        self.observation_space = self._observation_space()
        self.action_space = TextSpace(max_action_chars)
        self._schemas = [tool.schema for tool in self.tools.values()]
        # marshal.loads of the schemas as JSON reads them is the fastest deep copy for reset's info (4x json.loads)
        self._schemas_marshalled = marshal.dumps(json.loads(json.dumps(self._schemas)))
        self._answer_by_tool = any(tool.ends_episode for tool in self.tools.values())
        if (reward in WORLD_REWARDS) != (self._world is not None):
            raise ValueError(
                f"reward {reward!r} with tools {tuple(tools)}: the world rewards {list(WORLD_REWARDS)} score the "
                "world a world tool (act, the web tools) plays, so they go together"
            )
        self._system_prompt = self._build_system_prompt()
        self._episode: _Episode | None = None

    def _attach_world_tools(self, names: tuple[str, ...]) -> WorldTool | None:
        """The env's world (its first world tool that runs one), with the other world tools attached to it and all
        of them set to the observation mode."""
        world_tools = [tool for tool in self.tools.values() if isinstance(tool, WorldTool)]
        world = next((tool for tool in world_tools if tool.hosts_world), None)
        for tool in world_tools:
            if tool is world:
                continue
            if world is None:
                raise ValueError(f"tools {names}: {tool.name} needs {tool.needs}")
            tool.attach(world)
        if world is None and self.obs != "text":
            raise ValueError(f"obs={self.obs!r} needs a world with a screen (the web tools); tools {names} have none")
        for tool in world_tools:
            tool.set_observation_mode(self.obs)
        return world

    def _observation_space(self) -> spaces.Space:
        text = TextSpace(self.max_observation_chars)
        if self.obs == "text":
            return text
        return spaces.Dict({"text": text, "image": spaces.Box(0, 255, self._world.screen_shape, np.uint8)})

    def _observation(self, text: str, message: dict[str, Any] | None) -> Observation:
        """The observation showing ``text``; in screenshot mode with the world's screen, which goes into ``message``
        (a user or tool message) too."""
        text = truncate_middle(text, self.max_observation_chars)
        if self.obs == "text":
            return text
        screen = self._world.screen()
        if message is not None:
            message["content"] = [image_part(screen), {"type": "text", "text": message["content"]}]
        return {"text": text, "image": screen}

    def _build_system_prompt(self) -> str:
        schemas = self._schemas
        if self.parser.calls_only is not None:  # the format shows the one tool it can call, under its own name
            schemas = [
                {**schema, "function": {**schema["function"], "name": self.parser.calls_only}}
                for schema in schemas
                if schema["function"]["name"] == self._tool(self.parser.calls_only).name
            ]
        parts = [self.tasks.system_prompt(self._answer_by_tool, tuple(self.tools)), self.parser.instructions(schemas)]
        return "\n\n".join(part for part in parts if part)

    def _tool(self, name: str) -> Tool | None:
        """The env's tool called ``name``, or the one answering to it as an alias."""
        return self.tools.get(name) or self._aliases.get(name)

    # ---------------------------------------------------------------------------------------------
    # Gymnasium API
    # ---------------------------------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: Mapping[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Starts an episode on one task.

        Args:
            seed: Seeds ``self.np_random`` (used to draw a task when no option selects one).
            options: ``{"task": row}`` or ``{"index": i}``; anything else raises ``ValueError``.

        Returns:
            ``(observation, info)``: the user turn's text, and ``messages``/``tools``/``task``/``task_index``.

        Raises:
            TaskFormatError: the selected row lacks a field the task needs (for a row of the env's data, the message
                names its file and row).
            WorldUnavailableError: the env's world cannot run here (e.g. no Java).
        """
        super().reset(seed=seed)
        row, index = self._select_task(dict(options or {}))
        if index is None:
            self.tasks.validate(row)
        else:  # a row of the env's data: the error names where it comes from
            self.tasks.validate_at(row, index)
        for tool in self.tools.values():
            tool.begin_episode(row)
        user_prompt = self.tasks.user_prompt(row)
        if self._world is not None:
            user_prompt = "\n\n".join(part for part in (user_prompt, self._world.introduction()) if part)
        messages = [
            {"role": "system", "content": self._system_prompt},
            {"role": "user", "content": user_prompt},
        ]
        observation = self._observation(user_prompt, messages[1])
        self._episode = _Episode(row=row, ground_truth=self.tasks.ground_truth(row), messages=messages)
        if self.progress_reward:
            self._episode.score = self._world.report()["score"]
        info = {
            "messages": [_copied(message) for message in messages],
            "tools": marshal.loads(self._schemas_marshalled),
            "task": _row_copy(row),
            "task_index": index,
        }
        return observation, info

    def _select_task(self, options: dict[str, Any]) -> tuple[Row, int | None]:
        unknown = set(options) - {"task", "index"}
        if unknown or len(options) > 1:
            raise ValueError(
                f"reset options must be {{'task': row}} or {{'index': i}} (or neither), got keys {sorted(options)}"
            )
        if "task" in options:
            if not isinstance(options["task"], Mapping):
                raise TaskFormatError(
                    f"options['task'] must be a row (a mapping), got {type(options['task']).__name__}"
                )
            return dict(options["task"]), None
        if "index" in options:
            index = options["index"]
            if isinstance(index, bool) or not isinstance(index, int | np.integer) or not 0 <= index < len(self.tasks):
                raise IndexError(f"options['index'] must be an int in [0, {len(self.tasks)}), got {index!r}")
            return self.tasks.row(int(index)), int(index)
        index = int(self.np_random.integers(len(self.tasks)))
        return self.tasks.row(index), index

    def step(self, action: Action) -> tuple[Observation, SupportsFloat, bool, bool, dict[str, Any]]:
        """Plays one assistant turn.

        Args:
            action: The assistant's raw text, or an assistant message dict ``{"content", "tool_calls"}``.

        Returns:
            ``(observation, reward, terminated, truncated, info)``: the tool output (``""`` when the
            episode ends on an answer), the reward (the turn reward's value, plus the outcome reward on the step
            that ends the episode), whether the agent answered,
            whether the turn budget ran out or an infrastructure failure ended the episode, and the step info
            described in the class docstring.

        Raises:
            ResetNeeded: ``reset()`` was never called.
            EpisodeFinishedError: the episode already ended.
            TypeError: ``action`` is neither a string nor a mapping.
        """
        episode = self._episode
        if episode is None:
            raise ResetNeeded("call reset() before step()")
        if episode.done:
            raise EpisodeFinishedError("the episode has ended (terminated or truncated); call reset() to start another")
        if not isinstance(action, str | Mapping):
            raise TypeError(f"action must be the assistant's text or a message dict, got {type(action).__name__}")
        episode.turn += 1
        episode.messages.append(_assistant_message(action))

        errors_before = sum(episode.error_counts.values()) if self.turn_reward_fn is not None else 0
        turn = self._run_turn(action, episode)
        outcome = self._outcome(turn, episode) if turn.infra_failure is None else _Outcome.lost_to(turn.infra_failure)
        text = "\n\n".join(message["content"] for message in turn.messages)
        observation = self._observation(text, turn.messages[-1] if turn.messages else None)
        episode.done = outcome.terminated or outcome.truncated
        if episode.done:
            self._end_episode()
        episode.messages.extend(_copied(message) for message in turn.messages)

        info = {
            "messages": turn.messages,
            "tool_calls": [call.as_openai() for call in turn.calls],
            "parse_errors": turn.parse_errors,
            "tool_latency_s": turn.latencies,
            "error_counts": dict(episode.error_counts),
            "turn": episode.turn,
            "answer": turn.answer,
            "reward_components": outcome.components,
        }
        if outcome.reward_error is not None:
            info["reward_error"] = outcome.reward_error
        if outcome.infra_failure is not None:
            info["infra_failure"] = outcome.infra_failure
            return observation, outcome.reward, outcome.terminated, outcome.truncated, info
        if self.progress_reward:
            info["progress"] = self._pay_progress(episode, outcome)
        if self.turn_reward_fn is not None:
            step = TurnStep(episode.turn, info["tool_calls"], sum(episode.error_counts.values()) - errors_before,
                            text, turn.answer is not None)  # fmt: skip
            info["turn_reward"], error = checked_turn_reward(self.turn_reward_name, self.turn_reward_fn, step)
            outcome.reward += info["turn_reward"]
            if error is not None:
                info["turn_reward_error"] = error
        return observation, outcome.reward, outcome.terminated, outcome.truncated, info

    def _pay_progress(self, episode: _Episode, outcome: _Outcome) -> float:
        """Sets the reward of a step that ``progress_reward`` pays: the world's score increase over the step, or on
        the episode's last step the outcome reward less the progress paid before. Returns the score increase."""
        score = self._world.report()["score"]
        progress, episode.score = score - episode.score, score
        if outcome.terminated or outcome.truncated:
            outcome.reward -= episode.paid
        else:
            outcome.reward = progress
        episode.paid += outcome.reward
        return progress

    def _outcome(self, turn: _TurnResult, episode: _Episode) -> _Outcome:
        """How a turn that the infrastructure did not fail ends: the world's view appended to its last message, and
        whether it ends the episode, with the reward (or the reward function's infrastructure failure)."""
        if self._world is not None and turn.messages and (view := self._world.observe()):
            turn.messages[-1]["content"] += f"\n\n{view}"
        world = self._world.report() if self._world is not None else None
        terminated = turn.answer is not None or (world is not None and world["done"] > 0)
        truncated = not terminated and episode.turn >= self.max_turns
        outcome = _Outcome(terminated, truncated)
        if terminated or (truncated and world is not None):  # a world's state is worth reporting either way
            truth = episode.ground_truth if world is None else world
            try:
                scored, outcome.reward_error = checked_score(self.reward_name, self.reward_fn, turn.answer or "", truth)
            except InfrastructureError as error:
                return _Outcome.lost_to(f"reward {self.reward_name}: {one_line(error)}")
            outcome.reward, outcome.components = float(scored.score), dict(scored.components)
        if truncated:
            outcome.reward = self.truncation_reward
        return outcome

    def close(self) -> None:
        """Frees the tools' resources (e.g. kills a sandbox session, stops a world's simulator)."""
        self._end_episode()
        for tool in self.tools.values():
            tool.close()
        super().close()

    def _end_episode(self) -> None:
        for tool in self.tools.values():
            tool.end_episode()

    def render(self) -> str | None:
        """With ``render_mode="ansi"``, the episode's transcript as text; else ``None``."""
        if self.render_mode != "ansi" or self._episode is None:
            return None
        return "\n\n".join(f"[{m['role']}] {message_text(m.get('content'))}".rstrip() for m in self._episode.messages)

    # ---------------------------------------------------------------------------------------------
    # One turn
    # ---------------------------------------------------------------------------------------------

    def _run_turn(self, action: Action, episode: _Episode) -> _TurnResult:
        turn = _TurnResult()
        size = len(action) if isinstance(action, str) else len(json.dumps(action, default=str, ensure_ascii=False))
        if size > self.max_action_chars:
            episode.error_counts["action_too_long"] += 1
            turn.add_error(
                f"your turn was {size} characters long; the limit is {self.max_action_chars}. Write a shorter turn."
            )
            return turn
        parsed: ParseResult = self.parser.parse(action)
        if not parsed.attempted_call:
            turn.answer = parsed.content
            return turn
        for error in parsed.errors:
            episode.error_counts["parse_error"] += 1
            turn.parse_errors.append(error)
            turn.add_error(error)
        for position, call in enumerate(parsed.calls):
            if position >= self.max_calls_per_turn:
                episode.error_counts["too_many_calls"] += len(parsed.calls) - position
                turn.add_error(
                    f"only {self.max_calls_per_turn} tool calls run per turn; "
                    f"the last {len(parsed.calls) - position} were skipped"
                )
                break
            self._run_call(call, episode, turn)
            if turn.infra_failure is not None:  # the episode ends with this call
                break
        return turn

    def _run_call(self, call: ToolCall, episode: _Episode, turn: _TurnResult) -> None:
        turn.calls.append(call)
        tool = self._tool(call.name)
        if tool is None:
            episode.error_counts["unknown_tool"] += 1
            close = close_match(call.name, self.tools)
            hint = f"did you mean {close!r}? " if close else ""
            turn.add_error(f"unknown tool {call.name!r:.80}; {hint}available tools: {', '.join(self.tools)}", call)
            return
        self.running_tool = tool.name
        try:
            result = tool(call.arguments)
        finally:
            self.running_tool = None
        if result.status is CallStatus.INFRA_ERROR:
            turn.infra_failure = f"tool {tool.name}: {result.content.removeprefix('Error: ')}"
        elif result.status is not CallStatus.OK:
            episode.error_counts[result.status.value] += 1
        turn.latencies.append(result.latency_s)
        turn.messages.append(_tool_message(call, truncate_middle(result.content, self.max_tool_output_chars)))
        if tool.ends_episode and result.status is CallStatus.OK and turn.answer is None:
            turn.answer = result.content

    # ---------------------------------------------------------------------------------------------
    # Demonstrations (written by agentfly_envs.demonstrations)
    # ---------------------------------------------------------------------------------------------

    def golden_actions(self, row: Row | None = None) -> list[Action]:
        """The assistant turns that solve a task with this env's tools and parser, then answer.

        The steps of the task's golden solution become calls (arithmetic to the calculator, or to
        Python as ``print(expression)``; programs to Python; queries to ``search``); they are spread
        over at most ``max_turns - 1`` turns (several calls per turn when needed), and the last turn answers.
        In a world env they are the world's golden calls for the running game (a text world's gold path, one ``act``
        call per command; a web page's scripted solver),
        spread over at most ``max_turns`` turns; the world ends the episode, so there is no answer turn.
        (:class:`~agentfly_envs.demonstrations.Demonstrator` writes them.)

        Args:
            row: The task; defaults to the current episode's row (a world env knows only the running game's).

        Returns:
            Actions to pass to ``step`` one by one.

        Raises:
            AgentflyError: the task has no golden solution, or the env has no tool that can run it.
        """
        if row is None:
            if self._episode is None:
                raise ResetNeeded("call reset() first, or pass the row to golden_actions(row)")
            row = self._episode.row
        if self._world is None:
            return self._demonstrator().golden_actions(row)
        if self._episode is None or row != self._episode.row:
            raise AgentflyError("a world's gold path comes from its running game: reset(options={'task': row}) first")
        return self._demonstrator().world_actions(self._world)

    def answer_action(self, answer: str, final: str | None = None) -> Action:
        """The assistant turn that gives ``answer`` as the final answer, in this env's format.

        Args:
            answer: The answer (e.g. ``"42"``).
            final: The whole final message, where the task has one; defaults to ``The answer is \\boxed{answer}.``

        Returns:
            A call of the env's answer tool when it has one, else the parser's final-answer turn.

        Example:
            >>> import gymnasium as gym
            >>> env = gym.make("agentfly/Arith-Calc").unwrapped
            >>> env.answer_action("42")
            'The answer is \\\\boxed{42}.'
        """
        return self._demonstrator().answer_action(answer, final)

    def _demonstrator(self) -> Demonstrator:
        """The writer of this env's demonstrations, as the env is now (its turn budget may have been changed)."""
        return Demonstrator(self.tasks, self.tools, self.parser, self.max_turns, self._aliases)


@dataclass
class _TurnResult:
    """What one assistant turn produced (built fresh each step, so it can go into ``info`` as is)."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    calls: list[ToolCall] = field(default_factory=list)
    parse_errors: list[str] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    answer: str | None = None
    infra_failure: str | None = None
    """What failed, when a tool call failed with an infrastructure error (the turn's later calls did not run)."""

    def add_error(self, text: str, call: ToolCall | None = None) -> None:
        """Adds an error observation, as a tool message the model reads."""
        self.messages.append(_tool_message(call, f"Error: {text}"))


@dataclass
class _Outcome:
    """How a step ends: whether it ends the episode, and its reward and what the info reports of it."""

    terminated: bool = False
    truncated: bool = False
    reward: float = 0.0
    components: dict[str, float] = field(default_factory=dict)
    reward_error: str | None = None
    infra_failure: str | None = None

    @classmethod
    def lost_to(cls, infra_failure: str) -> _Outcome:
        """The outcome of a step that the infrastructure failed: truncated, unscored."""
        return cls(truncated=True, infra_failure=infra_failure)


def _make_task_source(name: str, task_kwargs: dict[str, Any]) -> TaskSource:
    """Builds the named task source; an unknown kwarg raises a ``TypeError`` naming close matches."""
    source = get_task_source(name)
    task_params = [p for p in inspect.signature(source).parameters if p != "self"]
    unknown = [key for key in task_kwargs if key not in task_params]
    if unknown:
        env_params = [p for p in inspect.signature(ToolEnv).parameters if p != "task_kwargs"]
        guesses = {key: close_match(key, task_params + env_params) for key in unknown}
        hints = "".join(f" Did you mean {close!r} for {key!r}?" for key, close in guesses.items() if close)
        raise TypeError(
            f"unknown env kwarg(s) {unknown}.{hints} ToolEnv takes {env_params}; task {name!r} takes {task_params}."
        )
    return source(**task_kwargs)


def _make_tools(names: Sequence[str], options: Mapping[str, Mapping[str, Any]]) -> dict[str, Tool]:
    """The env's own tools: each registered tool's ``for_env`` copy, configured with its options."""
    unknown = [name for name in options if name not in names]
    if unknown:
        raise ValueError(f"tool_options names tool(s) {unknown} that are not in tools={tuple(names)}")
    tools: dict[str, Tool] = {}
    for name in names:
        if is_mcp_entry(name):
            _add_server_tools(tools, name, options.get(name, {}))
            continue
        tool = get_tool(name)
        if isinstance(tools.get(tool.name), McpTool):
            raise ValueError(f"tools has {tool.name!r} twice: an MCP server listed before it provides one")
        try:
            tools[tool.name] = tool.for_env(**options.get(name, {}))
        except TypeError as e:
            parameters = inspect.signature(tool.for_env).parameters.values()
            params = [p.name for p in parameters if p.kind is not inspect.Parameter.VAR_KEYWORD]
            guesses = [close_match(key, params) for key in options.get(name, {})]
            hints = "".join(f" Did you mean {close!r}?" for close in guesses if close)
            raise TypeError(f"tool_options[{name!r}]: {e}.{hints} Tool {name!r} takes {params}.") from e
    return tools


def _add_server_tools(tools: dict[str, Tool], entry: str, options: Mapping[str, Any]) -> None:
    """Adds the tools of the MCP server ``entry`` names (:func:`~agentfly_envs.tools.mcp.mcp_tools`) to ``tools``.

    Raises:
        ValueError: a tool of the server has the name of a tool listed before it.
        TypeError: an option ``mcp_tools`` does not take.
    """
    try:
        server_tools = mcp_tools(entry, **options)
    except TypeError as e:
        raise TypeError(f"tool_options[{entry!r}]: {e}; an MCP server takes ['timeout_s', 'startup_timeout_s']") from e
    taken = [tool.name for tool in server_tools if tool.name in tools]
    if taken:
        server_tools[0].close()
        raise ValueError(f"{entry} has tool(s) {taken}, which an earlier entry of tools already provides")
    tools.update((tool.name, tool) for tool in server_tools)


def _tool_message(call: ToolCall | None, content: str) -> dict[str, Any]:
    if call is None:
        return {"role": "tool", "name": "error", "content": content}
    return {"role": "tool", "name": call.name, "tool_call_id": call.id, "content": content}


_PLAIN_VALUES = frozenset({str, int, float, bool, type(None)})


def _row_copy(row: Row) -> Row:
    """A deep copy of a task row; for a row of plain values (strings, numbers: the usual row) a plain ``dict``."""
    if all(type(value) in _PLAIN_VALUES for value in row.values()):
        return dict(row)
    return copy.deepcopy(row)


def _copied(message: dict[str, Any]) -> dict[str, Any]:
    """A copy of a chat message that shares no list or dict with it (image parts share their image)."""
    content = message.get("content")
    return {**message, "content": [dict(part) for part in content]} if isinstance(content, list) else dict(message)


def _assistant_message(action: Action) -> dict[str, Any]:
    if isinstance(action, str):
        return {"role": "assistant", "content": action}
    return {"role": "assistant", **copy.deepcopy(dict(action))}
