"""What the run's log says of the codec chosen (the choice itself: test_families.py)."""

from __future__ import annotations

from types import SimpleNamespace

from agentfly_train.chat_templates.choice import call_format, variant_note
from agentfly_train.chat_templates.detection import TemplateMatch
from agentfly_train.chat_templates.families import FAMILIES

QWEN3 = TemplateMatch(FAMILIES.get("qwen3"), "qwen3")
PARSER = SimpleNamespace(name="hermes")


def test_the_call_format_is_the_familys_own_calls_or_the_parsers():
    assert call_format(QWEN3, PARSER, None) == "the hermes parser's format"
    assert call_format(QWEN3, PARSER, {"fields": {}}) == "<tool_call> JSON"
    assert call_format(TemplateMatch(), PARSER, {"fields": {}}) == "read with the tokenizer's response template"


def test_the_variant_note_names_the_template_and_why():
    assert variant_note(QWEN3).startswith("agent.template: the qwen3 chat template (TRL's qwen3) renders past turns")
