"""A policy that plays fixed texts, for rollouts whose episodes a test knows in advance."""

from __future__ import annotations

from collections.abc import Sequence

from agentfly_train.generation import Generation, SamplingParams
from agentfly_train.rollout import ChatCodec


class ScriptedPolicy:
    """A policy that plays fixed assistant texts per episode (identified by its prompt), as token ids."""

    def __init__(self, codec: ChatCodec, scripts: dict[tuple[int, ...], list[str]]) -> None:
        self.codec = codec
        self.scripts = {prompt: list(turns) for prompt, turns in scripts.items()}

    def generate(self, prompts: Sequence[Sequence[int]], max_new_tokens: Sequence[int], params: SamplingParams):
        out = []
        for ids, budget in zip(prompts, max_new_tokens, strict=True):
            prompt = next(p for p in self.scripts if tuple(ids[: len(p)]) == p)
            text = self.scripts[prompt].pop(0) if self.scripts[prompt] else "The answer is \\boxed{0}."
            tokens = [*self.codec.encode(text), self.codec.eos_token_id][:budget]
            out.append(Generation(tokens, [-0.25] * len(tokens), tokens[-1] == self.codec.eos_token_id))
        return out


def golden_scripts(envs, codec, tasks):
    """The scripts of :class:`ScriptedPolicy` that play each task's golden episode, one env per task."""
    scripts = {}
    for env, task in zip(envs, tasks, strict=True):
        _, info = env.reset(options={"task": task})
        scripts[tuple(codec.prompt_ids(info["messages"]))] = env.unwrapped.golden_actions()
    return scripts
