"""One agent program's episode in tokens: the prompt each request is sampled after, and the trajectory its requests
make.

A request whose messages are an earlier request's messages, then the assistant message the endpoint returned for it,
then only tool or user messages, *extends* it: its prompt is that request's prompt ids, the ids sampled for it, and
the template's tokens of the new messages (:meth:`~agentfly_train.rollout.ChatCodec.observation_ids`), so the model
is never shown a re-tokenised turn. Any other request (the first, or one whose program rewrote the history) is
rendered afresh. An episode whose every request extends the one before it (one choice each) is one growing sequence
(:attr:`~agentfly_train.rollout.Trajectory.grows`); any other trains one row per sampled choice, in the context it was
sampled after.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentfly_train.generation.base import Generation
from agentfly_train.programs.wire import ChatRequest, same_turn
from agentfly_train.rollout.codec import ChatCodec, TemplateError
from agentfly_train.rollout.episode import RolloutBudgets, Trajectory, TurnSpan, finish


class BudgetSpent(RuntimeError):
    """A request past the episode's turn or token budget; the episode ends with the finish reason :attr:`reason`."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class SampledTurn:
    """One sampled choice of a request.

    Attributes:
        prompt_ids: The ids it was sampled after.
        generation: What the backend sampled (ids, log-probs, whether it ended on an end-of-turn token).
        token_ids: The sampled ids kept: ``generation.token_ids`` through the token that completed a stop text.
        messages: The request's messages.
        reply: The assistant message returned for it.
        extends: Whether ``prompt_ids`` extends the previous request's prompt and sampled ids.
        version: The policy version that sampled it (off-policy training tags each trained token with it).
    """

    prompt_ids: list[int]
    generation: Generation
    token_ids: list[int]
    messages: list[dict[str, Any]]
    reply: dict[str, Any]
    extends: bool
    version: int


