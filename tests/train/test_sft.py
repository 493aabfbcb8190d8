"""The SFT warm start's demonstrations: golden episodes, and guesses (``sft.guess_fraction``)."""

from __future__ import annotations

import gymnasium as gym
import pytest

from agentfly_envs.contract import env_contract
from agentfly_train.config import ConfigError
from agentfly_train.data import env_kwargs, train_rows
from agentfly_train.demonstrations import golden_token_rows, warm_start_phases
from agentfly_train.models import load_policy, make_codec
from tests.helpers.runs import quickstart_config


@pytest.fixture(scope="module")
def demo_setup():
    config = quickstart_config(["agent.env_kwargs={level: single, num_tasks: 40}"])
    env = gym.make(config.agent.env, **env_kwargs(config))
    rows = train_rows(config, env)
    _, tokenizer = load_policy(config)
    codec = make_codec(config, tokenizer, env, rows[0])
    yield env, codec, rows, tokenizer
    env.close()


def _completion(tokenizer, row: dict) -> str:
    """The text of a demonstration row after its prompt: assistant turns and observations."""
    return tokenizer.decode(row["input_ids"][row["assistant_masks"].index(1) :])


def _trained(tokenizer, row: dict) -> str:
    """The text of the tokens of a demonstration row that carry loss."""
    return tokenizer.decode([t for t, m in zip(row["input_ids"], row["assistant_masks"], strict=True) if m])


def test_a_guess_fraction_replaces_that_share_of_golden_episodes_by_wrong_direct_answers(demo_setup):
    env, codec, rows, tokenizer = demo_setup
    golden = golden_token_rows(env, codec, rows)
    mixed = golden_token_rows(env, codec, rows, guess_fraction=0.75, seed=3)
    assert len(mixed) == len(golden) == 40
    guessed = [i for i, (a, b) in enumerate(zip(golden, mixed, strict=True)) if a != b]
    assert len(guessed) == 30  # exactly round(0.75 * 40) demonstrations are guesses, the rest stay golden
    assert all("<tool_call>" in _trained(tokenizer, row) for row in golden)
    assert all(f"\\boxed{{{env.unwrapped.tasks.golden(row).answer}}}" in _trained(tokenizer, demo)
               for row, demo in zip(rows, golden, strict=True))  # fmt: skip
    answers = [env.unwrapped.tasks.golden(row).answer for row in rows]
    wrong = 0
    for index in guessed:
        text = _completion(tokenizer, mixed[index])
        assert "<tool_call>" not in text and "\\boxed{" in text  # one turn: an answer without the calculator
        answer = text.split("\\boxed{")[1].split("}")[0]
        assert answer in answers  # another task's answer
        # The guessed number carries no loss: the model learns to answer without the tool, not to invent numbers.
        assert _trained(tokenizer, mixed[index]) == text.replace(f"{{{answer}}}", "{}")
        wrong += answer != answers[index]
    assert wrong >= 0.8 * len(guessed)  # a guess is (almost always) wrong: only RL on the env's reward rewards tools
    assert golden_token_rows(env, codec, rows, guess_fraction=0.75, seed=3) == mixed  # the choice is seeded
    assert golden_token_rows(env, codec, rows, guess_fraction=0.75, seed=4) != mixed


def test_guesses_are_wrong_even_among_repeated_tasks_and_tasks_of_one_answer_are_never_guessed(demo_setup):
    env, codec, rows, tokenizer = demo_setup
    two = rows[:2] * 8
    mixed = golden_token_rows(env, codec, two, guess_fraction=0.5, seed=0, wrong_guesses=True)
    texts = [_completion(tokenizer, row) for row in mixed]
    answers = [env.unwrapped.tasks.golden(row).answer for row in two]
    guesses = [(text, answer) for text, answer in zip(texts, answers, strict=True) if "<tool_call>" not in text]
    assert len(guesses) == 8 and all(f"\\boxed{{{answer}}}" not in text for text, answer in guesses)
    # These wrong answers are trained on: the model must learn that its guesses fail even where it knows the answer.
    assert all(_trained(tokenizer, row) == _completion(tokenizer, row) for row in mixed if "<tool_call>" not in
               _completion(tokenizer, row))  # fmt: skip
    same = golden_token_rows(env, codec, rows[:1] * 4, guess_fraction=1.0, wrong_guesses=True)  # no other answer
    assert all("<tool_call>" in _completion(tokenizer, row) for row in same)


@pytest.mark.parametrize("key", ["guess_fraction", "golden_fraction"])
@pytest.mark.parametrize("value", ["-0.1", "1.5"])
def test_a_fraction_outside_zero_one_is_a_config_error(key, value):
    with pytest.raises(ConfigError, match=rf"sft.{key} must be in \[0, 1\]"):
        quickstart_config([f"sft.{key}={value}"])


@pytest.mark.parametrize(
    ("golden_fraction", "phases"),
    [
        (0.0, [(0.75, 4, "linear")]),
        (0.75, [(0.0, 3, "constant_with_warmup"), (0.75, 1, "linear")]),  # warm-up, stable, decay
        (1.0, [(0.0, 4, "linear")]),
    ],
)
def test_the_warm_start_learns_golden_episodes_first_then_the_demonstrations_with_guesses(
    demo_setup, golden_fraction, phases
):
    env, codec, rows, tokenizer = demo_setup
    config = quickstart_config(["sft.steps=4", f"sft.golden_fraction={golden_fraction}", "sft.guess_fraction=0.75"])
    built = warm_start_phases(env, env_contract(env), codec, rows, config.sft, seed=0)
    guesses = [sum("<tool_call>" not in _trained(tokenizer, row) for row in phase.rows) for phase in built]
    assert [(g / len(p.rows), p.steps, p.lr_scheduler_type) for g, p in zip(guesses, built, strict=True)] == phases
    # A task demonstrated in full in both phases is played once, and gives the same rows as on its own.
    assert built[-1].rows == golden_token_rows(env, codec, rows, 0.75 if phases[-1][0] else 0.0, seed=0)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("sft.lr_scheduler_type=cosin", r"sft.lr_scheduler_type.*did you mean 'cosine'"),
        ("sft.warmup_ratio=1.0", r"sft.warmup_ratio must be in \[0, 1\), got 1.0"),
    ],
)
def test_a_bad_warm_start_schedule_is_a_config_error(override, message):
    with pytest.raises(ConfigError, match=message):
        quickstart_config([override])
