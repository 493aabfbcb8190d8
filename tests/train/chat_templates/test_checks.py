"""The agent.* checks of a chat template: each refusal is one ConfigError naming the key and the fix."""

from __future__ import annotations

import pytest

from agentfly_envs.parsers import get_parser
from agentfly_train.chat_templates.checks import (
    check_reads_calls,
    check_reasoning_to_drop,
    check_renders_tools,
    checked_codec,
)
from agentfly_train.chat_templates.detection import TemplateMatch, match_template
from agentfly_train.config.errors import ConfigError
from agentfly_train.rollout.codec import RoundTripError, TemplateError
from tests.train.chat_templates.test_families import TOOLS

NO_FAMILY = TemplateMatch()


def test_tools_must_be_rendered_where_the_format_leaves_them_to_the_template(qwen3, plain):
    check_renders_tools(qwen3, match_template(qwen3), TOOLS)
    with pytest.raises(ConfigError, match=r"^agent\.template: a chat template of no family TRL knows does not render"):
        check_renders_tools(plain, NO_FAMILY, TOOLS)


def test_hf_calls_need_a_response_template(plain):
    check_reads_calls(plain, NO_FAMILY, {"fields": {"tool_calls": {}}})
    with pytest.raises(ConfigError, match=r"^agent\.agent_type=hf reads .* set agent\.agent_type=hermes"):
        check_reads_calls(plain, NO_FAMILY, None)


def test_dropping_reasoning_needs_a_family_with_reasoning(qwen3):
    check_reasoning_to_drop(match_template(qwen3))
    with pytest.raises(ConfigError, match=r"^agent\.past_reasoning=drop: .* set agent\.past_reasoning=keep$"):
        check_reasoning_to_drop(NO_FAMILY)


class StubCodec:
    """A codec whose episode check raises ``error`` (or passes)."""

    def __init__(self, chat_template, error=None):
        self.chat_template, self.error, self.tool_results = chat_template, error, None

    def check_episode(self, opening, steps, read_calls):
        if self.error:
            raise self.error


def test_a_codec_that_passes_is_returned_as_built(plain):
    built = []

    def make(template):
        built.append(StubCodec(template))
        return built[-1]

    assert checked_codec(make, plain, NO_FAMILY, get_parser("tool_calls"), [], []) is built[0]
    assert len(built) == 1 and built[0].chat_template is None


@pytest.mark.parametrize(
    ("error", "message"),
    [
        (RoundTripError("the call reads back differently"), "agent.template: the call reads back differently"),
        (TemplateError("not prefix-preserving"), "; TRL has no training variant of this template"),
    ],
)
def test_a_failed_episode_without_a_training_variant_is_one_config_error(plain, error, message):
    with pytest.raises(ConfigError) as raised:
        checked_codec(lambda template: StubCodec(template, error), plain, NO_FAMILY, get_parser("tool_calls"), [], [])
    assert str(raised.value).endswith(message) and str(raised.value).startswith("agent.template: ")
