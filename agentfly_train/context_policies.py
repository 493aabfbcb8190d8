"""Context policies: what an episode's next turn is sampled after once its turns outgrow the model's context
(``agent.context.policy``).

``full`` keeps every turn: the context grows by prefix, one sequence per episode. The others rewrite it between
turns, from the episode's prompt and its turns kept here in tokens (:class:`TurnHistory`), never re-tokenising a
sampled token:

- ``window``: the prompt (system and first user message) and the last ``agent.context.window`` turns;
- ``mask_observations``: every turn, the env's answers older than the last ``window`` turns replaced by
  ``agent.context.placeholder`` (rendered by the chat template as the env's message would be);
- ``summarize``: the last ``window`` turns after the prompt, whose user message ends with a summary of the older
  turns that the policy itself writes (a generation request through the rollout's own backend, sampled like its
  turns, ``agent.context.summary_tokens`` new tokens at most), refreshed each time a turn leaves the window. The
  summary's tokens are not trained: they enter the later turns' contexts as prompt tokens.

A policy that rewrites the context makes the episode train step-wise: each turn its own row, the context it was
sampled in followed by its sampled tokens (:attr:`~agentfly_train.config.AgentConfig.trains_turn_rows`). Only the
standard library and the registry are imported here (the configuration reads :data:`CONTEXT_POLICIES`, and the
rollout, above, uses the policies); the codec is the rollout's (:class:`ChatCodec` says what of it is used).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from agentfly_envs.registry import Registry

if TYPE_CHECKING:
    from agentfly_train.config.agent import ContextConfig


class ChatCodec(Protocol):
    """What a policy uses of the rollout's codec (:class:`~agentfly_train.rollout.ChatCodec`, in the package above)."""

    tokenizer: Any
    reasoning_end: str | None

    def prompt_ids(self, messages: Sequence[Mapping[str, Any]]) -> list[int]: ...

    def observation_ids(
        self, env_messages: Sequence[Mapping[str, Any]], closed_turn: bool, action: Any = None
    ) -> list[int]: ...

    def request_ids(self, text: str) -> list[int]: ...


SUMMARY_HEADER = "Summary of your earlier steps:"
"""The line after which the summary follows the task in the prompt of ``summarize``."""


@dataclass
class ContextTurn:
    """One turn of an episode as a context may hold it.

    Attributes:
        kept_ids: The sampled tokens the next contexts keep (all of them, or those after the turn's reasoning when
            the codec drops it).
        observation_ids: The env's answer as the template renders it, through the next assistant header.
        messages: The env's messages of that answer.
        closed: Whether the sampled turn ended with an end-of-turn token.
        action: The turn's action (text, or message), which some templates name in the answer.
        masked_ids: The answer with each message's content replaced by a placeholder, once rendered.
    """

    kept_ids: list[int]
    observation_ids: list[int]
    messages: list[dict[str, Any]]
    closed: bool
    action: Any
    masked_ids: list[int] | None = None


@dataclass
class TurnHistory:
    """An episode's turns, kept for a policy that rewrites the context (``full`` keeps none).

    Attributes:
        opening: The episode's opening messages (system, task).
        turns: Its turns, in order.
        summary: The summary of the turns before ``summarized`` (``summarize``), or ``""``.
        summarized: How many of the oldest turns ``summary`` stands for.
        summaries: Every summary written in the episode, in order (for the saved samples).
    """

    opening: list[dict[str, Any]] = field(default_factory=list)
    turns: list[ContextTurn] = field(default_factory=list)
    summary: str = ""
    summarized: int = 0
    summaries: list[str] = field(default_factory=list)


class ContextPolicy:
    """What an episode's next turn is sampled after. A subclass registered in :data:`CONTEXT_POLICIES` is built
    from ``agent.context`` with :meth:`from_config`.

    Attributes:
        rewrites_context: Whether the context is rebuilt between turns (each turn then trains as its own row).
        writes_summaries: Whether the policy asks the backend for summaries (:meth:`summary_request`).
        settings: The keys of ``agent.context`` the policy reads besides ``policy`` and ``step_wise`` (another set is
            a config error).
        window: Turns kept whole after the prompt.
        summary_tokens: New tokens of a summary, at most (0: the policy writes none).
    """

    rewrites_context: ClassVar[bool] = True
    writes_summaries: ClassVar[bool] = False
    settings: ClassVar[tuple[str, ...]] = ("window",)

    def __init__(self, window: int = 1, summary_tokens: int = 0) -> None:
        self.window = window
        self.summary_tokens = summary_tokens

    @classmethod
    def from_config(cls, config: ContextConfig) -> ContextPolicy:
        """The policy of the ``agent.context`` section."""
        return cls(config.window)

    def next_context(
        self, prompt_ids: list[int], history: TurnHistory, turn: ContextTurn, codec: ChatCodec
    ) -> list[int]:
        """Records ``turn`` in ``history`` and returns the context the next turn is sampled after (a new list)."""
        history.turns.append(turn)
        return self.context_ids(prompt_ids, history, codec)

    def context_ids(self, prompt_ids: list[int], history: TurnHistory, codec: ChatCodec) -> list[int]:
        """The context after ``prompt_ids`` and the turns of ``history``."""
        raise NotImplementedError

    def recent(self, history: TurnHistory) -> list[ContextTurn]:
        """The last ``window`` turns of ``history``."""
        return history.turns[-self.window :]

    def summary_request(self, history: TurnHistory, codec: ChatCodec) -> list[int] | None:
        """The prompt of a summary to write before the next turn (:meth:`take_summary`), or ``None``."""
        return None

    def take_summary(
        self, prompt_ids: list[int], history: TurnHistory, token_ids: Sequence[int], codec: ChatCodec
    ) -> list[int]:
        """Records the summary sampled for :meth:`summary_request` and returns the context rebuilt with it."""
        raise NotImplementedError(f"{type(self).__name__} writes no summaries")


