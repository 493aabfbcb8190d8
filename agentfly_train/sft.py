"""Supervised warm start on an env's golden demonstrations, tokenised exactly as rollouts are.

A golden episode is rendered turn by turn with the rollout's :class:`~agentfly_train.rollout.ChatCodec`
(prompt, then each golden assistant turn followed by EOS, then the env's observation turn), so the
model learns the same token sequences it will sample; only assistant tokens carry loss. Training runs
through TRL's ``SFTTrainer`` on the pre-tokenised rows (``input_ids`` + ``assistant_masks``).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym

from agentfly_train.rollout import ChatCodec


def golden_token_rows(
    env: gym.Env,
    codec: ChatCodec,
    tasks: Sequence[Mapping[str, Any]],
    guess_fraction: float = 0.0,
    seed: int = 0,
    wrong_guesses: bool = False,
) -> list[dict[str, list[int]]]:
    """Tokenised demonstrations: golden episodes, and optionally guesses.

    Args:
        env: The env (its parser formats the golden calls).
        codec: The rollout's chat-template codec.
        tasks: Task rows with golden solutions.
        guess_fraction: Share of the demonstrations (chosen at random, in [0, 1]) in which the demonstrator
            skips the tools and answers at once with a guess: the golden answer of another task (right by chance
            where the two share it). Tasks with no golden answer (a world's games, which end in the world) are
            always demonstrated in full.
        seed: Seed of that choice.
        wrong_guesses: Guess only answers that differ from the task's own (for a few tasks repeated, where another
            demonstration is often of the same task); a task no other answer differs from is demonstrated in full.

    Returns:
        Rows with ``input_ids`` (prompt + completion) and ``assistant_masks`` (1 on assistant tokens), in task order.
    """
    tool_env = env.unwrapped
    rng = random.Random(seed)
    guessed = set(rng.sample(range(len(tasks)), round(guess_fraction * len(tasks))))
    answers = [_golden_answer(tool_env, task) for task in tasks] if guessed else []
    rows = []
    for index, task in enumerate(tasks):
        _, info = env.reset(options={"task": dict(task)})
        ids = codec.prompt_ids(info["messages"])
        mask = [0] * len(ids)
        guess = None
        if index in guessed and answers[index] is not None:
            if wrong_guesses:
                wrong = [answer for answer in answers if answer is not None and answer != answers[index]]
                guess = rng.choice(wrong) if wrong else None
            else:
                guess = answers[(index + rng.randrange(1, len(tasks))) % len(tasks)]
        actions = [tool_env.answer_action(guess)] if guess is not None else tool_env.golden_actions()
        for action in actions:
            turn = [*codec.encode(action), codec.eos_token_id]
            ids += turn
            mask += [1] * len(turn)
            _, _, terminated, truncated, step_info = env.step(action)
            if terminated or truncated:
                break
            observation = codec.observation_ids(step_info["messages"], closed_turn=True)
            ids += observation
            mask += [0] * len(observation)
        rows.append({"input_ids": ids, "assistant_masks": mask})
    return rows


def _golden_answer(tool_env: Any, task: Mapping[str, Any]) -> str | None:
    golden = tool_env.tasks.golden(dict(task))
    return None if golden is None else golden.answer


def warm_start(
    model: Any,
    tokenizer: Any,
    rows: Sequence[Mapping[str, list[int]]],
    *,
    steps: int,
    lr: float,
    batch_size: int,
    output_dir: str,
    use_cpu: bool,
    seed: int,
    bf16: bool = False,
) -> float:
    """Fine-tunes ``model`` in place on tokenised demonstrations.

    Args:
        model: The policy.
        tokenizer: Its tokenizer (for padding).
        rows: From :func:`golden_token_rows`.
        steps: Optimiser steps.
        lr: Learning rate (constant).
        batch_size: Rows per step.
        output_dir: Scratch directory for TRL (nothing is saved).
        use_cpu: Train on CPU.
        seed: Data order and dropout seed.
        bf16: bfloat16 mixed precision (must match the RL trainer's: Accelerate's state is per process).

    Returns:
        The mean training loss (nats per assistant token).
    """
    from datasets import Dataset
    from transformers.trainer_callback import PrinterCallback
    from trl import SFTConfig, SFTTrainer

    from agentfly_train.trl_args import checkpointing_argument

    args = SFTConfig(
        output_dir=output_dir,
        max_steps=steps,
        learning_rate=lr,
        lr_scheduler_type="constant",
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
    )
    trainer = SFTTrainer(
        model=model, args=args, train_dataset=Dataset.from_list(list(rows)), processing_class=tokenizer
    )
    trainer.remove_callback(PrinterCallback)  # its raw log dicts on stdout; the run reports the mean loss
    result = trainer.train()
    tokenizer.padding_side = "left"
    return float(result.training_loss)
