"""The three ways of judging: one episode's answer (``judge``), a rubric's criteria (``rubric``), and a group's answers
against each other (``group_rank``, RULER-style). Each asks the judge for JSON of a fixed shape and maps its integer
scores (0 to :data:`SCALE`) to a reward in [0, 1], keeping the judge's reasoning.

The shape is given to vLLM's structured outputs as a regular expression of the JSON text (``structured_outputs:
{regex: ...}``), not as a JSON schema: in vLLM 0.32 the switch that keeps whitespace out of schema-constrained JSON is
a server-wide setting, and a small greedy judge then writes newlines between the keys until ``max_tokens`` cuts its
answer. The expression has no room for whitespace, its reasoning is a string short enough to fit in ``max_tokens``
however it tokenises, and its scores are integers in range: every answer parses.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from agentfly_envs.judge.client import JudgeClient, JudgeUnavailableError
from agentfly_envs.judge.prompts import (
    EPISODE_FIELDS,
    GROUP_FIELDS,
    GROUP_TEMPLATE,
    JUDGE_TEMPLATE,
    RUBRIC_TEMPLATE,
    JudgeConfigError,
    JudgedEpisode,
    checked_template,
    render_group,
)
from agentfly_envs.judge.rubric import Criterion, RubricSpec, load_rubric, rubric_text

SCALE = 10
"""The judge scores on 0..SCALE (integers); a reward is the score divided by it."""
TOKENS_PER_CHAR = 4
"""Most tokens one character can take (a byte-level BPE writes a 4-byte character as up to 4 tokens)."""
MIN_REASONING_CHARS = 16
"""Shortest reasoning room the judge's ``max_tokens`` must leave, in characters."""
SCORE = "(" + "|".join(str(n) for n in range(SCALE, -1, -1)) + ")"
"""An integer score of 0..SCALE, as a regular expression."""


@dataclass(frozen=True)
class Verdict:
    """The judge's verdict on one episode.

    Attributes:
        score: The reward, in [0, 1].
        components: Its parts, named ``judge/<part>`` (in [0, 1]): ``judge/score``, each rubric criterion, or
            ``judge/rank`` (the group rank's share: 1 the best answer, 0 the worst).
        reasoning: What the judge wrote of its grade.
    """

    score: float
    components: dict[str, float] = field(default_factory=dict)
    reasoning: str = ""


def reasoning_pattern(max_tokens: int, overhead: int) -> str:
    r"""The regular expression of the judge's ``"reasoning":"..."`` member: a JSON string without escapes or control
    characters, short enough that the whole answer fits in ``max_tokens`` tokens however its characters tokenise
    (``overhead`` tokens are kept for the rest of the JSON), so the answer is never cut.

    Raises:
        JudgeConfigError: ``max_tokens`` leaves less than :data:`MIN_REASONING_CHARS` characters.

    Example:
        >>> print(reasoning_pattern(1024, 40))
        "reasoning":"[^"\\\x00-\x1f]{0,246}"
    """
    chars = (max_tokens - overhead) // TOKENS_PER_CHAR
    if chars < MIN_REASONING_CHARS:
        least = overhead + MIN_REASONING_CHARS * TOKENS_PER_CHAR
        raise JudgeConfigError(
            f"reward.judge.max_tokens={max_tokens} leaves the judge no room to reason; give it at least {least}"
        )
    return r'"reasoning":"[^"\\\x00-\x1f]{0,' + str(chars) + r'}"'


def _object(*members: str) -> str:
    """The regular expression of a JSON object with ``members`` (each a member's expression), in order, no spaces."""
    return r"\{" + ",".join(members) + r"\}"


class Judge(ABC):
    """One way of judging; :meth:`judge_group` scores the episodes of one task's group."""

    kind: ClassVar[str]
    fields: ClassVar[tuple[str, ...]] = EPISODE_FIELDS
    default_template: ClassVar[str]

    def __init__(self, client: JudgeClient, template: str | None = None) -> None:
        self.client = client
        self.template = checked_template(template or self.default_template, self.fields, "reward.judge.template")

    @abstractmethod
    async def judge_group(self, episodes: Sequence[JudgedEpisode]) -> list[Verdict]:
        """One verdict per episode, in order.

        Raises:
            JudgeUnavailableError: the judge stayed down (or its answer lacked a field the schema asked for).
        """


class EpisodeJudge(Judge):
    """``judge``: each answer scored alone, 0 to 10."""

    kind = "judge"
    default_template = JUDGE_TEMPLATE

    def __init__(self, client: JudgeClient, template: str | None = None) -> None:
        super().__init__(client, template)
        self.pattern = _object(reasoning_pattern(client.settings.max_tokens, 40), f'"score":{SCORE}')
        """The answer's JSON as a regular expression: ``{"reasoning":"...","score":N}``."""

    async def judge_group(self, episodes: Sequence[JudgedEpisode]) -> list[Verdict]:
        return list(await asyncio.gather(*(self._judge(episode) for episode in episodes)))

    async def _judge(self, episode: JudgedEpisode) -> Verdict:
        answer = await self.client.ask(self.template.format(**vars(episode)), self.pattern)
        score = _scaled(answer, "score")
        return Verdict(score, {"judge/score": score}, str(answer.get("reasoning", "")))


