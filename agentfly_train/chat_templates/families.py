"""Model families: which of TRL's chat templates a tokenizer's template is, and what follows from it.

A family is recognised by its chat template: the text of one of TRL's copies of the family's templates, or a
template that renders a set of probe conversations (tools, tool calls, tool results, reasoning) exactly as one of
those copies does (a model repository's template often differs from TRL's copy in ways that do not change the
text, e.g. Qwen3's own template and TRL's ``qwen3.jinja``). The family then gives TRL's response template (how
to read the model's tool calls, :func:`trl.chat_template_utils.add_response_schema`), TRL's prefix-preserving
training template (:func:`trl.chat_template_utils.get_training_chat_template`), and, for templates without a
``tool`` role, how the family expects tool results.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentfly_envs.registry import Registry


@dataclass(frozen=True)
class Family:
    """A model family, as its chat templates name it.

    Attributes:
        name: The family, e.g. ``qwen3``.
        marker: Text each of the family's templates holds (a special token), which rules the family out cheaply.
        templates: TRL's chat templates of the family (``trl/chat_templates/<name>.jinja``), newest revision last.
        tool_calls: How the family writes a tool call, for messages and docs (e.g. ``<tool_call>`` JSON).
        reasoning: How the family writes its reasoning, or ``""`` if it has none.
        tool_results: Where a template without a ``tool`` role puts a tool result: a format with ``{content}``,
            sent as a user turn (several results of one turn are one user turn); ``None`` when the template
            renders role ``tool`` itself.
        end_of_turn: Tokens besides the tokenizer's EOS that end an assistant turn (gpt-oss ends a tool call with
            ``<|call|>``).
        rollouts: Whether its templates can serve token-in/token-out rollouts (``False``: the start-up check refuses
            them, e.g. Gemma 4 writes tool results inside the model's turn;
            ``tests/train/chat_templates/test_families.py``).
        reasoning_end: The text that ends a turn's reasoning as the model samples it (Qwen3's ``</think>``), which
            ``agent.past_reasoning=drop`` cuts at; ``""`` for a family without reasoning.
    """

    name: str
    marker: str
    templates: tuple[str, ...]
    tool_calls: str
    reasoning: str = ""
    tool_results: str | None = None
    end_of_turn: tuple[str, ...] = ()
    rollouts: bool = True
    reasoning_end: str = ""


FAMILIES: Registry[Family] = Registry("model family", where="agentfly_train/chat_templates/families.py")
for _family in (
    Family(
        "qwen3",
        "<|im_start|>",
        ("qwen2_5", "qwen3", "qwen3_instruct_2507"),
        "<tool_call> JSON",
        "<think> ... </think>",
        reasoning_end="</think>",
    ),
    Family(
        "qwen3_5",
        "<function=",
        ("qwen3_5_nothink", "qwen3_5_think", "qwen3_6", "qwen3_8"),
        "<tool_call><function=...> XML",
        "<think> ... </think>",
        reasoning_end="</think>",
    ),
    Family(
        "llama3", "<|eot_id|>", ("llama3_1", "llama3_2"), 'bare {"name": ..., "parameters": ...} JSON, one per turn'
    ),
    Family(
        "gptoss",
        "<|channel|>",
        ("gptoss",),
        "to=functions.NAME commentary channel",
        "analysis channel",
        end_of_turn=("<|call|>",),
        reasoning_end="<|end|><|start|>assistant",
    ),
    Family(
        "glm4moe",
        "<arg_key>",
        ("glm4moe",),
        "<tool_call> <arg_key>/<arg_value>",
        "<think> ... </think>",
        rollouts=False,
    ),
    Family(
        "nemotron_3",
        "<function=",
        ("nemotron_3_nano", "nemotron_3_super", "nemotron_3_ultra", "nemotron_3_5_lightning"),
        "<tool_call><function=...> XML",
        "<think> ... </think>",
        rollouts=False,
    ),
    Family(
        "lfm2_5",
        "<|tool_call_start|>",
        ("lfm2_v2", "lfm2_2_5", "lfm2_2_5_v2"),
        "<|tool_call_start|>[f(x=...)] Python calls",
        "<think>",
        reasoning_end="</think>",
    ),
    Family(
        "gemma4",
        "<|turn>",
        ("gemma4", "gemma4_v2", "gemma4_v3", "gemma4_v4", "gemma4_v5"),
        "<|tool_call>call:NAME{...}",
        "<|channel>thought",
        rollouts=False,
    ),
    Family("deepseek_v3", "<｜Assistant｜>", ("deepseekv3",), "none readable (no response template)"),
    Family(
        "deepseek_r1_distill",
        "<｜Assistant｜>",
        ("deepseek_r1_distill",),
        "none (the template drops them)",
        "<think> ... </think>",
    ),
    Family(
        "gemma3",
        "<start_of_turn>",
        ("gemma3",),
        "none (no tools in the template)",
        tool_results="```tool_output\n{content}\n```",
    ),
):
    FAMILIES.add(_family.name, _family)


def trl_template(name: str) -> str:
    """The text of TRL's chat template ``name`` (``trl/chat_templates/<name>.jinja``)."""
    import trl

    return (Path(trl.__file__).parent / "chat_templates" / f"{name}.jinja").read_text(encoding="utf-8")


_PROBE_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Looks a word up.",
            "parameters": {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]},
        },
    }
]
_PROBE_CALL = {"type": "function", "function": {"name": "lookup", "arguments": {"word": "probe"}}}
_PROBES: tuple[tuple[list[dict[str, Any]], bool], ...] = (
    ([{"role": "system", "content": "S."}, {"role": "user", "content": "U."}], True),
    (
        [
            {"role": "system", "content": "S."},
            {"role": "user", "content": "U."},
            {"role": "assistant", "content": "", "tool_calls": [_PROBE_CALL]},
            {"role": "tool", "name": "lookup", "content": "R."},
            {"role": "assistant", "content": "A.", "reasoning_content": "T.", "thinking": "T."},
        ],
        False,
    ),
)


def _renderings(tokenizer: Any, template: str) -> tuple[str, ...]:
    """What ``template`` makes of the probe conversations (an error's type where it refuses one)."""
    from jinja2 import TemplateError

    out = []
    for messages, generation_prompt in _PROBES:
        try:
            out.append(
                tokenizer.apply_chat_template(
                    messages,
                    tools=_PROBE_TOOLS,
                    chat_template=template,
                    add_generation_prompt=generation_prompt,
                    tokenize=False,
                )
            )
        except (TemplateError, TypeError, ValueError) as error:  # compared by how the template refuses the probe
            out.append(f"<{type(error).__name__}>")
    return tuple(out)


def detect_family(tokenizer: Any, template: str) -> tuple[Family, str] | None:
    """The family of ``template`` and the TRL template it is, or ``None`` for a template no family has.

    Args:
        tokenizer: The tokenizer (its special tokens take part in the rendering).
        template: The chat template's text.
    """
    for _, family in FAMILIES.items():
        for name in family.templates:
            if trl_template(name) == template:
                return family, name
    own = _renderings(tokenizer, template)
    for _, family in FAMILIES.items():
        for name in family.templates if family.marker in template else ():
            if _renderings(tokenizer, trl_template(name)) == own:
                return family, name
    return None
