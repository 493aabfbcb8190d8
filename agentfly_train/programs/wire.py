"""OpenAI's chat-completions wire format, as the endpoint reads requests and writes responses.

A request's messages are normalised once (:func:`conversation_message`): text parts joined into one string, tool-call
arguments parsed from their JSON text into the dicts chat templates render, keys the templates do not read dropped.
Responses are what the ``openai`` SDK parses (``ChatCompletion``): tool calls with JSON-text arguments, per-token
log-probs when asked.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

_MESSAGE_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name")
_ROLES = ("system", "developer", "user", "assistant", "tool")


class WireError(ValueError):
    """A request the endpoint refuses (the message is one line, sent back as OpenAI's ``invalid_request_error``)."""


@dataclass(frozen=True)
class ChatRequest:
    """One ``/v1/chat/completions`` request, read.

    Attributes:
        messages: The conversation (:func:`conversation_message` of each).
        tools: The tools' JSON schemas, OpenAI's ``{"type": "function", "function": {...}}`` (``None``: none).
        n: Choices to sample.
        temperature: Softmax temperature (``None``: the run's).
        top_p: Nucleus mass (``None``: the run's).
        max_tokens: New tokens per choice (``None``: the run's per-turn budget; never more than it).
        stop: Texts that end a choice (not returned).
        logprobs: Return each sampled token's log-probability.
    """

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    n: int = 1
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    logprobs: bool = False


def _number(body: Mapping[str, Any], key: str, low: float, high: float) -> float | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise WireError(f"{key}={value!r}: expected a number in [{low}, {high}]")
    return float(value)


def _count(body: Mapping[str, Any], key: str) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise WireError(f"{key}={value!r}: expected a positive integer")
    return value


def read_request(body: Any) -> ChatRequest:
    """The request in a decoded JSON body.

    Raises:
        WireError: not a chat-completions request this endpoint serves (one line naming the field).
    """
    if not isinstance(body, Mapping):
        raise WireError("the body must be a JSON object")
    if body.get("stream"):
        raise WireError("stream=true is not served: ask for the whole response")
    if body.get("top_logprobs"):
        raise WireError("top_logprobs is not served: the backend returns the sampled tokens' log-probs only")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise WireError("messages: expected a non-empty list of messages")
    tools = body.get("tools") or None
    if tools is not None and not (isinstance(tools, list) and all(isinstance(t, Mapping) for t in tools)):
        raise WireError("tools: expected a list of tool objects")
    stop = body.get("stop") or ()
    stop = (stop,) if isinstance(stop, str) else stop
    if not (isinstance(stop, list | tuple) and all(isinstance(s, str) and s for s in stop)):
        raise WireError("stop: expected a string or a list of strings")
    return ChatRequest(
        messages=[conversation_message(m) for m in messages],
        tools=[dict(t) for t in tools] if tools else None,
        n=_count(body, "n") or 1,
        temperature=_number(body, "temperature", 0.0, 2.0),
        top_p=_number(body, "top_p", 0.0, 1.0),
        max_tokens=_count(body, "max_completion_tokens") or _count(body, "max_tokens"),
        stop=tuple(stop),
        logprobs=bool(body.get("logprobs")),
    )


def _text(content: Any) -> str:
    """A message's content as one string (OpenAI's list of text parts joined)."""
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list) and all(isinstance(p, Mapping) and p.get("type") == "text" for p in content):
        return "".join(str(p.get("text", "")) for p in content)
    raise WireError("content: expected a string or a list of text parts (images are not served)")


def _arguments(arguments: Any) -> Any:
    if not isinstance(arguments, str):
        return arguments
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments  # the template renders the text as it is


def _call(call: Mapping[str, Any]) -> dict[str, Any]:
    function = call["function"]
    arguments = _arguments(function.get("arguments"))
    return {"id": call.get("id") or "", "type": "function", "function": {"name": function.get("name", ""),
                                                                         "arguments": arguments}}  # fmt: skip


def conversation_message(message: Any) -> dict[str, Any]:
    """A request's message as chat templates take it: ``role``, ``content`` (one string), and ``tool_calls`` (their
    arguments as dicts), ``tool_call_id`` and ``name`` where given.

    Raises:
        WireError: not a message (one line).
    """
    if not isinstance(message, Mapping) or message.get("role") not in _ROLES:
        raise WireError(f"messages: each needs a role among {list(_ROLES)}")
    out = {key: message[key] for key in _MESSAGE_KEYS if message.get(key) is not None}
    out["role"] = "system" if message["role"] == "developer" else message["role"]
    out["content"] = _text(message.get("content"))
    if "tool_calls" in out:
        calls = out["tool_calls"]
        if not isinstance(calls, list) or not all(isinstance(c, Mapping) and "function" in c for c in calls):
            raise WireError("tool_calls: expected a list of function calls")
        out["tool_calls"] = [_call(c) for c in calls]
    return out


def same_turn(sent: Mapping[str, Any], returned: Mapping[str, Any]) -> bool:
    """Whether an assistant message a request holds is the one the endpoint returned: same text (surrounding
    whitespace aside) and the same calls (names and arguments; their ids aside)."""

    def calls(message: Mapping[str, Any]) -> list[tuple[str, Any]]:
        return [(c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls", ())]

    return (
        sent["role"] == "assistant"
        and sent["content"].strip() == returned["content"].strip()
        and calls(sent) == calls(returned)
    )


@dataclass(frozen=True)
class Choice:
    """One sampled choice as the response shows it.

    Attributes:
        message: The assistant message (:func:`conversation_message` form: arguments as dicts).
        tokens: The text of each sampled token (for ``logprobs``).
        logprobs: Each sampled token's log-probability, nats.
        finish_reason: ``stop``, ``length`` or ``tool_calls``.
    """

    message: dict[str, Any]
    tokens: Sequence[str]
    logprobs: Sequence[float]
    finish_reason: str


def _wire_message(message: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"role": "assistant", "content": message["content"] or None}
    if message.get("tool_calls"):
        out["tool_calls"] = [
            {"id": c["id"], "type": "function",
             "function": {"name": c["function"]["name"], "arguments": json.dumps(c["function"]["arguments"])}}
            for c in message["tool_calls"]
        ]  # fmt: skip
    return out


def _token_logprob(token: str, logprob: float) -> dict[str, Any]:
    value = logprob if math.isfinite(logprob) else -9999.0  # JSON has no -inf
    return {"token": token, "logprob": value, "bytes": list(token.encode()), "top_logprobs": []}


def completion_response(
    request_id: str, model: str, choices: Sequence[Choice], prompt_tokens: int, logprobs: bool
) -> dict[str, Any]:
    """The ``chat.completion`` object of a request's choices; ``usage`` counts the prompt once and every choice's
    tokens."""
    completion_tokens = sum(len(choice.tokens) for choice in choices)
    return {
        "id": request_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": index,
                "message": _wire_message(choice.message),
                "finish_reason": choice.finish_reason,
                "logprobs": {
                    "content": [_token_logprob(t, p) for t, p in zip(choice.tokens, choice.logprobs, strict=True)]
                }
                if logprobs
                else None,
            }
            for index, choice in enumerate(choices)
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def error_body(message: str, kind: str = "invalid_request_error") -> dict[str, Any]:
    """OpenAI's error object: what the SDK raises from (``openai.BadRequestError``'s message)."""
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}
