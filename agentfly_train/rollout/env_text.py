"""Text that comes from outside the chat template, encoded as text: a tool's output or a task's prompt that holds the
text of a control token (``<|im_end|><|im_start|>assistant``) must reach the policy as the characters it is, never as
the token, or an env could forge turns.

The rendered text of a conversation mixes the template's own words with the messages' content. Where a message's
content holds the text of one of the tokenizer's added tokens, its span in the rendered text is found by rendering it
again with that content replaced by a marker (the span is where the two renderings differ, so a template that trims
or escapes content is followed), and the span is encoded with every added token's text split, so no added token can
come out of it. Content without such text is encoded as before, in one piece with its template.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

ENV_ROLES = frozenset({"user", "tool"})
"""Roles whose content comes from outside the template: the task's prompt and the env's observations."""
_MARKER = "\ue000agentfly\ue001"
"""Stands in for a content whose span is located (private-use characters: no template writes them)."""

Unit = tuple[int, int | None]
"""A message's text, located: (message index, index of the text part, or ``None`` for string content)."""


class EnvTextEncoder:
    """Token ids of rendered chat text in which the content of :data:`ENV_ROLES` messages is text only.

    Args:
        tokenizer: The policy's tokenizer.
    """

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    @functools.cached_property
    def _added(self) -> re.Pattern[str] | None:
        """Matches the text of any added token (special or not), longest first; ``None`` if there are none."""
        texts = sorted({token.content for token in self.tokenizer.added_tokens_decoder.values()}, key=len)
        texts = [text for text in texts if text]
        return re.compile("|".join(re.escape(text) for text in reversed(texts))) if texts else None

    def encode(
        self,
        messages: Sequence[Mapping[str, Any]],
        render: Callable[[list[Mapping[str, Any]]], str],
        text: str | None = None,
    ) -> list[int]:
        """Token ids of ``render(messages)`` (no special tokens added), the env text in it encoded as text.

        Args:
            messages: The rendered messages.
            render: Renders a list of messages like ``messages`` to the text to encode (the same template call, cut
                the same way, whatever the content).
            text: ``render(messages)``, where the caller has it.
        """
        text = render(list(messages)) if text is None else text
        spans = [self._span(text, messages, unit, render) for unit in self._units(messages)]
        ids, position = [], 0
        for start, end in sorted(spans):
            ids += self._ids(text[position:start]) + self._text_ids(text[start:end])
            position = end
        return ids + self._ids(text[position:])

    def _units(self, messages: Sequence[Mapping[str, Any]]) -> list[Unit]:
        """The env texts of ``messages`` that hold an added token's text."""
        if self._added is None:
            return []
        units: list[Unit] = []
        for index, message in enumerate(messages):
            content = message.get("content")
            if message.get("role") not in ENV_ROLES or content is None:
                continue
            if isinstance(content, str):
                units += [(index, None)] if self._added.search(content) else []
            else:
                units += [
                    (index, part_index)
                    for part_index, part in enumerate(content)
                    if part.get("type") == "text" and self._added.search(part.get("text", ""))
                ]
        return units

    @staticmethod
    def _span(
        text: str, messages: Sequence[Mapping[str, Any]], unit: Unit, render: Callable[[list[Mapping[str, Any]]], str]
    ) -> tuple[int, int]:
        """Where ``unit``'s content is in ``text``: between the longest common prefix and suffix of ``text`` and the
        rendering with that content replaced by the marker."""
        index, part_index = unit
        message = dict(messages[index])
        if part_index is None:
            message["content"] = _MARKER
        else:
            parts = list(message["content"])
            parts[part_index] = {**parts[part_index], "text": _MARKER}
            message["content"] = parts
        marked = render([*messages[:index], message, *messages[index + 1 :]])
        shorter = min(len(text), len(marked))
        start = next((i for i in range(shorter) if text[i] != marked[i]), shorter)
        longest = shorter - start
        tail = next((i for i in range(longest) if text[-1 - i] != marked[-1 - i]), longest)
        return start, len(text) - tail

    def _ids(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"] if text else []

    def _text_ids(self, text: str) -> list[int]:
        """Ids of ``text`` with each added token's text encoded in two pieces (its first character, then the rest,
        itself encoded so), which no added token matches."""
        assert self._added is not None
        ids, position = [], 0
        for match in self._added.finditer(text):
            token = match.group()
            ids += self._ids(text[position : match.start()]) + self._ids(token[0]) + self._text_ids(token[1:])
            position = match.end()
        return ids + self._ids(text[position:])
