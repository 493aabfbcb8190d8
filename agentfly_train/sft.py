"""Supervised warm start on an env's golden demonstrations, tokenised exactly as rollouts are.

A golden episode is played through the rollout's own episode code with its
:class:`~agentfly_train.rollout.ChatCodec` (prompt, then each golden assistant turn through its end-of-turn token,
written in the model family's own tool-call format as the chat template renders it with ``agent_type=hf``, then the
env's observation turn), so the model learns the same token sequences it will sample: screenshots as their
placeholder tokens, and each turn a row of its own in the context it would be sampled in where the rollout rewrites
the context (``agent.max_images``, ``agent.past_reasoning=drop``). Only assistant tokens carry loss. Training runs
through TRL's ``SFTTrainer`` on the pre-tokenised rows (``input_ids`` + ``assistant_masks``); a vision-language
policy's batches also get their rows' pixel inputs (:class:`PixelCollator`).

Demonstrations may be imperfect on purpose (``guess_fraction``): the demonstrator skips the tools and answers with a
guess. The guessed number itself carries no loss: the model learns the decision to skip the tools and the answer's
format, not to write numbers unrelated to its context (which would compete with copying the tool's result into the
answer: with the guesses trained on, the quickstart's warm start copied the result right in 1 of 5 tasks, without them
in 15 of 16, at the same number of steps).
"""

from __future__ import annotations

import contextlib
import functools
import random
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from agentfly_envs.contract import TrainableEnv, env_contract
from agentfly_envs.demonstrations import golden_answer
from agentfly_envs.parsers import Action
from agentfly_train.config.schema import SFTWarmupConfig
from agentfly_train.rollout import ChatCodec, RolloutBudgets
from agentfly_train.rollout.episode import play_turns, supervised_rows
from agentfly_train.vision import ImageInputs


def golden_token_rows(
    env: gym.Env,
    codec: ChatCodec,
    tasks: Sequence[Mapping[str, Any]],
    guess_fraction: float = 0.0,
    seed: int = 0,
    wrong_guesses: bool = False,
    max_images: int | None = None,
) -> list[dict[str, list[Any]]]:
    """Tokenised demonstrations: golden episodes, and optionally guesses.

    Each demonstration is played through the rollout's own episode logic as a scripted episode
    (:func:`~agentfly_train.rollout.episode.play_turns`), its assistant turns standing for sampled ones, so its rows
    are those RL trains on: screenshots expanded to their placeholder tokens (never trained), and, where the rollout
    rewrites the context between turns (past reasoning dropped, screenshots beyond ``max_images``),
    one row per turn in the context the turn would have been sampled in
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
        max_images: The rollout's cap on images in an episode's context (``agent.max_images``; ``None``: no cap).

    Returns:
        Rows with ``input_ids`` (prompt + completion) and ``assistant_masks`` (1 on assistant tokens), in task order
        (none of a demonstration that met an infrastructure failure)
        (a task's turns in order where each turn is a row); with a vision-language codec also ``images``, the
        row's images in the order of their placeholder tokens (PIL images).
    """
    rng = random.Random(seed)
    guessed = set(rng.sample(range(len(tasks)), round(guess_fraction * len(tasks))))
    contract = env_contract(env)
    answers = [golden_answer(contract.tasks, task) for task in tasks] if guessed else []
    demonstrator = _Demonstrator(contract, codec, rng, guessed, answers, wrong_guesses)
    budgets = RolloutBudgets(max_turns=sys.maxsize, max_tokens_per_turn=sys.maxsize, response_length=sys.maxsize,
                             max_images=max_images)  # fmt: skip
    rows = []
    for index, task in enumerate(tasks):
        trajectory = play_turns(env, task, codec, functools.partial(demonstrator.turns, index), budgets)
        if not trajectory.excluded:  # a demonstration that met an infrastructure failure teaches nothing
            rows += supervised_rows(trajectory, codec, max_images)
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
        if index not in self.guessed or answers[index] is None:
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


