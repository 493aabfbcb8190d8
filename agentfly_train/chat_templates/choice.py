"""The chat codec of a run: the chat template checked against an episode of the env, its family's tool-call reader,
and TRL's training variant of the template where the template rewrites past turns.

:func:`choose_codec` composes three parts: :mod:`.detection` (what the template is and can do), :mod:`.checks`
(whether it can serve the run's ``agent.*`` settings) and the description below (what the run's log says of it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentfly_envs.parsers import Parser
from agentfly_train.chat_templates.checks import (
    Step,
    check_reads_calls,
    check_reasoning_to_drop,
    check_renders_tools,
    checked_codec,
)
from agentfly_train.chat_templates.detection import TemplateMatch, call_template, match_template
from agentfly_train.rollout.codec import ChatCodec
from agentfly_train.vision import ImageInputs


def choose_codec(
    tokenizer: Any,
    tools: list[dict[str, Any]] | None,
    parser: Parser,
    template_kwargs: Mapping[str, Any],
    opening: Sequence[Mapping[str, Any]],
    steps: Sequence[Step],
    drop_reasoning: bool = False,
    images: ImageInputs | None = None,
) -> ChatCodec:
    """The codec for the tokenizer's chat template (``agent.template`` applied) and the env's format, checked on an
    episode: the template renders the tools where the format needs them, reads back the calls it writes, and renders
    the episode turn by turn as it renders it whole. A template that fails the last check is replaced by TRL's
    training variant of its family, when TRL has one (``codec.note`` says so).

    Args:
        tokenizer: The policy's tokenizer.
        tools: The env's tool schemas (``None`` or empty: no tools).
        parser: The env's parser (``reads_text=False``: the codec reads the family's own tool calls).
        template_kwargs: ``agent.chat_template_kwargs``.
        opening: An episode's opening messages.
        steps: Its actions and the env's messages after each (a golden episode).
        drop_reasoning: ``agent.past_reasoning=drop``: past turns' reasoning leaves the next turns' prompts.
        images: A vision-language policy's image inputs (``None``: a text policy).

    Returns:
        The codec, with ``description`` (one line: template, tool-call format, ``round trip ok``) and ``note``.

    Raises:
        ConfigError: one line naming ``agent.template`` or ``agent.agent_type`` and what to set instead.
    """
    template_tools = tools if bool(tools) and parser.instructions(tools or []) is None else None
    match = match_template(tokenizer)
    family = match.family
    if template_tools:  # the format leaves the tools' schemas to the template
        check_renders_tools(tokenizer, match, template_tools)
    response_template = None
    if not parser.reads_text:
        response_template = call_template(tokenizer, family)
        check_reads_calls(tokenizer, match, response_template)
    if drop_reasoning:
        check_reasoning_to_drop(match)
    options = {
        "template_kwargs": template_kwargs,
        "response_template": response_template,
        "tool_results": family.tool_results if family else None,
        "end_of_turn": family.end_of_turn if family else (),
        "reasoning_end": family.reasoning_end if drop_reasoning and family else None,
        "images": images,
    }

    def make_codec(chat_template: str | None) -> ChatCodec:
        return ChatCodec(tokenizer, template_tools, chat_template, **options)

    calls = call_format(match, parser, response_template)
    codec = checked_codec(make_codec, tokenizer, match, parser, opening, steps)
    codec.note = None if codec.chat_template is None else variant_note(match)
    variant = " (TRL's training variant)" if codec.chat_template else ""
    codec.description = f"{match.label}{variant}; tool calls: {calls}; round trip ok"
    return codec


def variant_note(match: TemplateMatch) -> str:
    """The note of a run whose rollouts use TRL's training variant of its template."""
    return (
        f"agent.template: {match.label} renders past turns differently once later turns follow, so rollouts "
        "and the warm start use TRL's training variant of it, which keeps them"
    )


def call_format(match: TemplateMatch, parser: Parser, response_template: str | None) -> str:
    """The tool-call format of a codec's description: the template family's own calls (read with
    ``response_template``) or the parser's."""
    if response_template:
        return match.family.tool_calls if match.family else "read with the tokenizer's response template"
    return f"the {parser.name} parser's format"
