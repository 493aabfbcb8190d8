"""What the judge reads: an episode as text, and the prompt templates that present it.

A template is a Python format string whose fields name parts of the judged episode: ``{task}`` (the user's opening
message), ``{answer}`` (the agent's last message), ``{trajectory}`` (the conversation after the system prompt, one
``role: text`` block per message), ``{reference}`` (the task's reference answer, ``""`` without one) and, in a group
ranking template, ``{answers}`` (the group's answers, numbered from 1) and ``{count}``. Literal braces are doubled.
"""

from __future__ import annotations

import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentfly_envs.errors import AgentflyError

EPISODE_FIELDS = ("task", "answer", "trajectory", "reference")
"""The fields a template for one episode may name."""
GROUP_FIELDS = ("task", "reference", "answers", "count")
"""The fields a group ranking template may name."""
REFERENCE_FIELDS = ("answer", "answers", "ground_truth", "solution", "target")
"""A task row's fields read as its reference answer, first found first (those of the generic task source)."""

_EPISODE = """Task:
{task}

Reference answer (may be empty):
{reference}

The assistant's answer:
{answer}

"""
JUDGE_TEMPLATE = f"""You grade an AI assistant's answer to a task.

{_EPISODE}Explain your grade in one or two sentences, then score the answer from 0 (wrong or useless) to 10 (correct \
and complete). Reply with JSON."""
RUBRIC_TEMPLATE = f"""You grade an AI assistant's answer to a task against each criterion of a rubric.

{_EPISODE}Explain your grades in one or two sentences, then score each criterion from 0 (not met) to 10 (fully met). \
Reply with JSON."""
GROUP_TEMPLATE = """You compare {count} answers of AI assistants to one task and score each against the others.

Task:
{task}

Reference answer (may be empty):
{reference}

The answers:
{answers}

Explain your ranking in one or two sentences, then give each answer, in order, a score from 0 (worst) to 10 \
(best); better answers get higher scores. Reply with JSON."""


class JudgeConfigError(AgentflyError, ValueError):
    """A judge's template or rubric is malformed (the message is one line saying what to change)."""


@dataclass(frozen=True)
class JudgedEpisode:
    """One episode as the judge reads it.

    Attributes:
        task: The user's opening message.
        answer: The agent's last message.
        trajectory: The conversation after the system prompt, one ``role: text`` block per message.
        reference: The task's reference answer, ``""`` without one.
    """

    task: str
    answer: str
    trajectory: str
    reference: str = ""

    @classmethod
    def from_messages(cls, messages: Sequence[Mapping[str, Any]], row: Mapping[str, Any]) -> JudgedEpisode:
        """The episode of chat ``messages`` (system, user, assistant and tool messages) on the task ``row``.

        Example:
            >>> messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"},
            ...             {"role": "assistant", "content": "4"}]
            >>> JudgedEpisode.from_messages(messages, {"question": "2+2?", "answer": "4"})
            JudgedEpisode(task='2+2?', answer='4', trajectory='user: 2+2?\\n\\nassistant: 4', reference='4')
        """
        shown = [m for m in messages if m.get("role") != "system"]
        task = next((_text(m) for m in shown if m.get("role") == "user"), "")
        answer = next((_text(m) for m in reversed(shown) if m.get("role") == "assistant"), "")
        trajectory = "\n\n".join(f"{m.get('role')}: {_text(m)}" for m in shown)
        reference = next((row[key] for key in REFERENCE_FIELDS if row.get(key) is not None), "")
        return cls(task, answer, trajectory, reference if isinstance(reference, str) else str(reference))


def _text(message: Mapping[str, Any]) -> str:
    """A message's text (the text parts of a multi-part content; an image part is left out)."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    return "\n".join(part.get("text", "") for part in content or [] if part.get("type") == "text")


def checked_template(template: str, allowed: Sequence[str], key: str) -> str:
    """``template`` once its fields are known to be among ``allowed``.

    Raises:
        JudgeConfigError: it names another field, or is not a format string (one line naming ``key``).

    Example:
        >>> checked_template("Grade {answer} to {question}", EPISODE_FIELDS, "reward.judge.template")
        Traceback (most recent call last):
        ...
        agentfly_envs.judge.prompts.JudgeConfigError: reward.judge.template names the unknown field {question}; \
a template may name {task}, {answer}, {trajectory}, {reference} (double a literal brace: {{ }})
    """
    try:
        fields = [field for _, field, _, _ in string.Formatter().parse(template) if field is not None]
    except ValueError as error:
        raise JudgeConfigError(f"{key} is not a format string ({error}); double a literal brace: {{{{ }}}}") from None
    known = ", ".join(f"{{{name}}}" for name in allowed)
    for field in fields:
        if field not in allowed:
            raise JudgeConfigError(
                f"{key} names the unknown field {{{field}}}; a template may name {known} (double a literal brace: "
                "{{ }})"
            )
    return template


def render_group(template: str, episodes: Sequence[JudgedEpisode]) -> str:
    """The group ranking prompt for ``episodes`` (one task's): their answers numbered from 1."""
    answers = "\n\n".join(f"Answer {n}:\n{episode.answer}" for n, episode in enumerate(episodes, 1))
    first = episodes[0]
    return template.format(task=first.task, reference=first.reference, answers=answers, count=len(episodes))
