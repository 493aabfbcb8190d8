"""Agent programs of the tests (``agent.program=tests.helpers.programs:<name>``), and a policy that plays scripted
turns to them."""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from agentfly_train.generation import Generation, SamplingParams
from agentfly_train.rollout import ChatCodec

SEEN: dict[str, Any] = {}
"""What the programs saw, by task question (the tests read it)."""


class ScriptedTurns:
    """A policy that plays each episode's scripted assistant turns, in the ids the codec writes them in (the episode
    told by its task's question in the prompt); every generation is kept, per question, in :attr:`sampled`."""

    streams = False

    def __init__(self, codec: ChatCodec, scripts: Mapping[str, Sequence[Any]]) -> None:
        self.codec = codec
        self.scripts = {question: list(turns) for question, turns in scripts.items()}
        self.sampled: dict[str, list[Generation]] = {question: [] for question in scripts}

    def generate(
        self, prompts: Sequence[Sequence[int]], max_new_tokens: Sequence[int], params: SamplingParams
    ) -> list[Generation]:
        out = []
        for ids, budget in zip(prompts, max_new_tokens, strict=True):
            text = self.codec.tokenizer.decode(ids)
            question = next(q for q in self.scripts if q in text)
            action = self.scripts[question].pop(0) if self.scripts[question] else "The answer is \\boxed{0}."
            tokens = self.codec.turn_ids(action)[:budget]
            generation = Generation(tokens, [-0.5 - n / 100 for n in range(len(tokens))], tokens[-1] in
                                    self.codec.stop_token_ids)  # fmt: skip
            self.sampled[question].append(generation)
            out.append(generation)
        return out


def _client(endpoint: Any) -> Any:
    from openai import OpenAI

    return OpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key, max_retries=0)


def goes_on(endpoint: Any, task: dict[str, Any]) -> float:
    """Three requests, each the history so far, the reply and ``Go on.``: every request extends the one before."""
    client = _client(endpoint)
    messages: list[dict[str, Any]] = [{"role": "user", "content": task["question"]}]
    for _ in range(3):
        reply = client.chat.completions.create(model=endpoint.model, messages=messages, max_tokens=6)
        messages += [reply.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "Go on."}]
    return 0.5


def rewrites(endpoint: Any, task: dict[str, Any]) -> float:
    """Two requests, the second a summary of the first: the history is rewritten."""
    client = _client(endpoint)
    first = [{"role": "user", "content": task["question"]}]
    reply = client.chat.completions.create(model=endpoint.model, messages=first, max_tokens=6).choices[0].message
    summary = [{"role": "system", "content": f"Earlier you said: {reply.content}"}, *first]
    client.chat.completions.create(model=endpoint.model, messages=summary, max_tokens=6)
    SEEN[task["question"]] = (first, summary)
    return 0.25


def wire(endpoint: Any, task: dict[str, Any]) -> str:
    """One request with n, log-probs, stop, max_tokens and temperature, parsed by the SDK with warnings as errors;
    the raw JSON and the parsed response are kept in :data:`SEEN`."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        raw = _client(endpoint).chat.completions.with_raw_response.create(
            model=endpoint.model, messages=[{"role": "user", "content": task["question"]}], n=2, logprobs=True,
            stop=["\n\n"], max_tokens=5, temperature=0.7, top_p=0.9,
        )  # fmt: skip
        SEEN[task["question"]] = (raw.http_response.json(), raw.parse())
    return "0"


def misbehaves(endpoint: Any, task: dict[str, Any]) -> Any:
    """Per task index: raises, hangs, returns garbage, returns NaN, sends a request the endpoint refuses, or asks
    past the turn budget."""
    from openai import BadRequestError

    kind = task["index"] % 6
    if kind == 0:
        raise ValueError("no answer\nhere")
    if kind == 1:
        time.sleep(60)
    if kind == 2:
        return {"answer": 1}
    if kind == 3:
        return math.nan
    client = _client(endpoint)
    messages = [{"role": "user", "content": task["question"]}]
    if kind == 4:
        try:
            client.chat.completions.create(model=endpoint.model, messages=messages, stream=True)
        except BadRequestError as error:
            SEEN[task["question"]] = error.body["message"]
        return 1.0
    for _ in range(10):  # past agent.max_turns: the endpoint refuses, the SDK raises
        client.chat.completions.create(model=endpoint.model, messages=messages, max_tokens=2)
    return 1.0
