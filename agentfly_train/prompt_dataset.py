"""The dataset TRL's trainer iterates: the run's task rows, each with its rendered opening for TRL's logs."""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agentfly_envs.errors import InfrastructureError

if TYPE_CHECKING:
    from agentfly_envs.runtime import EnvPool
    from agentfly_train.rollout.codec import ChatCodec


class PromptColumn:
    """A dataset transform that adds ``prompt`` (``render_prompt(row)``) to each batch of ``task`` rows read.

    ``datasets`` fingerprints a transform by pickling it; the renderer (a tokenizer, envs) is neither worth
    serialising nor picklable, so the transform pickles as a token unique to this instance.
    """

    def __init__(self, render_prompt: Callable[[dict[str, Any]], str]) -> None:
        self.render_prompt = render_prompt
        self.token = uuid.uuid4().hex

    def __call__(self, batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
        return {**batch, "prompt": [self.render_prompt(json.loads(task)) for task in batch["task"]]}

    def __reduce__(self) -> tuple[Any, ...]:
        return (str, (self.token,))


def opening_prompt(codec: ChatCodec, pool: EnvPool) -> Callable[[dict[str, Any]], str]:
    """A row's rendered opening (its episode's first messages, reset on an env of ``pool``, through ``codec``'s
    template with the generation prompt), for TRL's ``prompt`` column (:func:`trl_dataset`; its logs, the rollouts
    reset their own envs): the task row as text when the reset meets an infrastructure failure (a dead server)."""
    return functools.partial(_render_opening, codec, pool)


def _render_opening(codec: ChatCodec, pool: EnvPool, row: dict[str, Any]) -> str:
    try:
        _, info = pool.take(1)[0].reset(options={"task": row})
        messages = info["messages"]
    except InfrastructureError:
        messages = [{"role": "user", "content": json.dumps(row)}]
    return codec.render(messages, add_generation_prompt=True)


def trl_dataset(rows: Sequence[Mapping[str, Any]], render_prompt: Callable[[dict[str, Any]], str]) -> Any:
    """The ``datasets.Dataset`` the trainer iterates: ``task`` (the row as JSON, since rows of one file may differ
    in their fields) and ``prompt`` (``render_prompt(row)``: the rendered opening, for TRL's logs).

    ``prompt`` is rendered when a row is read (:class:`PromptColumn`), so a run renders the rows it samples, not
    every row of a large task set at start-up.
    """
    from datasets import Dataset

    tasks = Dataset.from_dict({"task": [json.dumps(dict(row), default=str) for row in rows]})
    return tasks.with_transform(PromptColumn(render_prompt))
