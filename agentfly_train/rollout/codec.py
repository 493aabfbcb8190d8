"""Token ids of the chat turns around the policy's samples, from the tokenizer's chat template."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


class TemplateError(ValueError):
    """The chat template cannot serve multi-turn token-in/token-out rollouts."""


class ChatCodec:
    """Token ids of the chat turns around the policy's samples, computed from the chat template.

    Args:
        tokenizer: A tokenizer with a chat template.
        tools: JSON schemas rendered into the prompt (``None`` for formats that describe tools in text).
        chat_template: A template overriding the tokenizer's own.
    """

    def __init__(self, tokenizer: Any, tools: list[dict[str, Any]] | None, chat_template: str | None = None) -> None:
        self.tokenizer = tokenizer
        self.tools = tools
        self.chat_template = chat_template
        self.eos_token_id: int = tokenizer.eos_token_id

    def render(self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool) -> str:
        """The template's text for ``messages``."""
        return self.tokenizer.apply_chat_template(
            list(messages),
            tools=self.tools,
            chat_template=self.chat_template,
            add_generation_prompt=add_generation_prompt,
            tokenize=False,
        )

    def encode(self, text: str) -> list[int]:
        """Token ids of template text (no special tokens added)."""
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def decode(self, token_ids: Sequence[int]) -> str:
        """The assistant text of sampled tokens, end-of-turn tokens dropped."""
        return self.tokenizer.decode(token_ids, skip_special_tokens=True)

    def prompt_ids(self, messages: Sequence[Mapping[str, Any]]) -> list[int]:
        """The opening messages rendered and followed by the assistant header."""
        return self.encode(self.render(messages, add_generation_prompt=True))

    def observation_ids(self, env_messages: Sequence[Mapping[str, Any]], closed_turn: bool) -> list[int]:
        """Tokens that follow a sampled turn: its end-of-turn (if the model did not sample one), the env's
        messages as the template renders them, and the next assistant header.

        Args:
            env_messages: The env's new messages (role ``tool``).
            closed_turn: Whether the sampled turn ended with the EOS token.
        """
        before = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]
        prefix = self.render(before, add_generation_prompt=False)
        full = self.render([*before, *env_messages], add_generation_prompt=True)
        eos = self.tokenizer.eos_token
        cut = prefix.rindex(eos) + len(eos) if eos and eos in prefix else len(prefix)
        if full[:cut] != prefix[:cut]:
            raise TemplateError(
                "the chat template is not prefix-preserving: it renders an earlier assistant turn differently "
                "once a tool turn follows; use a template that keeps past turns unchanged (agent.template=...)"
            )
        ids = self.encode(full[cut:])
        return ids if closed_turn else [self.eos_token_id, *ids]

    def check_prefix_preserving(self, messages: Sequence[Mapping[str, Any]], turns: Sequence[str]) -> None:
        """Checks that prompt + sampled turns + observation turns equals the template's rendering of the
        whole conversation, which token-in/token-out rollouts rely on.

        Args:
            messages: Opening messages of an episode.
            turns: Alternating assistant texts and tool outputs, e.g. a golden episode.

        Raises:
            TemplateError: the template rewrites earlier turns (e.g. drops past reasoning), with where.
        """
        conversation = list(messages)
        ids = self.prompt_ids(conversation)
        for index, text in enumerate(turns):
            if index % 2 == 0:
                conversation.append({"role": "assistant", "content": text})
                ids += [*self.encode(text), self.eos_token_id]
            else:
                tool_message = {"role": "tool", "name": "tool", "content": text}
                conversation.append(tool_message)
                ids += self.observation_ids([tool_message], closed_turn=True)
        expected = self.render(conversation, add_generation_prompt=len(turns) % 2 == 0)
        got = self.tokenizer.decode(ids)
        if not expected.startswith(got):
            position = next((i for i, (a, b) in enumerate(zip(expected, got, strict=False)) if a != b), 0)
            raise TemplateError(
                "the chat template is not prefix-preserving: rendering the whole conversation differs from the "
                f"turns rendered one after another at character {position}: template has "
                f"{expected[position : position + 60]!r}, incremental rendering has {got[position : position + 60]!r}. "
                "Use a template that renders past turns unchanged (agent.template=...)."
            )
