"""The SFT warm start's data: an env's demonstrations, tokenised exactly as rollouts are.

A golden episode is played through the rollout's own episode code with its
:class:`~agentfly_train.rollout.ChatCodec` (prompt, then each golden assistant turn through its end-of-turn token,
written in the model family's own tool-call format as the chat template renders it with ``agent_type=hf``, then the
env's observation turn), so the model learns the same token sequences it will sample: screenshots as their
placeholder tokens, and each turn a row of its own in the context it would be sampled in where the rollout rewrites
the context (``agent.max_images``, ``agent.past_reasoning=drop``). Only assistant tokens carry loss.

Demonstrations may be imperfect on purpose (``guess_fraction``): the demonstrator skips the tools and answers with a
guess. The guessed number itself carries no loss: the model learns the decision to skip the tools and the answer's
format, not to write numbers unrelated to its context (which would compete with copying the tool's result into the
answer: with the guesses trained on, the quickstart's warm start copied the result right in 1 of 5 tasks, without them
in 15 of 16, at the same number of steps). :func:`warm_start_phases` gives the ``sft.*`` warm start's phases that
:func:`~agentfly_train.sft.warm_start` trains.
"""

from __future__ import annotations

import functools
import random
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import gymnasium as gym

from agentfly_envs.contract import TrainableEnv, env_contract
from agentfly_envs.demonstrations import golden_answer
from agentfly_envs.parsers import Action
from agentfly_train.config.schema import SFTWarmupConfig
from agentfly_train.rollout import ChatCodec, RolloutBudgets
from agentfly_train.rollout.episode import play_turns, supervised_rows
from agentfly_train.sft import WarmStartPhase

Rows = list[dict[str, list[Any]]]
"""Tokenised demonstration rows: ``input_ids`` and ``assistant_masks`` (and ``images`` with a vision-language codec)."""


def golden_token_rows(
    env: gym.Env,
    codec: ChatCodec,
    tasks: Sequence[Mapping[str, Any]],
    guess_fraction: float = 0.0,
    seed: int = 0,
    wrong_guesses: bool = False,
    rollout: RolloutBudgets | None = None,
) -> Rows:
    """Tokenised demonstrations: golden episodes, and optionally guesses.

    Each demonstration is played through the rollout's own episode logic as a scripted episode
    (:func:`~agentfly_train.rollout.episode.play_turns`), its assistant turns standing for sampled ones, so its rows
    are those RL trains on: screenshots expanded to their placeholder tokens (never trained), and, where the rollout
    trains step-wise (past reasoning dropped, screenshots beyond ``max_images``, a context policy,
    :attr:`~agentfly_train.rollout.RolloutBudgets.step_wise`), one row per turn in the context the turn would have
    been sampled in
    (:func:`~agentfly_train.rollout.training_rows`).

    Args:
        env: The env (its parser formats the golden calls).
        codec: The rollout's chat-template codec.
        tasks: Task rows with golden solutions.
        guess_fraction: Share of the demonstrations (chosen at random, in [0, 1]) in which the demonstrator
            skips the tools and answers at once with a guess: the golden answer of another task (right by chance
            where the two share it). The guessed answer's tokens are masked out of the loss (located as
            :func:`_assistant_turn` says), unless ``wrong_guesses``.
            Tasks with no golden answer (a world's games, which end in the world) are always demonstrated in full.
        seed: Seed of that choice.
        wrong_guesses: Guess only answers that differ from the task's own (for a few tasks repeated, where another
            demonstration is often of the same task); a task no other answer differs from is demonstrated in full.
            These wrong answers are trained on: a model that has memorised the few tasks' answers must still learn
            that its guesses fail.
        rollout: The rollout's budgets: its cap on images, its context policy and whether it trains step-wise (its
            turn and token limits do not bind demonstrations); ``None``: no cap, the full context, a row per episode.

    Returns:
        Rows with ``input_ids`` (prompt + completion) and ``assistant_masks`` (1 on assistant tokens), in task order
        (none of a demonstration that met an infrastructure failure)
        (a task's turns in order where each turn is a row); with a vision-language codec also ``images``, the
        row's images in the order of their placeholder tokens (PIL images).
    """
    demonstrator = _Demonstrator.of(env_contract(env), codec, tasks, guess_fraction, seed, wrong_guesses)
    [rows] = _demonstrated_rows(env, codec, tasks, [demonstrator], rollout)
    return rows


