"""One episode in tokens: its budgets, its trajectory, and what a sampled turn does to it.

The completion of an episode is the concatenation of sampled tokens (``env_mask = 1``, trained) and
observation tokens (``env_mask = 0``, never trained); the sampled tokens are never re-tokenised. Each turn is
sampled after the episode's context: the prompt and the completion so far, or that context rewritten: without each
earlier turn's reasoning tokens when the codec drops past reasoning (``agent.past_reasoning=drop``), or with the
screenshots older than the newest ``agent.max_images`` replaced by a line of text, or rebuilt by a context policy
(``agent.context.policy``, :mod:`agentfly_train.context_policies`: a window of the last turns, old observations
masked, or older turns summarised by the policy itself); the trainer then trains each turn in the context it was
sampled in (:func:`training_rows`, :func:`row_images`), as it does with ``agent.context.step_wise`` where the context
only grows.

Budgets: ``max_tokens_per_turn`` new tokens per turn, ``response_length`` tokens per completion
(sampled and observation tokens together), and ``max_turns`` assistant turns. An observation that would
overflow ``response_length`` ends the episode (finish reason ``length``) instead of being cut.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import gymnasium as gym

from agentfly_envs.core import ERROR_KINDS
from agentfly_envs.errors import InfrastructureError, one_line
from agentfly_envs.parsers import Action
from agentfly_train.context_policies import ContextPolicy, ContextTurn, FullContext, TurnHistory
from agentfly_train.generation import Generation
from agentfly_train.rollout.codec import ChatCodec, assistant_message
from agentfly_train.vision import message_images

FINISH_REASONS = ("stop", "max_turns", "length")
"""``stop``: the env ended the episode (an answer); ``max_turns``: the turn budget ran out;
``length``: the token budget (``response_length``) ran out."""


class InfrastructureFailureRate(RuntimeError):
    """More of a training step's episodes met infrastructure failures than ``rollout.max_infra_failure_rate``
    allows; the run saved a checkpoint and stopped (the message is one line)."""


@dataclass(frozen=True)
class RolloutBudgets:
    """Limits of one episode.

    Attributes:
        max_turns: Assistant turns.
        max_tokens_per_turn: New tokens per assistant turn.
        response_length: Tokens in the whole completion, sampled and observation tokens together.
        max_images: Images in the episode's context (prompt and observations): the newest are kept, older ones
            are replaced by text (:meth:`~agentfly_train.rollout.ChatCodec.drop_oldest_images`). ``None``: no cap.
        truncation_reward: The reward of an episode these limits cut short (the env's
            :attr:`~agentfly_envs.contract.TrainableEnv.truncation_reward`).
        context: The context policy (``agent.context.policy``): what each turn is sampled after.
        step_wise: Whether each turn trains as its own row, in the context it was sampled in
            (:attr:`~agentfly_train.config.AgentConfig.trains_turn_rows`; :func:`training_rows` with ``turns``).
    """

    max_turns: int
    max_tokens_per_turn: int
    response_length: int
    max_images: int | None = None
    truncation_reward: float = 0.0
    context: ContextPolicy = field(default_factory=FullContext)
    step_wise: bool = False


@dataclass(frozen=True)
class TurnSpan:
    """An assistant turn of an episode.

    Attributes:
        context_ids: The episode's context list when the turn was sampled. Later turns only append to that list, or
            replace it with a rewritten one (:meth:`~agentfly_train.rollout.ChatCodec.drop_oldest_images`), so its
            first ``context_length`` ids stay what the turn was sampled after, and nothing is copied.
        context_length: How many ids of ``context_ids`` the turn was sampled after.
        images: The images of that context, in order.
        start: Where its sampled tokens start in the episode's ``completion_ids``.
        end: Where they end.
    """

    context_ids: list[int]
    context_length: int
    images: list[Any]
    start: int
    end: int

    @property
    def context(self) -> list[int]:
        """The token ids the turn was sampled after."""
        return self.context_ids[: self.context_length]


@dataclass
class Trajectory:
    """One finished episode, in tokens.

    Attributes:
        prompt_ids: The rendered opening messages, ending with the assistant header.
        completion_ids: Every token after the prompt: sampled turns and observation turns.
        env_mask: Per completion token, 1 if sampled by the policy, 0 if written by the env/template.
        logprobs: Per completion token, the sampling log-probability (0.0 on ``env_mask = 0`` tokens).
        reward: The episode's return: the sum of ``turn_rewards`` (with the env's outcome reward on the last step,
            or the truncation reward where the episode was cut short).
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
        reward_error: Why the reward function failed (``info["reward_error"]``; the episode scored 0), or ``None``.
        infra_failure: The infrastructure failure that ended the episode (``info["infra_failure"]``: a dead sandbox,
            server, actor, world or judge; not the agent's doing), or ``None``. Such an episode is replayed or
            left out of training (:attr:`excluded`), never scored.
        failed_attempts: The infrastructure failures of this task's earlier attempts, each replayed by this one.
        outcome_reward: The part of :attr:`reward` the episode's outcome paid: the env's reward on the last step
            without its turn reward, or the truncation reward; a judge's score once judged
            (:mod:`~agentfly_train.rollout.judging`).
        judge_reasoning: What the LLM judge wrote of its score (``agent.reward_name=judge``, ``rubric`` or
            ``group_rank``), or ``None`` when no judge scored the episode.
        versions: Per completion token, the policy version that sampled it (-1 on ``env_mask = 0`` tokens); a turn
            carries the version its request was submitted under (off-policy training,
            :mod:`~agentfly_train.rollout.stream`; 0 throughout otherwise).
        images: The images of ``context_ids``, in the order of their placeholder tokens (PIL images; a
            vision-language policy's episode).
        context_ids: What the next turn is sampled after: ``prompt_ids + completion_ids``, or that without earlier
            turns' reasoning when the codec drops it (:meth:`~agentfly_train.rollout.ChatCodec.kept_ids`) and with
            screenshots beyond ``max_images`` dropped (:meth:`~agentfly_train.rollout.ChatCodec.drop_oldest_images`).
        turn_spans: Per assistant turn, the context it was sampled in and where its tokens are in the completion.
        turn_rewards: Per assistant turn, the reward of the env's step on it (Gymnasium's: a turn reward, plus the
            outcome reward on the step that ends the episode); a turn the env never saw (the completion budget cut
            it) pays 0, and the truncation reward of an episode that the budgets ended is added to its last turn's.
        history: The opening messages and, under a context policy that rewrites the context, the turns it is
            rebuilt from and the summaries written (:class:`~agentfly_train.context_policies.TurnHistory`).
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
    reward_error: str | None = None
    infra_failure: str | None = None
    outcome_reward: float = 0.0
    judge_reasoning: str | None = None
    failed_attempts: list[str] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    context_ids: list[int] = field(default_factory=list)
    turn_spans: list[TurnSpan] = field(default_factory=list)
    turn_rewards: list[float] = field(default_factory=list)
    images: list[Any] = field(default_factory=list)
    grows: bool = False
    history: TurnHistory = field(default_factory=TurnHistory)

    def __post_init__(self) -> None:
        self.context_ids = self.context_ids or [*self.prompt_ids, *self.completion_ids]

    @property
    def excluded(self) -> bool:
        """Left out of training and of the statistics: it ended on an infrastructure failure."""
        return self.infra_failure is not None

    def replays(self, failed: Trajectory) -> None:
        """Records that this episode replays ``failed``, an attempt of the same task that met an infrastructure
        failure."""
        self.failed_attempts = [*failed.failed_attempts, str(failed.infra_failure)]

    def extend(
        self, token_ids: Sequence[int], trained: bool, logprobs: Sequence[float] | None = None, version: int = -1
    ) -> None:
        """Appends tokens to the completion, with their mask, log-probabilities and policy version (sampled tokens)."""
        self.completion_ids.extend(token_ids)
        self.env_mask.extend([int(trained)] * len(token_ids))
        self.logprobs.extend(logprobs if logprobs is not None else [0.0] * len(token_ids))
        self.versions.extend([version if trained else -1] * len(token_ids))


def _episode_counts(info: Mapping[str, Any]) -> tuple[int, int]:
    calls = len(info.get("tool_calls", ())) + len(info.get("parse_errors", ()))
    errors = sum(info.get("error_counts", {}).values())
    return calls, errors


SUCCESS_COMPONENTS = ("correct", "success")
"""The reward components that say whether an episode succeeded, the first present deciding: an answer reward's
``correct``, a world reward's ``success`` (a world that pays its progress at each step ends on its last increment, not
on 1). Without either, the env's outcome reward of the last step decides (1: success)."""


def _is_correct(reward: float, info: Mapping[str, Any]) -> bool:
    components = info.get("reward_components") or {}
    verdict = next((components[name] for name in SUCCESS_COMPONENTS if name in components), reward)
    return bool(verdict >= 1.0 - 1e-9)


@dataclass
class EngineTime:
    """Where a rollout's wall time went, seconds: the generation engine had requests (``busy_s``) or sat idle
    while every unfinished episode waited on its env (``idle_s``)."""

    busy_s: float = 0.0
    idle_s: float = 0.0

    @property
    def idle_fraction(self) -> float:
        """``idle_s`` over the total (0 when nothing ran)."""
        total = self.busy_s + self.idle_s
        return self.idle_s / total if total else 0.0


StepResult = tuple[tuple[Any, ...], float]
"""``(env.step(text), seconds it took)``."""


def step_env(env: gym.Env, text: Action) -> StepResult:
    """``env.step(text)`` (the turn's text, or its message where the trainer reads the tool calls) and its wall
    time, seconds (run in a worker thread)."""
    start = time.perf_counter()
    result = env.step(text)
    return result, time.perf_counter() - start


def start_episode(env: gym.Env, task: Mapping[str, Any], codec: ChatCodec, max_images: int | None = None) -> Trajectory:
    """Resets ``env`` into ``task`` and returns the episode's trajectory, holding the prompt (with its newest
    ``max_images`` images, :attr:`RolloutBudgets.max_images`).

    A reset that raises :class:`~agentfly_envs.errors.InfrastructureError` (its server, actor or world is down)
    returns an empty trajectory that already ended on that failure (:attr:`Trajectory.excluded`), for
    :func:`replay` to try again."""
    start = time.perf_counter()
    try:
        _, info = env.reset(options={"task": dict(task)})
    except InfrastructureError as error:
        failure = f"reset: {one_line(error)}"
        return Trajectory(prompt_ids=[], infra_failure=failure, env_seconds=time.perf_counter() - start)
    messages = list(info["messages"])
    prompt, images = codec.drop_oldest_images(codec.prompt_ids(messages), message_images(messages), max_images)
    trajectory = Trajectory(prompt_ids=prompt, messages=messages, images=images, history=TurnHistory(list(messages)))
    trajectory.env_seconds = time.perf_counter() - start
    return trajectory


def replay(
    trajectory: Trajectory,
    env: gym.Env,
    task: Mapping[str, Any],
    codec: ChatCodec,
    budgets: RolloutBudgets,
    retries: int,
) -> Trajectory | None:
    """A fresh attempt at ``task`` on ``env`` (reset again) when the finished ``trajectory`` met an infrastructure
    failure and has had fewer than ``retries`` replays; ``None`` when it stands as it is.

    An attempt whose reset fails is replayed in turn while replays are left; the attempt returned is then either
    ready for its first turn (``infra_failure is None``) or already ended, excluded, on its reset's failure."""
    attempt = None
    while trajectory.infra_failure is not None and len(trajectory.failed_attempts) < retries:
        attempt = start_episode(env, task, codec, budgets.max_images)
        attempt.replays(trajectory)
        trajectory = attempt
    return attempt


def open_episode(
    env: gym.Env, task: Mapping[str, Any], codec: ChatCodec, budgets: RolloutBudgets, retries: int
) -> Trajectory:
    """:func:`start_episode`, its reset tried up to ``retries`` more times while it fails on an infrastructure
    failure; the trajectory is ready for its first turn unless every reset failed (then it ended, excluded)."""
    trajectory = start_episode(env, task, codec, budgets.max_images)
    return replay(trajectory, env, task, codec, budgets, retries) or trajectory


def play_turns(
    env: gym.Env,
    task: Mapping[str, Any],
    codec: ChatCodec,
    script: Callable[[], Sequence[tuple[Action, list[int], list[int]]]],
    budgets: RolloutBudgets,
) -> Trajectory:
    """A scripted episode (a demonstration): ``env`` reset into ``task`` (:func:`start_episode`), then each turn
    ``script()`` gives once the env is reset (a demonstrator's golden actions are its current task's), as
    ``(action, its token ids, their env_mask)``, stepped and recorded as a sampled one would be (:func:`step_env`,
    :func:`record_turn`; the mask says which of its tokens are trained) until the episode ends. A reset that met an
    infrastructure failure ends it at once (:attr:`Trajectory.excluded`), unscripted."""
    trajectory = start_episode(env, task, codec, budgets.max_images)
    for action, ids, mask in () if trajectory.excluded else script():
        stepped = step_env(env, action)
        turn = Generation(ids, [0.0] * len(ids), stopped=True)
        going = record_turn(trajectory, turn, action, stepped, codec, budgets)
        span = trajectory.turn_spans[-1]
        trajectory.env_mask[span.start : span.end] = mask
        if not going:
            break
    return trajectory


def room_left(trajectory: Trajectory, budgets: RolloutBudgets) -> int:
    """Tokens the completion may still grow by."""
    return budgets.response_length - len(trajectory.completion_ids)


def turn_budget(trajectory: Trajectory, budgets: RolloutBudgets) -> int:
    """New tokens the next turn may sample."""
    return min(budgets.max_tokens_per_turn, room_left(trajectory, budgets))


def needs_env_step(generation: Generation, room: int) -> bool:
    """Whether a sampled turn goes to the env: it ended (EOS) or stopped at the per-turn budget. A turn cut by
    the completion budget (``room`` tokens) ends its episode unscored instead."""
    return generation.stopped or len(generation.token_ids) < room


def record_turn(
    trajectory: Trajectory,
    generation: Generation,
    text: Action,
    stepped: StepResult | None,
    codec: ChatCodec,
    budgets: RolloutBudgets,
    version: int = 0,
) -> bool:
    """Appends a sampled turn and the env's answer to it to the trajectory.

    Args:
        trajectory: The episode.
        generation: The sampled turn.
        text: Its decoded text, or message (:meth:`ChatCodec.decode`; what the env was given).
        stepped: The env's step on ``text``, or ``None`` when the completion budget cut the turn.
        codec: Chat-template token ids.
        budgets: The episode's limits (and the reward of an episode they cut short).
        version: The policy version that sampled the turn.

    Returns:
        Whether the episode goes on (it may still run out of turns: see :func:`finish`).
    """
    start = len(trajectory.completion_ids)
    trajectory.extend(generation.token_ids, trained=True, logprobs=generation.logprobs, version=version)
    context, images = trajectory.context_ids, list(trajectory.images)
    trajectory.turn_spans.append(TurnSpan(context, len(context), images, start, len(trajectory.completion_ids)))
    trajectory.messages.append(assistant_message(text))
    trajectory.num_turns += 1
    end, info = _record_step(trajectory, stepped)
    kept = codec.kept_ids(generation.token_ids)
    trajectory.context_ids += kept
    if end is None:
        messages = info["messages"]
        observation = codec.observation_ids(messages, closed_turn=generation.stopped, action=text)
        if len(trajectory.completion_ids) + len(observation) < budgets.response_length:
            trajectory.extend(observation, trained=False)
            trajectory.messages.extend(messages)
            trajectory.context_ids += observation
            if budgets.context.rewrites_context:
                turn = ContextTurn(kept, observation, messages, generation.stopped, text)
                trajectory.context_ids = budgets.context.next_context(
                    trajectory.prompt_ids, trajectory.history, turn, codec
                )
            trajectory.context_ids, trajectory.images = codec.drop_oldest_images(
                trajectory.context_ids, trajectory.images + message_images(messages), budgets.max_images
            )
            return True
        end, info = "length", {}
    finish(trajectory, end, budgets.truncation_reward if end == "length" else 0.0, info or None)
    return False


def _record_step(trajectory: Trajectory, stepped: StepResult | None) -> tuple[str | None, dict[str, Any]]:
    """Records the env's step on a turn (its reward, time, tool calls and errors) in the trajectory: ``(end, info)``,
    where ``end`` is the finish reason when the step ended the episode (``"length"`` for a turn the completion budget
    cut, which the env never saw and which pays 0), else ``None``; ``info`` is the step's info."""
    if stepped is None:
        trajectory.turn_calls.append([])
        trajectory.turn_rewards.append(0.0)
        return "length", {}
    (_, reward, terminated, truncated, info), seconds = stepped
    trajectory.turn_rewards.append(float(reward))
    trajectory.env_seconds += seconds
    calls, errors = _episode_counts(info)
    trajectory.num_tool_calls += calls
    trajectory.num_tool_errors = errors
    trajectory.error_counts = dict(info.get("error_counts", {}))
    parse_errors = [{"error": message} for message in info.get("parse_errors", ())]
    trajectory.turn_calls.append([*info.get("tool_calls", ()), *parse_errors])
    if terminated or truncated:
        return "stop" if terminated else "max_turns", info
    return None, info


def summary_request(trajectory: Trajectory, codec: ChatCodec, budgets: RolloutBudgets) -> list[int] | None:
    """The prompt of the summary the context policy writes before the episode's next turn
    (:meth:`~agentfly_train.context_policies.ContextPolicy.summary_request`), or ``None``."""
    return budgets.context.summary_request(trajectory.history, codec)


def take_summary(trajectory: Trajectory, generation: Generation, codec: ChatCodec, budgets: RolloutBudgets) -> None:
    """Records the summary sampled for :func:`summary_request` (never trained) and rebuilds the episode's context with
    it."""
    history = trajectory.history
    trajectory.context_ids = budgets.context.take_summary(trajectory.prompt_ids, history, generation.token_ids, codec)


def training_rows(trajectories: Sequence[Trajectory], turns: int | None = None) -> dict[str, list[Any]]:
    """The rows the trainer trains on (TRL's ``rollout_func`` output), episodes in order.

    Args:
        trajectories: Finished episodes.
        turns: ``None``: one row per episode, its prompt and whole completion (its context never rewritten). A
            number (the turn budget; past reasoning or old screenshots dropped): that many rows per episode, one per
            turn, each the context the turn was sampled after (``prompt_ids``) and its sampled tokens (with their
            ``env_mask``: 1, or where a golden demonstration masks some out of its loss); a turn the
            episode did not take is a row of one token with ``env_mask = 0`` (nothing trained); an episode that
            :attr:`~Trajectory.grows` is its one row, then such rows. An
            :attr:`~Trajectory.excluded` episode's rows have ``env_mask = 0`` throughout: nothing of it is trained.

    Returns:
        ``prompt_ids``, ``completion_ids``, ``logprobs`` (sampling log-probs), ``env_mask`` and ``env_reward`` (the
        episode's reward on each of its rows), one entry per row.
    """
    rows: dict[str, list[Any]] = {
        "prompt_ids": [],
        "completion_ids": [],
        "logprobs": [],
        "env_mask": [],
        "env_reward": [],
    }

    def add(prompt: list[int], completion: list[int], logprobs: list[float], mask: list[int], reward: float) -> None:
        for key, value in zip(rows, (prompt, completion, logprobs, mask, reward), strict=True):
            rows[key].append(value)

    for t in trajectories:
        if not t.completion_ids:  # every reset failed (excluded): one untrained token stands for it, as TRL needs
            t = replace(t, prompt_ids=t.prompt_ids or [0], completion_ids=[0], logprobs=[0.0], env_mask=[0])
        env_mask = [0] * len(t.env_mask) if t.excluded else t.env_mask
        if turns is None or t.grows:
            add(t.prompt_ids, t.completion_ids, t.logprobs, env_mask, t.reward)
        spans = [] if turns is None or t.grows else t.turn_spans[:turns]
        for span in spans:
            start, end = span.start, span.end
            add(span.context, t.completion_ids[start:end], t.logprobs[start:end], env_mask[start:end], t.reward)
        for _ in range(0 if turns is None else turns - (1 if t.grows else len(spans))):
            add(t.prompt_ids, (t.completion_ids or t.prompt_ids)[-1:], [0.0], [0], t.reward)
    return rows


def row_images(trajectories: Sequence[Trajectory], turns: int | None = None) -> list[list[Any]]:
    """Per row of :func:`training_rows` (same ``turns``), the images its prompt and completion tokens hold, in order:
    an episode's images, or a turn's context's (the first turn's for the rows of turns not taken)."""
    rows: list[list[Any]] = []
    for t in trajectories:
        if turns is None:
            rows.append(message_images(t.messages))
            continue
        spans = t.turn_spans[:turns]
        rows += [span.images for span in spans] + [t.turn_spans[0].images] * (turns - len(spans))
    return rows


def supervised_rows(trajectory: Trajectory, codec: ChatCodec, step_wise: bool) -> list[dict[str, list[Any]]]:
    """A demonstrated episode's rows for supervised training, those RL would train on (:func:`training_rows`: a row per
    turn when the rollout trains step-wise, :attr:`RolloutBudgets.step_wise`), each prompt and completion as one
    sequence: ``input_ids``, and ``assistant_masks`` (0 on the prompt, the completion's ``env_mask``); with a
    vision-language codec also ``images``, the row's images (:func:`row_images`)."""
    turns = len(trajectory.turn_spans) if step_wise else None
    rollout_rows = training_rows([trajectory], turns)
    images = row_images([trajectory], turns)
    rows = []
    for n, (prompt, completion, mask) in enumerate(
        zip(rollout_rows["prompt_ids"], rollout_rows["completion_ids"], rollout_rows["env_mask"], strict=True)
    ):
        row = {"input_ids": [*prompt, *completion], "assistant_masks": [0] * len(prompt) + list(mask)}
        rows.append(row | {"images": images[n]} if codec.images is not None else row)
    return rows


def finish(
    trajectory: Trajectory, reason: str, truncation_reward: float = 0.0, info: Mapping[str, Any] | None = None
) -> None:
    """Ends the episode with ``reason`` (one of :data:`FINISH_REASONS`): ``truncation_reward`` (the env's,
    :attr:`RolloutBudgets.truncation_reward`, where the budgets ended the episode, not the env) is added to its last
    turn's reward, and its reward is the sum of its turns' (:attr:`Trajectory.turn_rewards`). ``info`` is the info of
    the env's step that ended it (``None`` where the env did not)."""
    rewards = trajectory.turn_rewards
    if rewards:
        rewards[-1] += float(truncation_reward)
    trajectory.finish_reason = reason
    trajectory.reward = float(sum(rewards))
    info = info or {}
    outcome = rewards[-1] - info.get("turn_reward", 0.0) if rewards else 0.0  # the last step's, without its turn's
    trajectory.outcome_reward = outcome
    trajectory.correct = _is_correct(outcome, info) if reason == "stop" else False
    trajectory.reward_components = dict(info.get("reward_components") or {})
    trajectory.reward_error = info.get("reward_error")
    trajectory.infra_failure = info.get("infra_failure")


def failure_notes(trajectories: Sequence[Trajectory], seen: set[str]) -> list[str]:
    """One line per reward failure, and per infrastructure failure (of an episode or of an attempt it replayed), not
    in ``seen`` (which it then joins), with its count in ``trajectories``.

    Example:
        >>> failed = Trajectory(prompt_ids=[], reward_error="reward function 'f' raised ValueError: no")
        >>> lost = Trajectory(prompt_ids=[], failed_attempts=["tool python_executor: no session"])
        >>> seen = set()
        >>> failure_notes([failed, failed, lost], seen)  # doctest: +NORMALIZE_WHITESPACE
        ["note: reward function 'f' raised ValueError: no; 2 episode(s) scored 0 (counted in reward/errors)",
         'note: infrastructure failure: tool python_executor: no session; 1 attempt(s) replayed or left out of
         training (counted in rollout/infra_failures)']
        >>> failure_notes([failed, lost], seen)
        []
    """
    rewards = Counter(t.reward_error for t in trajectories if t.reward_error is not None)
    infra = Counter(f for t in trajectories for f in [*t.failed_attempts, t.infra_failure] if f is not None)
    notes = [
        *(f"{error}; {count} episode(s) scored 0 (counted in reward/errors)" for error, count in rewards.items()
          if error not in seen),
        *(f"infrastructure failure: {failure}; {count} attempt(s) replayed or left out of training (counted in "
          "rollout/infra_failures)" for failure, count in infra.items() if failure not in seen),
    ]  # fmt: skip
    seen.update(rewards, infra)
    return [f"note: {note}" for note in notes]


def summarize(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """Per-batch statistics of finished episodes (means over the scored episodes unless named otherwise: an episode
    that ended on an infrastructure failure is not scored, :attr:`Trajectory.excluded`).

    Returns:
        ``reward/{mean,std,min,max}``, ``reward/errors`` (episodes whose reward function failed: a count, not a
        mean), ``accuracy``, ``episode/{turns,tool_calls,tool_error_rate,
        response_length,sampled_tokens}``, ``episode/tool_error_rate/<kind>`` (errors of each of the env's
        ``ERROR_KINDS`` per tool call), ``finish_reason/<reason>`` (fractions), ``env_seconds`` (sum), and the
        counts ``rollout/infra_failures`` (attempts that met an infrastructure failure), ``rollout/retried`` (those
        replayed) and ``rollout/excluded`` (episodes whose every attempt failed); with an LLM judge,
        ``reward/judge/score`` and ``reward/judge/<criterion>`` (a rubric's) or ``reward/judge/rank`` (means over the
        judged episodes).
    """
    import statistics

    scored = [t for t in trajectories if not t.excluded]
    count = max(len(scored), 1)
    rewards = [t.reward for t in scored] or [0.0]
    calls = sum(t.num_tool_calls for t in scored)
    reasons = Counter(t.finish_reason for t in scored)
    stats = {
        "reward/mean": statistics.fmean(rewards),
        "reward/std": statistics.pstdev(rewards),
        "reward/min": min(rewards),
        "reward/max": max(rewards),
        "reward/errors": sum(t.reward_error is not None for t in scored),
        "accuracy": sum(t.correct for t in scored) / count,
        "episode/turns": sum(t.num_turns for t in scored) / count,
        "episode/tool_calls": calls / count,
        "episode/tool_error_rate": sum(t.num_tool_errors for t in scored) / max(calls, 1),
        "episode/response_length": sum(len(t.completion_ids) for t in scored) / count,
        "episode/sampled_tokens": sum(sum(t.env_mask) for t in scored) / count,
        "env_seconds": sum(t.env_seconds for t in trajectories),
        "rollout/infra_failures": sum(len(t.failed_attempts) + t.excluded for t in trajectories),
        "rollout/retried": sum(len(t.failed_attempts) for t in trajectories),
        "rollout/excluded": sum(t.excluded for t in trajectories),
    }
    judged = sorted({name for t in scored for name in t.reward_components if name.startswith("judge/")})
    for name in judged:  # the judge's score and a rubric's criteria: the means over the episodes it scored
        values = [t.reward_components[name] for t in scored if name in t.reward_components]
        stats[f"reward/{name}"] = statistics.fmean(values)
    for kind in ERROR_KINDS:
        errors = sum(t.error_counts.get(kind, 0) for t in scored)
        stats[f"episode/tool_error_rate/{kind}"] = errors / max(calls, 1)
    stats.update({f"finish_reason/{reason}": reasons[reason] / count for reason in FINISH_REASONS})
    return stats