class FullContext(ContextPolicy):
    """``full``: every turn stays; the context grows by prefix (one row per episode unless
    ``agent.context.step_wise``)."""

    rewrites_context = False
    settings = ()


class WindowContext(ContextPolicy):
    """``window``: the prompt and the last ``window`` turns (each turn's sampled tokens and the env's answer)."""

    def context_ids(self, prompt_ids: list[int], history: TurnHistory, codec: ChatCodec) -> list[int]:
        return _joined(prompt_ids, self.recent(history))


class MaskedObservations(ContextPolicy):
    """``mask_observations``: every turn's sampled tokens; the env's answers older than the last ``window`` turns
    replaced by ``placeholder`` (each message's content; the template's text around it stays)."""

    settings = ("window", "placeholder")

    def __init__(self, window: int, placeholder: str) -> None:
        super().__init__(window)
        self.placeholder = placeholder

    @classmethod
    def from_config(cls, config: ContextConfig) -> ContextPolicy:
        return cls(config.window, config.placeholder)

    def context_ids(self, prompt_ids: list[int], history: TurnHistory, codec: ChatCodec) -> list[int]:
        ids = list(prompt_ids)
        recent = len(history.turns) - self.window
        for index, turn in enumerate(history.turns):
            ids += turn.kept_ids
            ids += turn.observation_ids if index >= recent else self._masked(turn, codec)
        return ids

    def _masked(self, turn: ContextTurn, codec: ChatCodec) -> list[int]:
        if turn.masked_ids is None:
            messages = [{**message, "content": self.placeholder} for message in turn.messages]
            turn.masked_ids = codec.observation_ids(messages, closed_turn=turn.closed, action=turn.action)
        return turn.masked_ids


class SummarizedContext(ContextPolicy):
    """``summarize``: the prompt, its task followed by a summary of the turns older than the last ``window``, and
    those last turns. The summary is the policy's own: :meth:`summary_request` asks for it (``summary_tokens`` new
    tokens at most, the instruction ``prompt``, the task, the earlier summary and the turns leaving the window),
    each time turns leave the window."""

    writes_summaries = True
    settings = ("window", "summary_tokens", "summary_prompt")

    def __init__(self, window: int, summary_tokens: int, prompt: str) -> None:
        super().__init__(window, summary_tokens)
        self.prompt = prompt

    @classmethod
    def from_config(cls, config: ContextConfig) -> ContextPolicy:
        return cls(config.window, config.summary_tokens, config.summary_prompt)

    def context_ids(self, prompt_ids: list[int], history: TurnHistory, codec: ChatCodec) -> list[int]:
        if history.summary:
            *before, task = history.opening
            summary = f"\n\n{SUMMARY_HEADER}\n{history.summary}"
            prompt_ids = codec.prompt_ids([*before, {**task, "content": _text(task) + summary}])
        return _joined(prompt_ids, self.recent(history))

    def summary_request(self, history: TurnHistory, codec: ChatCodec) -> list[int] | None:
        leaving = history.turns[history.summarized : self._older(history)]
        if not leaving:
            return None
        steps = "\n".join(_transcript(turn, codec) for turn in leaving)
        earlier = f"\n\nSummary of the steps before these:\n{history.summary}" if history.summary else ""
        task = _text(history.opening[-1]) if history.opening else ""
        return codec.request_ids(f"{self.prompt}\n\nTask:\n{task}{earlier}\n\nSteps:\n{steps}")

    def take_summary(
        self, prompt_ids: list[int], history: TurnHistory, token_ids: Sequence[int], codec: ChatCodec
    ) -> list[int]:
        text = codec.tokenizer.decode(token_ids, skip_special_tokens=True)
        if codec.reasoning_end is not None:
            text = text.rpartition(codec.reasoning_end)[2]
        history.summary = text.strip()
        history.summaries.append(history.summary)
        history.summarized = self._older(history)
        return self.context_ids(prompt_ids, history, codec)

    def _older(self, history: TurnHistory) -> int:
        """How many of the oldest turns lie outside the window."""
        return max(len(history.turns) - self.window, 0)


def _joined(prompt_ids: list[int], turns: Sequence[ContextTurn]) -> list[int]:
    return [*prompt_ids, *itertools.chain.from_iterable([*t.kept_ids, *t.observation_ids] for t in turns)]


def _text(message: Mapping[str, Any]) -> str:
    """A message's text (its text parts joined where its content is a list of parts)."""
    content = message.get("content") or ""
    return content if isinstance(content, str) else "\n".join(p.get("text", "") for p in content)


def _transcript(turn: ContextTurn, codec: ChatCodec) -> str:
    """A turn as lines of text: the agent's, then each env message's."""
    said = codec.tokenizer.decode(turn.kept_ids, skip_special_tokens=True).strip()
    return "\n".join([f"Agent: {said}", *(f"{m.get('role', 'env').title()}: {_text(m)}" for m in turn.messages)])


CONTEXT_POLICIES: Registry[type[ContextPolicy]] = Registry("context policy", where="agentfly_train/context_policies.py")
"""``agent.context.policy`` -> a :class:`ContextPolicy` subclass, built with its ``from_config``."""
CONTEXT_POLICIES.add("full", FullContext)
CONTEXT_POLICIES.add("window", WindowContext)
CONTEXT_POLICIES.add("mask_observations", MaskedObservations)
CONTEXT_POLICIES.add("summarize", SummarizedContext)


def context_policy(config: ContextConfig) -> ContextPolicy:
    """The policy ``agent.context`` names, built from its settings."""
    return CONTEXT_POLICIES.get(config.policy).from_config(config)