def warm_start_phases(
    env: gym.Env,
    contract: TrainableEnv,
    codec: ChatCodec,
    tasks: Sequence[Mapping[str, Any]],
    sft: SFTWarmupConfig,
    seed: int,
    rollout: RolloutBudgets | None = None,
) -> list[WarmStartPhase]:
    """The ``sft.*`` warm start's phases: the first ``sft.golden_fraction`` of ``sft.steps`` on golden episodes
    (:func:`golden_token_rows`), the rest on the demonstrations with ``sft.guess_fraction`` guesses. Each phase warms
    up; the golden phase then holds the peak rate and the last phase decays it (``sft.lr_scheduler_type``): warm-up,
    stable, decay (a rate decaying during the golden phase left copying unlearnt in some seeds). A task demonstrated
    in full in both phases is played once.

    Args:
        env: The training env.
        contract: Its contract members (:func:`~agentfly_envs.contract.env_contract`).
        codec: The rollout's chat-template codec.
        tasks: The demonstrated task rows.
        sft: The ``sft`` config section.
        seed: Seed of the guesses.
        rollout: The rollout's budgets (:func:`golden_token_rows`).

    Returns:
        The phases with steps, in order (one where the other would have none).
    """
    golden_steps = round(sft.golden_fraction * sft.steps)
    rest = sft.steps - golden_steps
    phases = [
        (_Demonstrator.of(contract, codec, tasks, fraction, seed), WarmStartPhase([], steps, schedule))
        for fraction, steps, schedule in [
            (0.0, golden_steps, "constant_with_warmup" if rest else sft.lr_scheduler_type),
            (sft.guess_fraction, rest, sft.lr_scheduler_type),
        ]
        if steps
    ]
    demonstrated = _demonstrated_rows(env, codec, tasks, [demonstrator for demonstrator, _ in phases], rollout)
    return [replace(phase, rows=rows) for (_, phase), rows in zip(phases, demonstrated, strict=True)]


def _demonstrated_rows(
    env: gym.Env,
    codec: ChatCodec,
    tasks: Sequence[Mapping[str, Any]],
    demonstrators: Sequence[_Demonstrator],
    rollout: RolloutBudgets | None,
) -> list[Rows]:
    """Each demonstrator's rows of ``tasks`` (a list per demonstrator), task by task and, within a task, demonstrator
    by demonstrator; a task that several demonstrate in full is played once. A demonstration that met an
    infrastructure failure gives no rows: it teaches nothing."""
    unlimited = {"max_turns": sys.maxsize, "max_tokens_per_turn": sys.maxsize, "response_length": sys.maxsize}
    budgets = replace(rollout, **unlimited) if rollout is not None else RolloutBudgets(**unlimited)
    rows: list[Rows] = [[] for _ in demonstrators]
    for index, task in enumerate(tasks):
        in_full = None
        for demonstrated, demonstrator in zip(rows, demonstrators, strict=True):
            guesses = demonstrator.may_guess(index)
            if guesses or in_full is None:
                trajectory = play_turns(env, task, codec, functools.partial(demonstrator.turns, index), budgets)
                played = [] if trajectory.excluded else supervised_rows(trajectory, codec, budgets.step_wise)
                if not guesses:
                    in_full = played
            demonstrated += played if guesses else in_full
    return rows