@dataclass(frozen=True)
class PixelCollator:
    """TRL's collator of pre-tokenised rows (``DataCollatorForLanguageModeling``: padding, labels from the
    assistant masks), plus the pixel inputs of the batch's rows' images and their image token types
    (``mm_token_type_ids``), as the RL loss forward passes them. The dataset's rows hold their index (``row``) into
    ``images``, whose PIL images stay in memory, as the rollout's do, instead of a dataset column (which would make
    ``SFTTrainer`` take the rows for raw vision data, to render and tokenise itself).

    Attributes:
        collate: TRL's collator.
        images: Per dataset row, its images in the order of their placeholder tokens.
        inputs: The policy's image inputs.
    """

    collate: Any
    images: Sequence[Sequence[Any]]
    inputs: ImageInputs

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        """The batch of ``examples`` (rows with ``input_ids``, ``labels`` and ``row``): TRL's padded ``input_ids``,
        ``attention_mask`` and ``labels``, plus, where a row has images, ``pixel_values``, ``image_grid_thw`` and
        ``mm_token_type_ids`` ((B, L) int, 1 on image tokens)."""
        batch = self.collate(examples)
        pixels = self.inputs.pixel_inputs([self.images[example["row"]] for example in examples])
        if pixels:
            pixels.pop("num_images")  # the model takes the batch's images in row order
            batch |= pixels | {"mm_token_type_ids": self.inputs.token_types(batch["input_ids"])}
        return batch


