"""Multi-turn, token-in/token-out rollouts of a policy over agentfly environments.

Each turn makes one batched generation call for every still-active episode, decodes the new tokens,
steps the envs concurrently, and appends each observation as the chat template's tool turn. The
completion of an episode is the concatenation of sampled tokens (``env_mask = 1``, trained) and
observation tokens (``env_mask = 0``, never trained); the sampled tokens are never re-tokenised.

Budgets: ``max_tokens_per_turn`` new tokens per turn, ``response_length`` tokens per completion
(sampled and observation tokens together), and ``max_turns`` assistant turns. An observation that would
overflow ``response_length`` ends the episode (finish reason ``length``) instead of being cut.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from agentfly_envs.core import ERROR_KINDS
from agentfly_train.generation import GenerationBackend, SamplingParams

FINISH_REASONS = ("stop", "max_turns", "length")
"""``stop``: the env ended the episode (an answer); ``max_turns``: the turn budget ran out;
``length``: the token budget (``response_length``) ran out."""


class TemplateError(ValueError):
    """The chat template cannot serve multi-turn token-in/token-out rollouts."""


@dataclass(frozen=True)
class RolloutBudgets:
    """Limits of one episode.

    Attributes:
        max_turns: Assistant turns.
        max_tokens_per_turn: New tokens per assistant turn.
        response_length: Tokens in the whole completion, sampled and observation tokens together.
    """

    max_turns: int
    max_tokens_per_turn: int
    response_length: int


@dataclass
class Trajectory:
    """One finished episode, in tokens.

    Attributes:
        prompt_ids: The rendered opening messages, ending with the assistant header.
        completion_ids: Every token after the prompt: sampled turns and observation turns.
        env_mask: Per completion token, 1 if sampled by the policy, 0 if written by the env/template.
        logprobs: Per completion token, the sampling log-probability (0.0 on ``env_mask = 0`` tokens).
        reward: The env's score of the episode (its truncation reward if it did not finish).
        finish_reason: One of :data:`FINISH_REASONS`.
        num_turns: Assistant turns taken.
        num_tool_calls: Tool calls the env ran or rejected.
        num_tool_errors: Turns' errors counted by the env (parse errors, unknown tools, tool failures).
        correct: Whether the answer was right (the reward's ``correct`` component, else ``reward >= 1``).
        messages: The conversation as chat messages, for logging.
        env_seconds: Wall time spent in ``env.reset``/``env.step`` for this episode.
        turn_calls: Per assistant turn, the tool calls the env parsed from it (OpenAI-style) and
            ``{"error": message}`` for each call it could not parse, for logging.
        error_counts: The env's ``info["error_counts"]`` at the episode's last step.
        reward_components: The reward's components (``info["reward_components"]``) when the env scored it.
    """

    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    reward: float = 0.0
    finish_reason: str = ""
    num_turns: int = 0
    num_tool_calls: int = 0
    num_tool_errors: int = 0
    correct: bool = False
    messages: list[dict[str, Any]] = field(default_factory=list)
    env_seconds: float = 0.0
    turn_calls: list[list[dict[str, Any]]] = field(default_factory=list)
    error_counts: dict[str, int] = field(default_factory=dict)
    reward_components: dict[str, float] = field(default_factory=dict)

    def extend(self, token_ids: Sequence[int], trained: bool, logprobs: Sequence[float] | None = None) -> None:
        """Appends tokens to the completion, with their mask and log-probabilities."""
        self.completion_ids.extend(token_ids)
        self.env_mask.extend([int(trained)] * len(token_ids))
        self.logprobs.extend(logprobs if logprobs is not None else [0.0] * len(token_ids))


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


def _episode_counts(info: Mapping[str, Any]) -> tuple[int, int]:
    calls = len(info.get("tool_calls", ())) + len(info.get("parse_errors", ()))
    errors = sum(info.get("error_counts", {}).values())
    return calls, errors


def _is_correct(reward: float, info: Mapping[str, Any]) -> bool:
    components = info.get("reward_components") or {}
    return bool(components.get("correct", reward) >= 1.0 - 1e-9)


def _step(env: gym.Env, text: str) -> tuple[tuple[Any, ...], float]:
    start = time.perf_counter()
    result = env.step(text)
    return result, time.perf_counter() - start


def run_rollouts(
    envs: Sequence[gym.Env],
    tasks: Sequence[Mapping[str, Any]],
    backend: GenerationBackend,
    codec: ChatCodec,
    budgets: RolloutBudgets,
    params: SamplingParams,
    executor: ThreadPoolExecutor,
) -> list[Trajectory]:
    """Runs one episode per ``(env, task)`` pair to the end.

    Args:
        envs: Environments, one per episode (reset here with ``options={"task": task}``).
        tasks: Dataset rows, one per episode.
        backend: The generator.
        codec: Chat-template token ids.
        budgets: Turn and token limits.
        params: Sampling parameters.
        executor: Threads that step the envs of a turn concurrently.

    Returns:
        One :class:`Trajectory` per episode, in order.
    """
    trajectories = []
    for env, task in zip(envs, tasks, strict=True):
        start = time.perf_counter()
        _, info = env.reset(options={"task": dict(task)})
        trajectory = Trajectory(prompt_ids=codec.prompt_ids(info["messages"]), messages=list(info["messages"]))
        trajectory.env_seconds = time.perf_counter() - start
        trajectories.append(trajectory)
    active = list(range(len(envs)))
    for _ in range(budgets.max_turns):
        if not active:
            break
        room = [budgets.response_length - len(trajectories[i].completion_ids) for i in active]
        generations = backend.generate(
            [trajectories[i].prompt_ids + trajectories[i].completion_ids for i in active],
            [min(budgets.max_tokens_per_turn, r) for r in room],
            params,
        )
        texts = [codec.decode(g.token_ids) for g in generations]
        # A turn cut by the completion budget (not by the per-turn budget) ends its episode unscored.
        stepping = [
            n for n, (g, r) in enumerate(zip(generations, room, strict=True)) if g.stopped or len(g.token_ids) < r
        ]
        stepped = executor.map(_step, [envs[active[n]] for n in stepping], [texts[n] for n in stepping])
        results = dict(zip(stepping, stepped, strict=True))
        still_active = []
        for n, (index, generation) in enumerate(zip(active, generations, strict=True)):
            trajectory = trajectories[index]
            trajectory.extend(generation.token_ids, trained=True, logprobs=generation.logprobs)
            trajectory.messages.append({"role": "assistant", "content": texts[n]})
            trajectory.num_turns += 1
            if n not in results:  # the completion budget ran out mid-turn
                trajectory.turn_calls.append([])
                _finish(trajectory, envs[index], "length")
                continue
            (_, reward, terminated, truncated, info), seconds = results[n]
            trajectory.env_seconds += seconds
            calls, errors = _episode_counts(info)
            trajectory.num_tool_calls += calls
            trajectory.num_tool_errors = errors
            trajectory.error_counts = dict(info.get("error_counts", {}))
            parse_errors = [{"error": message} for message in info.get("parse_errors", ())]
            trajectory.turn_calls.append([*info.get("tool_calls", ()), *parse_errors])
            if terminated or truncated:
                _finish(trajectory, envs[index], "stop" if terminated else "max_turns", reward, info)
                continue
            observation = codec.observation_ids(info["messages"], closed_turn=generation.stopped)
            if len(trajectory.completion_ids) + len(observation) >= budgets.response_length:
                _finish(trajectory, envs[index], "length")
                continue
            trajectory.extend(observation, trained=False)
            trajectory.messages.extend(info["messages"])
            still_active.append(index)
        active = still_active
    for index in active:
        _finish(trajectories[index], envs[index], "max_turns")
    return trajectories


def _finish(
    trajectory: Trajectory,
    env: gym.Env,
    reason: str,
    reward: float | None = None,
    info: Mapping[str, Any] | None = None,
) -> None:
    trajectory.finish_reason = reason
    trajectory.reward = float(env.unwrapped.truncation_reward if reward is None else reward)
    trajectory.correct = _is_correct(trajectory.reward, info or {}) if reason == "stop" else False
    trajectory.reward_components = dict((info or {}).get("reward_components") or {})


def summarize(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """Per-batch statistics of finished episodes (means over episodes unless named otherwise).

    Returns:
        ``reward/{mean,std,min,max}``, ``accuracy``, ``episode/{turns,tool_calls,tool_error_rate,
        response_length,sampled_tokens}``, ``episode/tool_error_rate/<kind>`` (errors of each of the env's
        ``ERROR_KINDS`` per tool call), ``finish_reason/<reason>`` (fractions) and ``env_seconds`` (sum).
    """
    import statistics

    count = max(len(trajectories), 1)
    rewards = [t.reward for t in trajectories] or [0.0]
    calls = sum(t.num_tool_calls for t in trajectories)
    reasons = Counter(t.finish_reason for t in trajectories)
    stats = {
        "reward/mean": statistics.fmean(rewards),
        "reward/std": statistics.pstdev(rewards),
        "reward/min": min(rewards),
        "reward/max": max(rewards),
        "accuracy": sum(t.correct for t in trajectories) / count,
        "episode/turns": sum(t.num_turns for t in trajectories) / count,
        "episode/tool_calls": calls / count,
        "episode/tool_error_rate": sum(t.num_tool_errors for t in trajectories) / max(calls, 1),
        "episode/response_length": sum(len(t.completion_ids) for t in trajectories) / count,
        "episode/sampled_tokens": sum(sum(t.env_mask) for t in trajectories) / count,
        "env_seconds": sum(t.env_seconds for t in trajectories),
    }
    for kind in ERROR_KINDS:
        errors = sum(t.error_counts.get(kind, 0) for t in trajectories)
        stats[f"episode/tool_error_rate/{kind}"] = errors / max(calls, 1)
    stats.update({f"finish_reason/{reason}": reasons[reason] / count for reason in FINISH_REASONS})
    return stats
