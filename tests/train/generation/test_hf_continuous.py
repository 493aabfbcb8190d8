"""The HF backend on transformers' continuous batching (``rollout.hf_engine=continuous``): log-probabilities,
greedy equality with the padded backend, episodes streamed out of order, weight changes with turns in flight, the
fallback's line, the configuration key."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import gymnasium as gym
import pytest
import torch

import agentfly_envs  # noqa: F401
from agentfly_train.config import ConfigError
from agentfly_train.generation import GENERATION_BACKENDS, HFGenerationBackend, Policy, SamplingParams
from agentfly_train.generation.hf_continuous import CacheSize, HFContinuousBackend
from agentfly_train.rollout import ChatCodec, RolloutBudgets, run_rollouts, training_rows
from agentfly_train.rollout.stream import EpisodeStream, run_to_end
from agentfly_train.tiny_model import build_model
from tests.helpers.logprobs import assert_logprobs_are_a_forward_pass_at_the_temperature
from tests.helpers.runs import quickstart_config

ENV_ID = "agentfly/Arith-Calc"
CACHE = CacheSize(requests=4, response_length=256)


def continuous(model, tokenizer) -> HFContinuousBackend:
    return HFContinuousBackend.for_model(model, tokenizer.pad_token_id, [tokenizer.eos_token_id], CACHE)


def padded(model, tokenizer) -> HFGenerationBackend:
    return HFGenerationBackend.for_model(model, tokenizer.pad_token_id, [tokenizer.eos_token_id])


class SlowTool(gym.Wrapper):
    """An env whose steps take ``delay_s`` longer (a slow tool)."""

    def __init__(self, env: gym.Env, delay_s: float) -> None:
        super().__init__(env)
        self.delay_s = delay_s

    def step(self, action):
        time.sleep(self.delay_s)
        return self.env.step(action)


ENV_KWARGS = {"level": "single", "num_tasks": 2, "max_turns": 3}
"""The warm policy's tasks (:data:`tests.helpers.runs.LEARNING_TASKS`): it calls the calculator, then answers."""


@pytest.fixture(scope="module")
def episodes(warm_policy):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(warm_policy)
    model = AutoModelForCausalLM.from_pretrained(warm_policy)
    envs = [gym.make(ENV_ID, **ENV_KWARGS) for _ in range(4)]
    _, info = envs[0].reset(options={"index": 0})
    codec = ChatCodec(tokenizer, info["tools"])
    tasks = [envs[0].unwrapped.tasks.row(i % 2) for i in range(4)]
    with ThreadPoolExecutor(4) as executor:
        yield model, codec, tasks, executor


def test_logprobs_equal_a_forward_pass_at_the_sampling_temperature(tiny_tokenizer):
    """The padded backend's test, on the manager: same prompts, same bound."""
    model = build_model(tiny_tokenizer, hidden_size=32, seed=2)
    backend = continuous(model, tiny_tokenizer)
    try:
        assert_logprobs_are_a_forward_pass_at_the_temperature(backend, model, tiny_tokenizer)
    finally:
        backend.close()


@pytest.mark.slow  # a manager's thread and its first forward passes, and real episodes
def test_greedy_streamed_episodes_equal_the_padded_backends_token_for_token(episodes):
    """Streamed on the manager (each turn a request as its env step returns) against turn-synchronous on the padded
    backend: the same tokens, log-probabilities, masks and rewards, per-turn budgets and stop tokens included."""
    model, codec, tasks, executor = episodes
    envs = [gym.make(ENV_ID, **ENV_KWARGS) for _ in tasks]
    budgets = RolloutBudgets(max_turns=3, max_tokens_per_turn=32, response_length=200)
    greedy = SamplingParams(temperature=0)
    expected = run_rollouts(envs, tasks, padded(model, codec.tokenizer), codec, budgets, greedy, executor)
    backend = continuous(model, codec.tokenizer)
    try:
        stream = EpisodeStream(backend, codec, budgets, executor)
        got = run_to_end(stream, envs, tasks, greedy, range(len(tasks)))
    finally:
        backend.close()
    assert [t.num_turns for t in got] == [t.num_turns for t in expected]
    assert all(t.num_turns > 1 for t in got)  # each called its tool: a turn after an env step
    for streamed, synchronous in zip(got, expected, strict=True):
        assert streamed.completion_ids == synchronous.completion_ids
        assert streamed.env_mask == synchronous.env_mask
        assert streamed.logprobs == pytest.approx(synchronous.logprobs, abs=1e-4)
        assert streamed.finish_reason == synchronous.finish_reason and streamed.reward == synchronous.reward


