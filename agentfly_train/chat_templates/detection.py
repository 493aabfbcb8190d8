"""What a tokenizer's chat template is and can do: which of TRL's templates it is, whether it renders tools, how its
tool calls are read, and TRL's training variant of it. Facts only: :mod:`.checks` decides what a run may use."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from agentfly_train.chat_templates.families import FAMILIES, Family, detect_family, trl_template


@dataclass(frozen=True)
class TemplateMatch:
    """Which of TRL's chat templates the tokenizer's is (both ``None``: one of no family TRL knows).

    Attributes:
        family: Its model family.
        trl_name: TRL's template it renders as, e.g. ``qwen3``.
    """

    family: Family | None = None
    trl_name: str | None = None

    @property
    def label(self) -> str:
        """The template in words, for messages and the codec's description."""
        if self.family is None:
            return "a chat template of no family TRL knows"
        return f"the {self.family.name} chat template (TRL's {self.trl_name})"


def match_template(tokenizer: Any) -> TemplateMatch:
    """Which of TRL's templates the tokenizer's chat template (its ``default`` one, where it has several) is."""
    template = tokenizer.chat_template
    template = template["default"] if isinstance(template, dict) else template
    found = detect_family(tokenizer, template)
    return TemplateMatch(*found) if found else TemplateMatch()


def renders_tools(tokenizer: Any, tools: list[dict[str, Any]], template: str | None = None) -> bool:
    """Whether the chat template (``template``, else the tokenizer's) shows ``tools`` in a prompt."""
    messages = [{"role": "system", "content": "S."}, {"role": "user", "content": "U."}]

    def render(with_tools: list[dict[str, Any]] | None) -> str:
        return tokenizer.apply_chat_template(messages, tools=with_tools, chat_template=template, tokenize=False)

    return render(tools) != render(None)


def call_template(tokenizer: Any, family: Family | None) -> dict[str, Any] | None:
    """The response template that reads the model's own tool calls: the tokenizer's, else its family's in TRL, else
    ``None``."""
    return getattr(tokenizer, "response_template", None) or (family and trl_response_template(tokenizer, family))


def trl_response_template(tokenizer: Any, family: Family) -> dict[str, Any] | None:
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


def training_template(tokenizer: Any, match: TemplateMatch) -> str | None:
    """TRL's training variant of the template (:func:`trl.chat_template_utils.get_training_chat_template`), or
    ``None`` where TRL has none."""
    from trl.chat_template_utils import get_training_chat_template

    if match.trl_name is None:
        return None
    holder = copy.copy(tokenizer)
    holder.chat_template = trl_template(match.trl_name)
    try:
        return get_training_chat_template(holder)
    except ValueError:
        return None


def tool_templates(tokenizer: Any) -> str:
    """TRL's newest template of each family whose tool calls TRL reads and whose templates serve rollouts."""
    names = [
        family.templates[-1]
        for _, family in FAMILIES.items()
        if family.rollouts and trl_response_template(tokenizer, family)
    ]
    return ", ".join(names)
