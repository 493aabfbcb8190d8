"""The chat codec of a run: the chat template checked against an episode of the env, its family's tool-call reader,
and TRL's training variant of the template where the template rewrites past turns."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from agentfly_envs.parsers import Action, Parser
from agentfly_train.chat_templates.families import FAMILIES, Family, detect_family, trl_template
from agentfly_train.config import ConfigError
from agentfly_train.rollout.codec import ChatCodec, RoundTripError, TemplateError
from agentfly_train.vision import ImageInputs

Step = tuple[Action, Sequence[Mapping[str, Any]]]
"""An assistant action and the env's messages after it (none after the last)."""


def _renders_tools(tokenizer: Any, template: str | None, tools: list[dict[str, Any]]) -> bool:
    messages = [{"role": "system", "content": "S."}, {"role": "user", "content": "U."}]

    def render(with_tools: list[dict[str, Any]] | None) -> str:
        return tokenizer.apply_chat_template(messages, tools=with_tools, chat_template=template, tokenize=False)

    return render(tools) != render(None)


def _tool_templates(tokenizer: Any) -> str:
    """TRL's newest template of each family whose tool calls TRL reads and whose templates serve rollouts."""
    names = [
        family.templates[-1]
        for _, family in FAMILIES.items()
        if family.rollouts and _response_template(tokenizer, family)
    ]
    return ", ".join(names)


def _response_template(tokenizer: Any, family: Family) -> dict[str, Any] | None:
    """TRL's response template of the family (:func:`trl.chat_template_utils.add_response_schema`), or ``None``
    where it has none or one without tool calls."""
    from trl.chat_template_utils import add_response_schema

    holder = copy.copy(tokenizer)
    holder.chat_template = trl_template(family.templates[0])
    try:
        template = add_response_schema(holder).response_template
    except ValueError:
        return None
    return template if "tool_calls" in template.get("fields", {}) else None


def _label(found: tuple[Family, str] | None) -> str:
    return (
        f"the {found[0].name} chat template (TRL's {found[1]})" if found else "a chat template of no family TRL knows"
    )


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
    template = tokenizer.chat_template
    template = template["default"] if isinstance(template, dict) else template
    renders_tools = bool(tools) and parser.instructions(tools or []) is None
    found = detect_family(tokenizer, template)
    family = found[0] if found else None
    if renders_tools and not _renders_tools(tokenizer, None, tools or []):
        raise ConfigError(
            f"agent.template: {_label(found)} does not render tools, so the model would never "
            f"see their schemas; set agent.agent_type=react or code (the system prompt describes the tools), or "
            f"agent.template to one that renders them ({_tool_templates(tokenizer)})"
        )
    response_template = None
    if not parser.reads_text:
        response_template = getattr(tokenizer, "response_template", None) or (
            family and _response_template(tokenizer, family)
        )
        if not response_template:
            raise ConfigError(
                f"agent.agent_type=hf reads the model family's own tool-call format, but the template is "
                f"{_label(found)}, whose tool calls TRL cannot read; set agent.agent_type=hermes (<tool_call> JSON), "
                f"react or code, or agent.template to a family TRL reads ({_tool_templates(tokenizer)})"
            )
    if drop_reasoning and not (family and family.reasoning_end):
        raise ConfigError(
            f"agent.past_reasoning=drop: {_label(found)} has no reasoning to drop (families that have: "
            f"{', '.join(name for name, known in FAMILIES.items() if known.reasoning_end and known.rollouts)}); "
            "set agent.past_reasoning=keep"
        )
    options = {
        "template_kwargs": template_kwargs,
        "response_template": response_template,
        "tool_results": family.tool_results if family else None,
        "end_of_turn": family.end_of_turn if family else (),
        "reasoning_end": family.reasoning_end if drop_reasoning and family else None,
        "images": images,
    }
    read_calls = _call_reader(parser)
    codec = ChatCodec(tokenizer, tools if renders_tools else None, **options)
    try:
        _check(codec, opening, steps, read_calls)
        codec.note = None
    except RoundTripError as error:
        raise ConfigError(f"agent.template: {error}{_metaspace_hint(tokenizer)}") from None
    except TemplateError as error:
        training = _training_template(tokenizer, found)
        if training is None:
            raise ConfigError(f"agent.template: {error}; TRL has no training variant of this template") from None
        codec = ChatCodec(tokenizer, codec.tools, training, **options)
        try:
            _check(codec, opening, steps, read_calls)
        except TemplateError as again:
            raise ConfigError(f"agent.template: {again} (TRL's training variant of {found[1]})") from None
        codec.note = (
            f"agent.template: {_label(found)} renders past turns differently once later turns follow, so rollouts "
            "and the warm start use TRL's training variant of it, which keeps them"
        )
    if response_template:
        calls = family.tool_calls if family else "read with the tokenizer's response template"
    else:
        calls = f"the {parser.name} parser's format"
    variant = " (TRL's training variant)" if codec.chat_template else ""
    codec.description = f"{_label(found)}{variant}; tool calls: {calls}; round trip ok"
    return codec


def _metaspace_hint(tokenizer: Any) -> str:
    """Why a byte-level vocabulary loaded with a Metaspace pre-tokenizer loses its spaces, and the fix; ``""`` for
    another tokenizer."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or "Metaspace" not in str(backend.pre_tokenizer):
        return ""
    if not any(token.startswith("Ġ") for token in tokenizer.get_vocab()):
        return ""
    return (
        f" (its vocabulary is byte-level, but {type(tokenizer).__name__} splits text SentencePiece-style: transformers "
        "5 loads tokenizers labelled LlamaTokenizerFast so, e.g. DeepSeek V3's, transformers issue 45488; load the "
        'original tokenizer.json with "tokenizer_class": "PreTrainedTokenizerFast" in tokenizer_config.json)'
    )


def _call_reader(parser: Parser):
    def read_calls(action: Action) -> list[tuple[str, Any]]:
        return [(call.name, call.arguments) for call in parser.parse(action).calls]

    return read_calls


def _check(codec: ChatCodec, opening: Sequence[Mapping[str, Any]], steps: Sequence[Step], read_calls: Any) -> None:
    from jinja2 import TemplateError as JinjaError

    try:
        codec.check_episode(opening, steps, read_calls)
    except (JinjaError, TypeError) as error:  # the template refuses the episode's messages
        if codec.tool_results is None and any(env_messages for _, env_messages in steps):
            raise ConfigError(
                f"agent.template: the chat template cannot render this episode ({' '.join(str(error).split())}); "
                "if it has no tool role, it needs a family that says where tool results go "
                f"({', '.join(name for name, family in FAMILIES.items() if family.tool_results)})"
            ) from None
        raise ConfigError(f"agent.template: the chat template cannot render this episode: {error}") from None


def _training_template(tokenizer: Any, found: tuple[Family, str] | None) -> str | None:
    """TRL's training variant of the template (:func:`trl.chat_template_utils.get_training_chat_template`), or
    ``None`` where TRL has none."""
    from trl.chat_template_utils import get_training_chat_template

    if found is None:
        return None
    holder = copy.copy(tokenizer)
    holder.chat_template = trl_template(found[1])
    try:
        return get_training_chat_template(holder)
    except ValueError:
        return None