@pytest.mark.slow  # a manager's thread and its first forward passes, and real episodes
def test_a_slow_tool_finishes_episodes_out_of_order_and_the_same_rows_are_trained(episodes):
    """Episode 0's tool takes 0.5 s a step: streamed, the other episodes finish first; under greedy decoding the
    training rows are the turn-synchronous rollout's."""
    model, codec, tasks, executor = episodes
    envs = [SlowTool(gym.make(ENV_ID, **ENV_KWARGS), 0.5 if key == 0 else 0) for key in range(len(tasks))]
    budgets = RolloutBudgets(max_turns=3, max_tokens_per_turn=32, response_length=200)
    greedy = SamplingParams(temperature=0)
    expected = run_rollouts(envs, tasks, padded(model, codec.tokenizer), codec, budgets, greedy, executor)
    backend = continuous(model, codec.tokenizer)
    try:
        stream = EpisodeStream(backend, codec, budgets, executor)
        for key, (env, task) in enumerate(zip(envs, tasks, strict=True)):
            stream.start(key, env, task, greedy)
        while len(stream.finished) < len(tasks):
            stream.pump()
        order = list(stream.finished)
        got = [stream.take(key) for key in range(len(tasks))]
    finally:
        backend.close()
    assert expected[0].num_turns > 1  # episode 0 did call its slow tool
    assert order[-1] == 0 and order != sorted(order)
    want, have = training_rows(expected), training_rows(got)
    for key in ("prompt_ids", "completion_ids", "env_mask", "env_reward"):
        assert have[key] == want[key], key
    for row_have, row_want in zip(have["logprobs"], want["logprobs"], strict=True):
        assert row_have == pytest.approx(row_want, abs=1e-4)


@pytest.mark.slow  # a manager's thread and its first forward passes, and real episodes
def test_a_weight_change_with_turns_in_flight_samples_them_again_with_the_new_weights(tiny_tokenizer):
    """An optimiser step between two engine steps (an off-policy schedule's partial rollout): the turns in flight are
    sampled from their start with the new weights, token for token what the padded backend samples with them."""
    model = build_model(tiny_tokenizer, hidden_size=32, seed=5)
    backend = continuous(model, tiny_tokenizer)
    prompts = [tiny_tokenizer("Ava has 3 boxes")["input_ids"], tiny_tokenizer("Hi")["input_ids"]]
    greedy = SamplingParams(temperature=0)
    before = padded(model, tiny_tokenizer).generate(prompts, [48, 48], greedy)
    try:
        for index, prompt in enumerate(prompts):
            backend.submit(f"turn-{index}", prompt, 48, greedy)
        first = dict(backend.step())
        assert backend.has_unfinished()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        model.train()
        model(torch.tensor([prompts[0]]), labels=torch.tensor([prompts[0]])).loss.backward()
        optimizer.step()
        later: dict = {}
        while backend.has_unfinished():
            later.update(backend.step())
    finally:
        backend.close()
    after = padded(model, tiny_tokenizer).generate(prompts, [48, 48], greedy)
    assert later  # a turn was in flight across the update
    for index in range(len(prompts)):
        have, want = (first, before) if f"turn-{index}" in first else (later, after)
        assert have[f"turn-{index}"].token_ids == want[index].token_ids
        assert have[f"turn-{index}"].logprobs == pytest.approx(want[index].logprobs, abs=1e-4)
    assert any(b.token_ids != a.token_ids for b, a in zip(before, after, strict=True))  # the update changed them


def test_where_continuous_batching_cannot_run_the_padded_backend_runs_and_says_so_in_one_line(tiny_tokenizer, capfd):
    config = quickstart_config(["actor_rollout_ref.rollout.hf_engine=continuous"])
    model = build_model(tiny_tokenizer, hidden_size=32, seed=6)
    assert isinstance(HFContinuousBackend.build(config, Policy.plain(model, tiny_tokenizer)), HFContinuousBackend)
    model.set_attn_implementation("eager")
    backend = HFContinuousBackend.build(config, Policy.plain(model, tiny_tokenizer))
    assert type(backend) is HFGenerationBackend
    lines = capfd.readouterr().err.strip().splitlines()
    assert lines == [
        "note: actor_rollout_ref.rollout.hf_engine=continuous falls back to padded: the policy's attention "
        "implementation is eager; continuous batching needs one of sdpa, flash_attention_2, flash_attention_3, "
        "paged|eager (load the model with attn_implementation='sdpa')"
    ]


def test_the_hf_engine_key_chooses_the_backend_and_its_streaming():
    padded_config = quickstart_config()
    streamed = quickstart_config(["actor_rollout_ref.rollout.hf_engine=continuous"])
    assert GENERATION_BACKENDS.chosen(padded_config.actor_rollout_ref.rollout) == "hf"
    assert GENERATION_BACKENDS.chosen(streamed.actor_rollout_ref.rollout) == "hf_continuous"
    assert not GENERATION_BACKENDS.async_episodes(padded_config.actor_rollout_ref.rollout)
    assert GENERATION_BACKENDS.async_episodes(streamed.actor_rollout_ref.rollout)
    with pytest.raises(ConfigError) as error:
        quickstart_config(["actor_rollout_ref.rollout.hf_engine=paged"])
    assert "actor_rollout_ref.rollout.hf_engine" in str(error.value) and "\n" not in str(error.value)