@dataclass
class ProgramEpisode:
    """The requests of one episode so far (the endpoint's side of it).

    Args:
        budgets: The run's turn and token limits: each choice of a request is a turn; the sampled tokens, and the
            template's tokens of extending requests, count against ``response_length``.
    """

    budgets: RolloutBudgets
    turns: list[SampledTurn] = field(default_factory=list)
    requests: int = 0
    used_tokens: int = 0
    ended: str | None = None
    """The finish reason of a spent budget (``max_turns``, ``length``), or ``None``."""

    def prompt(self, codec: ChatCodec, request: ChatRequest) -> tuple[list[int], bool, int]:
        """The ids ``request`` is sampled after, whether they extend the last request's (see the module), and the
        new tokens each of its choices may sample.

        Raises:
            BudgetSpent: the request is past the turn budget, or no token of the completion budget is left.
        """
        if self.requests + request.n > self.budgets.max_turns:
            self._end("max_turns", f"the episode's turn budget (agent.max_turns={self.budgets.max_turns}, a turn "
                                   "per choice) is spent")  # fmt: skip
        self.requests += request.n
        prompt, extends = self._extended(codec, request.messages)
        if prompt is None:
            prompt = codec.prompt_ids(request.messages)
        room = self.room(len(prompt) - self._previous_length() if extends else 0)
        if room <= 0:
            self._end("length", f"the episode's token budget (rollout.response_length="
                                f"{self.budgets.response_length}) is spent")  # fmt: skip
        return prompt, extends, min(room, request.max_tokens or room)

    def room(self, observation: int = 0) -> int:
        """New tokens the next request may sample after an ``observation`` of that many template tokens."""
        return min(self.budgets.max_tokens_per_turn, self.budgets.response_length - self.used_tokens - observation)

    def record(self, turn: SampledTurn) -> None:
        """Adds a sampled choice (the sampled tokens, and the template's tokens it extends by, count as used)."""
        observation = len(turn.prompt_ids) - self._previous_length() if turn.extends else 0
        self.used_tokens += len(turn.token_ids) + observation
        self.turns.append(turn)

    def _previous_length(self) -> int:
        last = self.turns[-1]
        return len(last.prompt_ids) + len(last.token_ids)

    def _end(self, reason: str, message: str) -> None:
        self.ended = self.ended or reason
        raise BudgetSpent(reason, message)

    def _extended(self, codec: ChatCodec, messages: list[dict[str, Any]]) -> tuple[list[int] | None, bool]:
        """The prompt of a request that extends the last sampled choice, and ``True``; else ``(None, False)``."""
        if not self.turns:
            return None, False
        last = self.turns[-1]
        known = len(last.messages)
        new = messages[known + 1 :]
        if (
            len(messages) <= known + 1
            or messages[:known] != last.messages
            or not same_turn(messages[known], last.reply)
            or any(m["role"] == "assistant" for m in new)
        ):
            return None, False
        try:
            observation = codec.observation_ids(new, closed_turn=last.generation.stopped, action=last.reply)
        except TemplateError:
            return None, False
        return [*last.prompt_ids, *last.token_ids, *observation], True

    def trajectory(self) -> Trajectory:
        """The episode's trajectory, not yet finished (:meth:`finished`): one growing completion (sampled ids with
        ``env_mask = 1`` and their log-probs, the template's ids between them with ``env_mask = 0``) when every
        request extended the one before it, else each choice's ids in turn, each a turn trained in its own prompt."""
        turns = self.turns
        grows = all(turn.extends for turn in turns[1:])
        trajectory = Trajectory(prompt_ids=list(turns[0].prompt_ids) if turns else [], grows=grows)
        for index, turn in enumerate(turns):
            if grows and index:
                trajectory.extend(turn.prompt_ids[len(trajectory.context_ids) :], trained=False)
                trajectory.context_ids = list(turn.prompt_ids)
            start = len(trajectory.completion_ids)
            logprobs = turn.generation.logprobs[: len(turn.token_ids)]
            trajectory.extend(turn.token_ids, trained=True, logprobs=logprobs, version=turn.version)
            context = trajectory.context_ids if grows else turn.prompt_ids
            trajectory.turn_spans.append(TurnSpan(context, len(context), [], start, len(trajectory.completion_ids)))
            trajectory.context_ids = [*turn.prompt_ids, *turn.token_ids]
            trajectory.turn_calls.append(list(turn.reply.get("tool_calls", ())))
        trajectory.num_turns = len(turns)
        trajectory.turn_rewards = [0.0] * len(turns)
        trajectory.messages = [*turns[-1].messages, turns[-1].reply] if turns else []
        return trajectory


def finished(
    trajectory: Trajectory, reason: str, reward: float, budgets: RolloutBudgets, info: Mapping[str, Any] | None = None
) -> Trajectory:
    """``trajectory`` ended with ``reason``: ``reward`` on its last turn (the truncation reward where a budget ended
    it), ``info`` the env's step that scored an answer (its reward's components and error)."""
    if trajectory.turn_rewards:
        trajectory.turn_rewards[-1] = reward
    else:  # a program that asked nothing: its reward stands alone (nothing is trained)
        trajectory.turn_rewards = [reward]
    finish(trajectory, reason, budgets.truncation_reward if reason != "stop" else 0.0, info)
    return trajectory


def stop_at(texts: Sequence[str], stop: Sequence[str]) -> tuple[int, int] | None:
    """Where a stop text ends the sampled tokens ``texts`` (each token's text): ``(tokens kept, characters of the
    joined text kept)``, the tokens through the one that completes the earliest stop text and the text before it;
    ``None`` when none occurs.

    Example:
        >>> stop_at(["Hel", "lo", " wor", "ld"], ["o w"])
        (3, 4)
    """
    text = "".join(texts)
    found = [(text.find(s), s) for s in stop if s in text]
    if not found:
        return None
    cut, word = min(found)
    length = 0
    for count, piece in enumerate(texts, start=1):
        length += len(piece)
        if length >= cut + len(word):
            return count, cut
    return len(texts), cut
