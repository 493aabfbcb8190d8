"""What the run's log says of the codec chosen (the choice itself: test_families.py)."""

from __future__ import annotations

from types import SimpleNamespace

from agentfly_train.chat_templates.choice import describe_codec, variant_note
from agentfly_train.chat_templates.detection import TemplateMatch
from agentfly_train.chat_templates.families import FAMILIES

QWEN3 = TemplateMatch(FAMILIES.get("qwen3"), "qwen3")
PARSER = SimpleNamespace(name="hermes")


def codec(response_template=None, chat_template=None):
    return SimpleNamespace(response_template=response_template, chat_template=chat_template)


def test_the_description_names_template_variant_and_call_format():
    assert describe_codec(QWEN3, PARSER, codec()) == (
        "the qwen3 chat template (TRL's qwen3); tool calls: the hermes parser's format; round trip ok"
    )
    assert describe_codec(QWEN3, PARSER, codec({"fields": {}}, "{{ variant }}")) == (
        "the qwen3 chat template (TRL's qwen3) (TRL's training variant); tool calls: <tool_call> JSON; round trip ok"
    )
    assert describe_codec(TemplateMatch(), PARSER, codec({"fields": {}})) == (
        "a chat template of no family TRL knows; tool calls: read with the tokenizer's response template; round trip ok"
    )


def test_the_variant_note_names_the_template_and_why():
    assert variant_note(QWEN3).startswith("agent.template: the qwen3 chat template (TRL's qwen3) renders past turns")