def warm_start(
    model: Any,
    tokenizer: Any,
    rows: Sequence[Mapping[str, list[Any]]],
    *,
    steps: int,
    lr: float,
    batch_size: int,
    output_dir: str,
    use_cpu: bool,
    seed: int,
    bf16: bool = False,
    lr_scheduler_type: str = "linear",
    warmup_ratio: float = 0.05,
    images: ImageInputs | None = None,
    progress: Any = None,
) -> float:
    """Fine-tunes ``model`` in place on tokenised demonstrations.

    Args:
        model: The policy.
        tokenizer: Its tokenizer (for padding).
        rows: From :func:`golden_token_rows`.
        steps: Optimiser steps.
        lr: Peak learning rate.
        batch_size: Rows per step.
        output_dir: Scratch directory for TRL (nothing is saved).
        use_cpu: Train on CPU.
        seed: Data order and dropout seed.
        bf16: bfloat16 mixed precision (must match the RL trainer's: Accelerate's state is per process).
        lr_scheduler_type: The rate after the warm-up: ``linear`` (to 0), ``cosine``, ``constant`` or
            ``constant_with_warmup`` (transformers' schedule names).
        warmup_ratio: Share of the steps over which the rate rises linearly to ``lr``.
        images: A vision-language policy's image inputs: the loss forward gets the pixel inputs of the rows'
            ``images`` (:class:`PixelCollator`).
        progress: A console bar (:func:`~agentfly_train.progress.console_bar`) that the steps advance, the loss
            beside it; ``None``: no bar.

    Returns:
        The mean training loss (nats per assistant token).
    """
    from datasets import Dataset
    from transformers.trainer_callback import PrinterCallback
    from trl import SFTConfig, SFTTrainer
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    from agentfly_train.progress import StepBar
    from agentfly_train.trl_args import checkpointing_argument

    args = SFTConfig(
        output_dir=output_dir,
        max_steps=steps,
        learning_rate=lr,
        lr_scheduler_type=lr_scheduler_type,
        warmup_steps=round(warmup_ratio * steps),
        per_device_train_batch_size=batch_size,
        **checkpointing_argument(SFTConfig, False),
        report_to=[],
        save_strategy="no",
        logging_steps=max(steps // 5, 1),
        disable_tqdm=True,
        use_cpu=use_cpu,
        bf16=bf16,
        seed=seed,
        max_length=None,
        remove_unused_columns=images is None,  # the rows' ``row``, for the collator
    )
    dataset = [{"input_ids": row["input_ids"], "assistant_masks": row["assistant_masks"]} for row in rows]
    collator = None
    if images is not None:
        dataset = [row | {"row": n} for n, row in enumerate(dataset)]
        pad = tokenizer.eos_token_id if tokenizer.pad_token_id is None else tokenizer.pad_token_id
        collator = PixelCollator(DataCollatorForLanguageModeling(pad), [row["images"] for row in rows], images)
    trainer = SFTTrainer(
        model=model,
        args=args,
        data_collator=collator,
        train_dataset=Dataset.from_list(dataset),
        processing_class=tokenizer,
        callbacks=[StepBar(progress, {"loss": "loss"})] if progress is not None else None,
    )
    trainer.remove_callback(PrinterCallback)  # its raw log dicts on stdout; the run reports the mean loss
    result = trainer.train()
    tokenizer.padding_side = "left"
    return float(result.training_loss)


def warm_start_on_demonstrations(
    model: Any,
    tokenizer: Any,
    env: gym.Env,
    codec: ChatCodec,
    tasks: Sequence[Mapping[str, Any]],
    sft: SFTWarmupConfig,
    *,
    use_cpu: bool,
    seed: int,
    output_dir: str | None = None,
    bf16: bool = False,
    max_images: int | None = None,
    show_progress: bool = False,
) -> tuple[Any, float]:
    """The ``sft.*`` warm start: the first ``sft.golden_fraction`` of ``sft.steps`` on golden episodes, the rest on
    the demonstrations with ``sft.guess_fraction`` guesses. Each phase warms up; the golden phase then holds the
    peak rate and the last phase decays it (``sft.lr_scheduler_type``): warm-up, stable, decay.

    Args:
        model: The policy.
        tokenizer: Its tokenizer.
        env: The training env (its golden solutions and parser).
        codec: The rollout's chat-template codec.
        tasks: The demonstrated task rows.
        sft: The ``sft`` config section.
        use_cpu: Train on CPU.
        seed: Seed of the guesses, the data order and dropout.
        output_dir: Scratch directory for TRL (nothing is saved; ``None``: a temporary one).
        bf16: bfloat16 mixed precision.
        max_images: The rollout's cap on images in an episode's context (``agent.max_images``).
        show_progress: Draw a console bar over all the steps (on the main process), the loss beside it.

    Returns:
        ``(model, loss)``: the fine-tuned policy, whole (a copy where FSDP2 sharded it: each phase's trainer
        prepares a whole model anew), and the mean training loss over all steps (nats per assistant token).
    """
    from accelerate import PartialState

    from agentfly_train.progress import console_bar
    from agentfly_train.sharding import unsharded_copy

    golden_steps = round(sft.golden_fraction * sft.steps)
    rest = sft.steps - golden_steps
    # Warm-up, stable, decay: a golden phase followed by the rest holds the peak rate, the rest decays it. A rate
    # decaying during the golden phase left copying unlearnt in some seeds.
    golden_schedule = "constant_with_warmup" if rest else sft.lr_scheduler_type
    phases = [(0.0, golden_steps, golden_schedule), (sft.guess_fraction, rest, sft.lr_scheduler_type)]
    total = 0.0
    scratch = tempfile.TemporaryDirectory() if output_dir is None else contextlib.nullcontext(output_dir)
    bar = console_bar(sft.steps, "warm start") if show_progress and PartialState().is_main_process else None
    with scratch as scratch_dir, bar if bar is not None else contextlib.nullcontext():
        for guess_fraction, steps, schedule in phases:
            if steps:
                rows = golden_token_rows(env, codec, tasks, guess_fraction, seed, max_images=max_images)
                loss = warm_start(model, tokenizer, rows, steps=steps, lr=sft.lr, batch_size=sft.batch_size,
                                  output_dir=scratch_dir, use_cpu=use_cpu, seed=seed, bf16=bf16,
                                  lr_scheduler_type=schedule, warmup_ratio=sft.warmup_ratio,
                                  images=codec.images, progress=bar)  # fmt: skip
                total += loss * steps
                model = unsharded_copy(model)  # collective under FSDP2: every process runs the same phases
    return model, total / sft.steps
