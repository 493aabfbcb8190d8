"""Whether a chat template can serve a run's ``agent.*`` settings: each check raises one :class:`ConfigError` line
naming ``agent.template``, ``agent.agent_type`` or ``agent.past_reasoning`` and what to set instead."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agentfly_envs.parsers import Action, Parser
from agentfly_train.chat_templates.detection import TemplateMatch, renders_tools, tool_templates, training_template
from agentfly_train.chat_templates.families import FAMILIES
from agentfly_train.config.errors import ConfigError
from agentfly_train.rollout.codec import ChatCodec, RoundTripError, TemplateError

Step = tuple[Action, Sequence[Mapping[str, Any]]]
"""An assistant action and the env's messages after it (none after the last)."""


def check_renders_tools(tokenizer: Any, match: TemplateMatch, tools: list[dict[str, Any]]) -> None:
    """The template must show the tools' schemas where the env's format leaves them to it."""
    if not renders_tools(tokenizer, tools):
        raise ConfigError(
            f"agent.template: {match.label} does not render tools, so the model would never "
            f"see their schemas; set agent.agent_type=react or code (the system prompt describes the tools), or "
            f"agent.template to one that renders them ({tool_templates(tokenizer)})"
        )


def check_reads_calls(tokenizer: Any, match: TemplateMatch, response_template: Mapping[str, Any] | None) -> None:
    """``agent.agent_type=hf`` needs a response template that reads the family's own tool calls."""
    if not response_template:
        raise ConfigError(
            f"agent.agent_type=hf reads the model family's own tool-call format, but the template is "
            f"{match.label}, whose tool calls TRL cannot read; set agent.agent_type=hermes (<tool_call> JSON), "
            f"react or code, or agent.template to a family TRL reads ({tool_templates(tokenizer)})"
        )


def check_reasoning_to_drop(match: TemplateMatch) -> None:
    """``agent.past_reasoning=drop`` needs a family whose reasoning ends in a known text."""
    if not (match.family and match.family.reasoning_end):
        raise ConfigError(
            f"agent.past_reasoning=drop: {match.label} has no reasoning to drop (families that have: "
            f"{', '.join(name for name, known in FAMILIES.items() if known.reasoning_end and known.rollouts)}); "
            "set agent.past_reasoning=keep"
        )


def checked_codec(
    make_codec: Callable[[str | None], ChatCodec],
    tokenizer: Any,
    match: TemplateMatch,
    parser: Parser,
    opening: Sequence[Mapping[str, Any]],
    steps: Sequence[Step],
) -> ChatCodec:
    """The codec ``make_codec(None)`` builds, checked on an episode; where its template renders past turns
    differently once later turns follow, the codec of TRL's training variant of it, ``make_codec(variant)``, checked
    the same way.

    Args:
        make_codec: Builds the codec with a chat template in place of the tokenizer's (``None``: the tokenizer's).
        tokenizer: The policy's tokenizer.
        match: What the tokenizer's template is.
        parser: The env's parser, which reads back the calls the codec writes.
        opening: An episode's opening messages.
        steps: Its actions and the env's messages after each.
    """
    read_calls = _call_reader(parser)
    training = None  # the tokenizer's template first, then TRL's training variant of it
    while True:
        codec = make_codec(training)
        try:
            _check_episode(codec, opening, steps, read_calls)
            return codec
        except TemplateError as error:
            if training is not None:
                raise ConfigError(f"agent.template: {error} (TRL's training variant of {match.trl_name})") from None
            if isinstance(error, RoundTripError):
                raise ConfigError(f"agent.template: {error}{_metaspace_hint(tokenizer)}") from None
            training = training_template(tokenizer, match)
            if training is None:
                raise ConfigError(f"agent.template: {error}; TRL has no training variant of this template") from None


def _call_reader(parser: Parser) -> Callable[[Action], list[tuple[str, Any]]]:
    def read_calls(action: Action) -> list[tuple[str, Any]]:
        return [(call.name, call.arguments) for call in parser.parse(action).calls]

    return read_calls


def _check_episode(
    codec: ChatCodec, opening: Sequence[Mapping[str, Any]], steps: Sequence[Step], read_calls: Any
) -> None:
    """Renders and reads back the episode (:meth:`ChatCodec.check_episode`); a template that refuses its messages is
    a ``ConfigError``, one that renders it wrongly a :class:`TemplateError`."""
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