@dataclass
class _Demonstrator:
    """The demonstrator of :func:`golden_token_rows`: in each task's episode, once its env is reset, the task's golden
    actions, or a guessed answer at once (drawn from ``rng`` then, in task order).

    Attributes:
        contract: The env's contract (its golden actions, and its parser's answer turn).
        codec: The rollout's chat-template codec.
        rng: Draws the guesses.
        guessed: The indices of the tasks answered with a guess.
        answers: Each task's golden answer (``None``: it has none, and is demonstrated in full).
        wrong_guesses: Guess only answers that differ from the task's own, and train on them.
    """

    contract: TrainableEnv
    codec: ChatCodec
    rng: random.Random
    guessed: set[int]
    answers: list[str | None]
    wrong_guesses: bool

    @classmethod
    def of(
        cls,
        contract: TrainableEnv,
        codec: ChatCodec,
        tasks: Sequence[Mapping[str, Any]],
        guess_fraction: float,
        seed: int,
        wrong_guesses: bool = False,
    ) -> _Demonstrator:
        """The demonstrator of ``tasks`` guessing in ``guess_fraction`` of them, chosen with ``seed``
        (:func:`golden_token_rows`)."""
        rng = random.Random(seed)
        guessed = set(rng.sample(range(len(tasks)), round(guess_fraction * len(tasks))))
        answers = [golden_answer(contract.tasks, task) for task in tasks] if guessed else []
        return cls(contract, codec, rng, guessed, answers, wrong_guesses)

    def may_guess(self, index: int) -> bool:
        """Whether task ``index`` may be answered with a guess (otherwise it is demonstrated in full)."""
        return index in self.guessed and self.answers[index] is not None

    def turns(self, index: int) -> list[tuple[Action, list[int], list[int]]]:
        """The turns of task ``index``, each action with its tokens and loss mask (:func:`_assistant_turn`; a guess
        the model must not copy is masked out of it)."""
        guess = self._guess(index)
        actions = [self.contract.answer_action(guess)] if guess is not None else self.contract.golden_actions()
        masked = None if self.wrong_guesses else guess
        return [(action, *_assistant_turn(self.codec, action, masked)) for action in actions]

    def _guess(self, index: int) -> str | None:
        """The answer task ``index`` is guessed with (``None``: demonstrated in full): the golden answer of another
        task, or with ``wrong_guesses`` one that differs from its own."""
        answers = self.answers
        if not self.may_guess(index):
            return None
        if self.wrong_guesses:
            wrong = [answer for answer in answers if answer is not None and answer != answers[index]]
            return self.rng.choice(wrong) if wrong else None
        return answers[(index + self.rng.randrange(1, len(answers))) % len(answers)]


def _assistant_turn(codec: ChatCodec, action: Action, masked: str | None) -> tuple[list[int], list[int]]:
    """An assistant turn's tokens through its end-of-turn token (:meth:`ChatCodec.turn_ids`, in the model's own
    format where the codec writes it), and their loss mask: 1 everywhere but on the tokens of ``masked`` (its last
    occurrence in the turn). The span is where the encodings of the text before and through ``masked`` end, when both
    are prefixes of the turn's; otherwise the tokens whose character offsets overlap it (a fast tokenizer's; some,
    e.g. DeepSeek V3's, give offsets that locate nothing)."""
    ids = codec.turn_ids(action)
    text = codec.tokenizer.decode(ids)
    mask = [1] * len(ids)
    if masked is not None and masked in text:
        start = text.rindex(masked)
        end = start + len(masked)
        before, through = codec.encode(text[:start]), codec.encode(text[:end])
        if ids[: len(before)] == before and ids[: len(through)] == through:
            mask[len(before) : len(through)] = [0] * (len(through) - len(before))
        elif getattr(codec.tokenizer, "is_fast", False):
            offsets = codec.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
            if len(offsets) == len(ids):
                mask = [0 if first < end and last > start else 1 for first, last in offsets]
    return ids, mask
