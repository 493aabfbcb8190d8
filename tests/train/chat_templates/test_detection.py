"""What a chat template is and can do, on small tokenizers built here (no network)."""

from __future__ import annotations

from agentfly_train.chat_templates.detection import (
    TemplateMatch,
    call_template,
    match_template,
    renders_tools,
    training_template,
)
from tests.train.chat_templates.test_families import TOOLS


def test_a_family_template_is_matched_and_named(qwen3):
    match = match_template(qwen3)
    assert (match.family.name, match.trl_name) == ("qwen3", "qwen3")
    assert match.label == "the qwen3 chat template (TRL's qwen3)"


def test_a_template_of_no_family_matches_nothing(plain):
    assert match_template(plain) == TemplateMatch()
    assert TemplateMatch().label == "a chat template of no family TRL knows"


def test_whether_the_template_renders_tools(qwen3, plain):
    assert renders_tools(qwen3, TOOLS)
    assert not renders_tools(plain, TOOLS)
    assert renders_tools(plain, TOOLS, template=qwen3.chat_template)  # another template, same tokenizer


def test_the_call_template_is_the_tokenizers_own_else_the_familys(qwen3, plain):
    family = match_template(qwen3).family
    assert "tool_calls" in call_template(qwen3, family)["fields"]
    assert call_template(plain, None) is None
    own = {"fields": {"tool_calls": {}}}
    plain.response_template = own
    try:
        assert call_template(plain, None) is own and call_template(plain, family) is own
    finally:
        del plain.response_template


def test_trl_has_a_training_variant_only_of_templates_it_knows(qwen3, plain):
    assert training_template(plain, TemplateMatch()) is None
    assert training_template(qwen3, match_template(qwen3))
