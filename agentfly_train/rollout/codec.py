"""Token ids of the chat turns around the policy's samples, from the tokenizer's chat template, and the reading and
writing of the model's own tool-call format."""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agentfly_envs.parsers import Action, parse_message
from agentfly_train.rollout.env_text import EnvTextEncoder
from agentfly_train.vision import IMAGE_PLACEHOLDER, ImageInputs, message_images

_PROBE_USER = {"role": "user", "content": "x"}
_PROBE_CALL = {"type": "function", "function": {"name": "probe", "arguments": {}}}


class TemplateError(ValueError):
    """The chat template cannot serve multi-turn token-in/token-out rollouts."""


class RoundTripError(TemplateError):
    """A turn written in tokens does not read back as written (the calls, or the tokenizer's text)."""


def assistant_message(action: Action) -> dict[str, Any]:
    """An env action as the assistant message the chat template renders (text becomes its ``content``)."""
    return dict(action) if isinstance(action, Mapping) else {"role": "assistant", "content": action}


def _checked_calls(message: Mapping[str, Any]) -> dict[str, Any]:
    """The ``tool_calls`` of a parsed turn that name a tool and carry object arguments (as the template renders
    calls), and ``parse_errors`` for the others (:func:`~agentfly_envs.parsers.parse_message`, as the env reads
    them): a call the policy wrote without a name is the env's ``Error:`` observation, and must not reach the
    template when the turn is rendered again."""
    read = parse_message(message)
    calls = [call.as_openai() for call in read.calls]
    return ({"tool_calls": calls} if calls else {}) | ({"parse_errors": read.errors} if read.errors else {})