class RubricJudge(Judge):
    """``rubric``: each criterion scored 0 to 10; the reward is their weighted mean."""

    kind = "rubric"
    default_template = RUBRIC_TEMPLATE

    def __init__(self, client: JudgeClient, template: str | None = None, rubric: RubricSpec | None = None) -> None:
        super().__init__(client, template)
        if rubric is None:
            raise JudgeConfigError(
                "reward_name=rubric needs reward.judge.rubric: a list of {name, description, weight}, a .yaml file "
                "of one, or a registered rubric (helpful_correct)"
            )
        self.criteria: tuple[Criterion, ...] = load_rubric(rubric)
        overhead = 40 + sum(len(criterion.name) + 8 for criterion in self.criteria)
        scores = _object(*(f'"{criterion.name}":{SCORE}' for criterion in self.criteria))
        self.pattern = _object(reasoning_pattern(client.settings.max_tokens, overhead), f'"scores":{scores}')
        """The answer's JSON as a regular expression: ``{"reasoning":"...","scores":{"<criterion>":N,...}}``."""

    async def judge_group(self, episodes: Sequence[JudgedEpisode]) -> list[Verdict]:
        return list(await asyncio.gather(*(self._judge(episode) for episode in episodes)))

    async def _judge(self, episode: JudgedEpisode) -> Verdict:
        prompt = f"{self.template.format(**vars(episode))}\n\n{rubric_text(self.criteria)}"
        answer = await self.client.ask(prompt, self.pattern)
        scores = answer.get("scores")
        if not isinstance(scores, Mapping):
            raise JudgeUnavailableError(f"the judge's answer lacks its scores: {answer!r:.120}")
        parts = {criterion.name: _scaled(scores, criterion.name) for criterion in self.criteria}
        total = sum(criterion.weight for criterion in self.criteria)
        score = sum(criterion.weight * parts[criterion.name] for criterion in self.criteria) / total
        components = {"judge/score": score} | {f"judge/{name}": value for name, value in parts.items()}
        return Verdict(score, components, str(answer.get("reasoning", "")))


class GroupJudge(Judge):
    """``group_rank``: the group's answers shown together, ranked from best to worst in one call (RULER-style).

    The judge lists the answers' numbers from best to worst; the first mention of a number places it, and answers it
    left out follow in their order. An answer's reward is its place's share, ``(n - 1 - place) / (n - 1)``: 1 for the
    best, 0 for the worst, so a group's rewards are always distinct. A group of one (validation plays each task once)
    has nothing to be ranked against: :class:`EpisodeJudge` scores it alone, with its default template.
    """

    kind = "group_rank"
    fields = GROUP_FIELDS
    default_template = GROUP_TEMPLATE

    def __init__(self, client: JudgeClient, template: str | None = None) -> None:
        super().__init__(client, template)
        self.alone = EpisodeJudge(client)

    async def judge_group(self, episodes: Sequence[JudgedEpisode]) -> list[Verdict]:
        count = len(episodes)
        if count == 1:
            return await self.alone.judge_group(episodes)
        number = "(" + "|".join(str(n) for n in range(count, 0, -1)) + ")"
        reasoning = reasoning_pattern(self.client.settings.max_tokens, 40 + 4 * count)
        pattern = _object(reasoning, rf'"ranking":\[{number}(,{number}){{{count - 1}}}\]')
        answer = await self.client.ask(render_group(self.template, episodes), pattern)
        ranking = answer.get("ranking")
        if not isinstance(ranking, list):
            raise JudgeUnavailableError(f"the judge's answer lacks its ranking: {answer!r:.120}")
        order = list(dict.fromkeys(n - 1 for n in ranking if isinstance(n, int) and 1 <= n <= count))
        order += [n for n in range(count) if n not in order]
        reasoning = str(answer.get("reasoning", ""))
        verdicts = [Verdict(0.0)] * count
        for place, index in enumerate(order):
            share = (count - 1 - place) / (count - 1)
            verdicts[index] = Verdict(share, {"judge/rank": share}, reasoning)
        return verdicts


JUDGES: dict[str, type[Judge]] = {judge.kind: judge for judge in (EpisodeJudge, RubricJudge, GroupJudge)}
"""The judge rewards by ``agent.reward_name``."""


def make_judge(kind: str, client: JudgeClient, template: str | None = None, rubric: RubricSpec | None = None) -> Judge:
    """The judge ``kind`` (a key of :data:`JUDGES`) over ``client``.

    Raises:
        JudgeConfigError: a template naming an unknown field, a malformed or missing rubric, a rubric given to
            another kind (one line).
    """
    if kind == RubricJudge.kind:
        return RubricJudge(client, template, rubric)
    if rubric is not None:
        raise JudgeConfigError(f"reward.judge.rubric is read by reward_name=rubric only, not {kind}")
    return JUDGES[kind](client, template)


def _scaled(answer: Mapping[str, Any], key: str) -> float:
    """``answer[key]``, an integer score of 0..SCALE, as a share in [0, 1] (clamped)."""
    value = answer.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise JudgeUnavailableError(f"the judge's answer lacks the score {key!r}: {answer!r:.120}")
    return min(max(float(value) / SCALE, 0.0), 1.0)
