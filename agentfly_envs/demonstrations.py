"""Demonstrations: the assistant turns that solve a task with an env's tools and parser (a golden episode), and the
turn that gives an answer at once (what a guess is made of).

A task source's golden solution (:class:`~agentfly_envs.tasks.GoldenSolution`) is written in tool-neutral steps;
:class:`Demonstrator` turns them into calls of the tools an env has, in its parser's format, spread over its turn
budget. A world's golden calls come from the world itself (:meth:`Demonstrator.world_actions`). ``ToolEnv`` exposes
these as its ``golden_actions`` and ``answer_action`` (members of the env contract, :mod:`agentfly_envs.contract`);
the trainer's SFT warm start plays them, and picks guesses among the tasks' :func:`golden_answer`\\ s.

Example:
    >>> from agentfly_envs.parsers import get_parser
    >>> from agentfly_envs.tasks import get_task_source
    >>> from agentfly_envs.tools import get_tool
    >>> tasks = get_task_source("arithmetic")(level="easy")
    >>> demonstrator = Demonstrator(tasks, {"calculator": get_tool("calculator")}, get_parser("hermes"), max_turns=8)
    >>> actions = demonstrator.golden_actions(tasks.row(0))  # two calculator turns, then the answer
    >>> len(actions), actions[-1]
    (3, 'The answer is \\\\boxed{59}.')
    >>> golden_answer(tasks, tasks.row(0))
    '59'
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from agentfly_envs.errors import AgentflyError
from agentfly_envs.parsers import Action, Parser, ToolCall

if TYPE_CHECKING:
    from agentfly_envs.contract import TaskRows
    from agentfly_envs.tasks import GoldenSolution, Row, TaskSource
    from agentfly_envs.tools import Tool
    from agentfly_envs.tools.world import WorldTool


@dataclass(frozen=True)
class Demonstrator:
    """Writes an env's demonstrations: its task source's golden solutions as calls of its tools, in its format.

    Attributes:
        tasks: The task source (its ``golden(row)`` solutions).
        tools: The env's tools by name.
        parser: The env's parser (writes the calls and the final turn).
        max_turns: The env's turn budget (turns, not tokens).
        aliases: Tools by the other names they answer to (e.g. ``python`` for ``python_executor``).
    """

    tasks: TaskSource
    tools: Mapping[str, Tool]
    parser: Parser
    max_turns: int
    aliases: Mapping[str, Tool] = field(default_factory=dict)

    def golden_actions(self, row: Row) -> list[Action]:
        """The assistant turns that solve ``row`` with the env's tools and parser, then answer.

        The steps of the task's golden solution become calls (arithmetic to the calculator, or to Python as
        ``print(expression)``; programs to Python; queries to ``search``); they are spread over at most
        ``max_turns - 1`` turns (several calls per turn when needed), and the last turn answers.

        Raises:
            AgentflyError: the task has no golden solution, or the env has no tool that can run it.
        """
        solution = self.tasks.golden(row)
        if solution is None:
            raise AgentflyError(f"{type(self.tasks).__name__} provides no golden solutions")
        calls = self._golden_calls(solution)
        num_turns = min(len(calls), self.max_turns - 1)
        actions = [self.parser.format_calls([calls[i] for i in chunk]) for chunk in chunks(len(calls), num_turns)]
        actions.append(self.answer_action(solution.answer, solution.final))
        return actions

    def world_actions(self, world: WorldTool) -> list[Action]:
        """The world's golden calls for its running game (a text world's gold path, one ``act`` call per command; a
        web page's scripted solver), spread over at most ``max_turns`` turns; the world ends the episode, so there is
        no answer turn."""
        calls = world.golden_calls()
        num_turns = min(len(calls), self.max_turns)
        return [self.parser.format_calls([calls[i] for i in chunk]) for chunk in chunks(len(calls), num_turns)]

    def answer_action(self, answer: str, final: str | None = None) -> Action:
        """The assistant turn that gives ``answer`` as the final answer, in the env's format.

        Args:
            answer: The answer (e.g. ``"42"``).
            final: The whole final message, where the task has one; defaults to ``The answer is \\boxed{answer}.``

        Returns:
            A call of the env's answer tool when it has one, else the parser's final-answer turn.
        """
        answer_tool = next((name for name, tool in self.tools.items() if tool.ends_episode), None)
        if answer_tool is not None:
            return self.parser.format_calls([ToolCall(answer_tool, {"answer": answer})])
        return self.parser.format_final(final or f"The answer is \\boxed{{{answer}}}.")

    def _golden_calls(self, solution: GoldenSolution) -> list[ToolCall]:
        if "calculator" in self.tools:
            calls = [ToolCall("calculator", {"expression": e}) for e in solution.expressions]
        else:
            calls = [self._golden_call("python", "code", f"print({e})") for e in solution.expressions]
        calls += [self._golden_call("python", "code", program) for program in solution.programs]
        return calls + [self._golden_call("search", "query", query) for query in solution.queries]

    def _golden_call(self, tool_name: str, argument: str, value: str) -> ToolCall:
        """A call of the env's tool answering to ``tool_name``, under the name its parser writes."""
        tool = self.tools.get(tool_name) or self.aliases.get(tool_name)
        if tool is None or self.parser.calls_only not in (None, tool_name):
            raise AgentflyError(
                f"golden solutions of {type(self.tasks).__name__} call a {tool_name!r} tool, and this env "
                f"(tools {list(self.tools)}, format {self.parser.name!r}) cannot"
            )
        return ToolCall(tool_name if self.parser.calls_only else tool.name, {argument: value})


def golden_answer(tasks: TaskRows, row: Mapping[str, Any]) -> str | None:
    """The answer of ``row``'s golden solution, or ``None`` where the task has none (a world's game, a remote env's
    task): the guesses of a warm start are other tasks' golden answers.

    Args:
        tasks: An env's task rows (the env contract's ``tasks``: a task source, or rows whose ``golden`` gives
            ``None``).
        row: The task.
    """
    golden = tasks.golden(dict(row))
    return None if golden is None else golden.answer


def chunks(count: int, parts: int) -> list[list[int]]:
    """``range(count)`` split into ``parts`` consecutive runs of near-equal length (none when ``parts`` is 0).

    Example:
        >>> chunks(5, 2)
        [[0, 1, 2], [3, 4]]
    """
    return [[int(i) for i in chunk] for chunk in np.array_split(np.arange(count), parts)] if parts else []