class ChatCodec:
    """Token ids of the chat turns around the policy's samples, computed from the chat template.

    With a ``response_template`` the codec speaks the model's own tool-call format: it reads a sampled turn into an
    assistant message (transformers' response parsing; the env gets the structured calls) and writes an assistant
    message as the template renders it (golden demonstrations). Without one, turns are plain text that the env's
    parser reads.

    Args:
        tokenizer: A tokenizer with a chat template.
        tools: JSON schemas rendered into the prompt (``None`` for formats that describe tools in text).
        chat_template: A template overriding the tokenizer's own (e.g. TRL's training variant of it).
        template_kwargs: Extra variables of the template (``agent.chat_template_kwargs``, e.g. ``enable_thinking``).
        response_template: transformers' response template of the family (how to read its turns), or ``None``.
        tool_results: For templates without a ``tool`` role: the format (with ``{content}``) of a tool result in
            the user turn that carries a turn's results; ``None`` renders role ``tool`` as is.
        end_of_turn: Tokens besides the EOS that end an assistant turn (gpt-oss's ``<|call|>``).
        reasoning_end: Drop each turn's reasoning from the next turns' prompts (``agent.past_reasoning=drop``): the
            text that ends it as the model samples it (Qwen3's ``</think>``); ``None`` keeps past reasoning.
        images: A vision-language policy's image inputs: each image token the template writes for a message's
            image is expanded to the image's placeholder tokens (``None``: a text policy).
    """

    def __init__(
        self,
        tokenizer: Any,
        tools: list[dict[str, Any]] | None,
        chat_template: str | None = None,
        *,
        template_kwargs: Mapping[str, Any] | None = None,
        response_template: Mapping[str, Any] | None = None,
        tool_results: str | None = None,
        end_of_turn: Sequence[str] = (),
        reasoning_end: str | None = None,
        images: ImageInputs | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.tools = tools
        self.chat_template = chat_template
        self.template_kwargs = dict(template_kwargs or {})
        self.response_template = response_template
        self.tool_results = tool_results
        self.reasoning_end = reasoning_end
        self.images = images
        self._env_text = EnvTextEncoder(tokenizer)
        self.eos_token_id: int = tokenizer.eos_token_id
        self.end_tokens: list[str] = [token for token in (tokenizer.eos_token, *end_of_turn) if token]
        """Texts of the tokens that end an assistant turn, the EOS first."""
        self.description = ""
        """One line: the template, the tool-call format and the round-trip check (set by whoever checked it)."""
        self.note: str | None = None
        """A ``note:`` for the user about the template chosen, or ``None``."""

    def with_tools(self, tools: list[dict[str, Any]] | None) -> ChatCodec:
        """This codec rendering ``tools`` into prompts and reading calls of them (a copy; itself when they are its
        own): an agent program's request names its tools."""
        if tools == self.tools:
            return self
        codec = copy.copy(self)
        codec.tools = tools
        codec.__dict__.pop("_header", None)  # the cached generation prompt shows the tools
        return codec

    @property
    def stop_token_ids(self) -> list[int]:
        """Ids of the tokens that end an assistant turn (:attr:`end_tokens`)."""
        return [self.tokenizer.convert_tokens_to_ids(token) for token in self.end_tokens]

    def stop_generation(self, model: Any) -> None:
        """Adds :attr:`stop_token_ids` to the tokens that end ``model``'s generation
        (``generation_config.eos_token_id``, which the generation backends stop at), e.g. gpt-oss's ``<|call|>``,
        which a checkpoint's configuration may lack."""
        configured = model.generation_config.eos_token_id
        configured = [configured] if isinstance(configured, int) else list(configured or [])
        model.generation_config.eos_token_id = sorted({*configured, *self.stop_token_ids})

    @property
    def reads_tool_calls(self) -> bool:
        """Whether sampled turns are read in the model's own tool-call format (env actions are then messages)."""
        return self.response_template is not None

    @property
    def drops_reasoning(self) -> bool:
        """Whether past turns' reasoning is dropped from the next turns' prompts (each turn then trains in its own
        context: :func:`~agentfly_train.rollout.training_rows`)."""
        return self.reasoning_end is not None

    def kept_ids(self, token_ids: Sequence[int]) -> list[int]:
        """The tokens of a sampled turn that the next turns' prompts hold: all of them, or, when the codec drops
        past reasoning, those after its reasoning (through :attr:`reasoning_end` and the whitespace tokens after
        it). A turn without the end of a reasoning block (none sampled, or cut inside it) is kept whole."""
        if self.reasoning_end is None:
            return list(token_ids)
        pieces = [self.tokenizer.decode([token], skip_special_tokens=False) for token in token_ids]
        text = "".join(pieces)
        end = text.rfind(self.reasoning_end)
        if end < 0:
            return list(token_ids)
        end += len(self.reasoning_end)
        cut, length = 0, 0
        while cut < len(pieces) and (length < end or not pieces[cut].strip()):
            length += len(pieces[cut])
            cut += 1
        return list(token_ids[cut:])

    def drop_oldest_images(self, ids: list[int], images: list[Any], keep: int | None) -> tuple[list[int], list[Any]]:
        """A context's ``ids`` and ``images`` with all but the newest ``keep`` images replaced by the tokens of
        :data:`~agentfly_train.vision.IMAGE_PLACEHOLDER` (:meth:`ImageInputs.drop_oldest`), as new lists; the same
        lists when they are within ``keep`` (``None``: no cap) or the codec has no images."""
        if keep is None or self.images is None or len(images) <= keep:
            return ids, images
        return self.images.drop_oldest(ids, images, keep, self.encode(IMAGE_PLACEHOLDER))

    def render(self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool) -> str:
        """The template's text for ``messages`` (tool results moved into user turns where the template wants)."""
        return self.tokenizer.apply_chat_template(
            self._template_messages(messages),
            tools=self.tools,
            chat_template=self.chat_template,
            add_generation_prompt=add_generation_prompt,
            tokenize=False,
            **self.template_kwargs,
        )

    def _template_messages(self, messages: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        if self.tool_results is None:
            return list(messages)
        out: list[Mapping[str, Any]] = []
        after_tool = False
        for message in messages:
            if message["role"] != "tool":
                out.append(message)
            elif after_tool:  # the results of one turn share its user turn
                result = self.tool_results.format(content=message["content"])
                out[-1] = {"role": "user", "content": f"{out[-1]['content']}\n{result}"}
            else:
                out.append({"role": "user", "content": self.tool_results.format(content=message["content"])})
            after_tool = message["role"] == "tool"
        return out

    def encode(self, text: str, images: Sequence[Any] = ()) -> list[int]:
        """Token ids of template text (no special tokens added), its image tokens expanded to the placeholder
        tokens of ``images`` (the images of the rendered messages, in order; a vision-language policy's codec)."""
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return ids if self.images is None else self.images.expand(ids, images)

    def _encode_messages(
        self, messages: Sequence[Mapping[str, Any]], render: Callable[[list[Mapping[str, Any]]], str], text: str
    ) -> list[int]:
        """:meth:`encode` of ``text``, ``render(messages)``, with the content of the task's and env's messages encoded
        as text (:class:`~agentfly_train.rollout.env_text.EnvTextEncoder`: a tool's output holding a control token's
        text cannot forge a turn)."""
        ids = self._env_text.encode(messages, render, text)
        return ids if self.images is None else self.images.expand(ids, message_images(messages))

    def decode(self, token_ids: Sequence[int]) -> Action:
        """The env's action for a sampled turn: its text (end-of-turn tokens dropped), or, when the codec reads the
        model's tool-call format, an assistant message (``content``, ``tool_calls``, the family's reasoning field;
        a turn that cannot be read keeps its text as ``content`` and says why in ``parse_errors``)."""
        if self.response_template is None:
            return self.tokenizer.decode(token_ids, skip_special_tokens=True)
        from transformers.utils.chat_parsing.response_parser import parse_response

        text = self.tokenizer.decode(token_ids, skip_special_tokens=False)
        try:
            message = parse_response(text, self.response_template, prefix=self._header, tools=self.tools)
        except ValueError as error:
            reason = " ".join(str(error).split())
            content = self.tokenizer.decode(token_ids, skip_special_tokens=True)
            return {
                "role": "assistant",
                "content": content,
                "parse_errors": [f"the tool call cannot be read: {reason}"],
            }
        turn = {key: value for key, value in message.items() if key not in ("tool_calls", "parse_errors")}
        return {**turn, "role": "assistant", "content": message.get("content") or "", **_checked_calls(message)}

    @functools.cached_property
    def _header(self) -> str:
        return self.render([_PROBE_USER], add_generation_prompt=True)

    def prompt_ids(self, messages: Sequence[Mapping[str, Any]]) -> list[int]:
        """The opening messages rendered and followed by the assistant header."""
        render = functools.partial(self.render, add_generation_prompt=True)
        return self._encode_messages(messages, render, render(messages))

    def request_ids(self, text: str) -> list[int]:
        """A request outside the episode (a context policy's summary): ``text`` as the one user message of a chat
        without tools, rendered and followed by the assistant header."""

        def render(messages: Sequence[Mapping[str, Any]]) -> str:
            return self.tokenizer.apply_chat_template(
                list(messages), chat_template=self.chat_template, add_generation_prompt=True, tokenize=False,
                **self.template_kwargs,
            )  # fmt: skip

        messages = [{"role": "user", "content": text}]
        return self._encode_messages(messages, render, render(messages))

    def turn_ids(self, action: Action) -> list[int]:
        """An assistant turn as the policy samples it: its tokens through its end-of-turn token. Text is the
        turn's text; with the model's tool-call format, an action (a message, or text as its content) is written as
        the template renders it (what golden demonstrations teach).

        Raises:
            TemplateError: the template renders the turn outside the generation prompt's assistant header.
        """
        if self.response_template is None:
            return [*self.encode(action if isinstance(action, str) else assistant_message(action)["content"]),
                    self.eos_token_id]  # fmt: skip
        prompt = self._header
        full = self.render([_PROBE_USER, assistant_message(action)], add_generation_prompt=False)
        if not full.startswith(prompt):
            raise TemplateError(
                "the chat template renders an assistant turn without the header its generation prompt ends with "
                f"({prompt[-40:]!r}), so sampled turns cannot be told apart from the template's text"
            )
        turn = full[len(prompt) :]
        ends = [turn.index(token) + len(token) for token in self.end_tokens if token in turn]
        return self.encode(turn[: min(ends)] if ends else turn)

    def observation_ids(
        self, env_messages: Sequence[Mapping[str, Any]], closed_turn: bool, action: Action | None = None
    ) -> list[int]:
        """Tokens that follow a sampled turn: its end-of-turn (if the model did not sample one), the env's
        messages as the template renders them, and the next assistant header.

        Args:
            env_messages: The env's new messages (role ``tool``).
            closed_turn: Whether the sampled turn ended with an end-of-turn token.
            action: The turn's action, whose calls some templates name in the results (gpt-oss's); a probe call
                stands in for a turn without readable calls.

        Raises:
            TemplateError: the template renders the turn before the tool results differently once they follow.
        """
        calls = assistant_message(action).get("tool_calls") if action is not None else None
        call = {"role": "assistant", "content": "", "tool_calls": calls or [_PROBE_CALL]}
        before = [_PROBE_USER, call if self.response_template is not None else {"role": "assistant", "content": "y"}]
        prefix = self.render(before, add_generation_prompt=False)
        full = self.render([*before, *env_messages], add_generation_prompt=True)
        cut = max((prefix.rindex(token) + len(token) for token in self.end_tokens if token in prefix), default=0)
        cut = cut or len(prefix)
        if full[:cut] != prefix[:cut]:
            raise TemplateError(
                "the chat template is not prefix-preserving: it renders an earlier assistant turn differently "
                "once a tool turn follows"
            )

        def render(messages: list[Mapping[str, Any]]) -> str:
            return self.render([*before, *messages], add_generation_prompt=True)[cut:]

        ids = self._encode_messages(env_messages, render, full[cut:])
        return ids if closed_turn else [self.eos_token_id, *ids]

    def check_episode(
        self,
        messages: Sequence[Mapping[str, Any]],
        steps: Sequence[tuple[Action, Sequence[Mapping[str, Any]]]],
        read_calls: Callable[[Action], list[tuple[str, Any]]],
    ) -> None:
        """Checks an episode as the rollout builds it: each turn's calls read back from its tokens are the calls
        written (``read_calls`` of the action), and prompt + turns + observations, token by token, are the
        template's rendering of the whole conversation, which token-in/token-out rollouts rely on.

        Args:
            messages: Opening messages of an episode.
            steps: Each assistant action (e.g. a golden one) with the env's messages after it (none after the last).
            read_calls: ``(name, arguments)`` of the calls in an action, as the env's parser reads them.

        Raises:
            RoundTripError: a call or a text turn does not survive the round trip.
            TemplateError: the template rewrites earlier turns (e.g. drops past reasoning), with where.
        """
        conversation = list(messages)
        ids = self.prompt_ids(conversation)
        for action, env_messages in steps:
            turn = self.turn_ids(action)
            decoded = self.decode(turn)
            if isinstance(action, str) and isinstance(decoded, str) and decoded != action:
                raise RoundTripError(
                    f"the tokenizer does not decode the text it encodes: wrote {action[:60]!r}, read {decoded[:60]!r}"
                )
            read = read_calls(decoded)
            if read != read_calls(action):
                raise RoundTripError(
                    f"a tool call does not survive the round trip through the template and back: wrote "
                    f"{read_calls(action)}, read {read} from {self.tokenizer.decode(turn)!r}"
                )
            conversation.append(assistant_message(action))
            ids += turn
            if env_messages:
                conversation.extend(env_messages)
                ids += self.observation_ids(env_messages, closed_turn=True, action=action)
        ends_on_tool = bool(steps) and bool(steps[-1][1])
        render = functools.partial(self.render, add_generation_prompt=ends_on_tool)
        expected = self._encode_messages(conversation, render, render(conversation))
        if expected[: len(ids)] != ids:
            position = next((i for i, (a, b) in enumerate(zip(expected, ids, strict=False)) if a != b), len(expected))
            raise TemplateError(
                "the chat template is not prefix-preserving: rendering the whole conversation differs from the "
                f"turns rendered one after another at token {position}: template has "
                f"{self.tokenizer.decode(expected[position : position + 16])!r}, turn by turn has "
                f"{self.tokenizer.decode(ids[position : position + 16])!r}"
            )
