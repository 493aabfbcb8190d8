"""Off-policy asynchronous training (``async_training.*``): per-token policy versions, partial rollouts, staleness
filtering, the behaviour log-probs in the loss, equality with the synchronous schedule on-policy, one step off on vLLM
(the kill and resume of an async run: tests/train/generation/test_vllm_server.py)."""

from __future__ import annotations

import json
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait
from types import SimpleNamespace

import gymnasium as gym
import pytest
import torch

from agentfly_envs.rewards import REWARDS
from agentfly_envs.runtime import LocalEnvPool
from agentfly_train.config import AsyncTrainingConfig, ConfigError
from agentfly_train.generation import SamplingParams
from agentfly_train.rollout import AgentRollout, ChatCodec, RolloutBudgets, run_rollouts
from agentfly_train.rollout.stream import BatchedRequests, EpisodeStream
from agentfly_train.trainer.schedules import AsyncSchedule
from tests.helpers.processes import noise_lines, run_cli
from tests.helpers.runs import (
    SMALL_VLLM_ENGINE,
    final_weights,
    quickstart_config,
    step_records,
    sync_and_on_policy_async,
)
from tests.helpers.scripted import ScriptedPolicy, golden_scripts
from tests.helpers.skips import skip_without_vllm

ENV_ID = "agentfly/Arith-Calc"
BUDGETS = RolloutBudgets(max_turns=4, max_tokens_per_turn=64, response_length=512)
ENV_THREADS = 4
"""The env-stepping threads of the scripted episodes."""
TINY_RUN = (
    "sft.enable=false",
    "data.val_size=0",
    "agent.num_chains=2",
    "data.train_batch_size=2",
    "agent.max_tokens_per_turn=16",
    "actor_rollout_ref.rollout.response_length=96",
    "actor_rollout_ref.actor.entropy_coeff=0.01",  # the untrained policy fails every task: make each step move it
    "actor_rollout_ref.actor.optim.lr=1e-3",
    "async_training.enable=true",
)


@pytest.fixture(scope="module")
def scripted(tiny_tokenizer):
    envs = [gym.make(ENV_ID, level="easy", max_turns=4) for _ in range(2)]
    _, info = envs[0].reset(options={"index": 0})
    codec = ChatCodec(tiny_tokenizer, info["tools"])
    tasks = [envs[0].unwrapped.tasks.row(i) for i in range(2)]
    with ThreadPoolExecutor(ENV_THREADS) as executor:
        yield envs, codec, tasks, executor


def test_turns_carry_their_versions_across_an_update_and_the_episode_is_unchanged(scripted):
    """A partial rollout: the first turn sampled at version 0, the rest after the update at version 1; env tokens
    carry -1; the oldest version is the first turn's; the episodes are the synchronous loop's token for token."""
    envs, codec, tasks, executor = scripted
    policy = ScriptedPolicy(codec, golden_scripts(envs, codec, tasks))
    expected = run_rollouts(envs, tasks, policy, codec, BUDGETS, SamplingParams(), executor)
    engine = BatchedRequests(ScriptedPolicy(codec, golden_scripts(envs, codec, tasks)))
    stream = EpisodeStream(engine, codec, BUDGETS, executor)
    for key, (env, task) in enumerate(zip(envs, tasks, strict=True)):
        stream.start(key, env, task, SamplingParams())
    held = threading.Event()  # the env steps wait behind these until the update: no second turn asks at version 0
    blockers = [executor.submit(held.wait) for _ in range(ENV_THREADS)]
    stream.pump()  # every first turn, at version 0
    stream.version = 1
    held.set()
    wait(blockers)
    while len(stream.finished) < 2:
        stream.pump()
    assert [stream.oldest_version(key) for key in (0, 1)] == [0, 0]
    for key, want in enumerate(expected):
        got = stream.take(key)
        assert (got.completion_ids, got.env_mask, got.reward) == (want.completion_ids, want.env_mask, want.reward)
        assert want.num_turns >= 2
        first_turn = got.env_mask.index(0)
        assert set(got.versions[:first_turn]) == {0}
        assert {v for v, m in zip(got.versions[first_turn:], got.env_mask[first_turn:], strict=True) if m} == {1}
        assert all((v == -1) == (m == 0) for v, m in zip(got.versions, got.env_mask, strict=True))


class _Port(SimpleNamespace):
    """What :class:`AsyncSchedule` asks of the rollout port: the driver, a backend to sample with, weight syncs."""

    def sampling(self):
        import contextlib

        return contextlib.nullcontext(self.backend)

    def sync_weights(self):
        self.syncs += 1


class _Trainer(SimpleNamespace):
    """What :class:`AsyncSchedule` reads of the trainer: a policy version that moves with ``global_step``."""

    def record_metrics(self, metrics):
        self.logged.update(metrics)


def _schedule_and_trainer(
    scripted, max_staleness: int, staleness_threshold: float = 2.0, own_weights: bool = False
) -> tuple[AsyncSchedule, _Trainer]:
    envs, codec, _, executor = scripted
    rows = [envs[0].unwrapped.tasks.row(i) for i in range(6)]
    scripts = golden_scripts([gym.make(ENV_ID, level="easy", max_turns=4) for _ in rows], codec, rows)
    policy = ScriptedPolicy(codec, {prompt: turns * 8 for prompt, turns in scripts.items()})
    policy.streams, policy.has_own_weights = False, own_weights  # with its own weights: a generator thread
    settings = AsyncTrainingConfig(enable=True, staleness_threshold=staleness_threshold, max_staleness=max_staleness)
    schedule = AsyncSchedule(settings, rows, prompts_per_step=1, shuffle=False)
    agent = AgentRollout(
        pool=LocalEnvPool(ENV_ID, {"level": "easy", "max_turns": 4}),
        codec=codec,
        budgets=BUDGETS,
        train_params=SamplingParams(),
        val_params=SamplingParams(),
        executor=executor,
    )
    trainer = _Trainer(
        accelerator=SimpleNamespace(num_processes=1, process_index=0),
        num_generations=2,
        val_batch_size=2,
        port=_Port(agent=agent, backend=policy, syncs=0),
        state=SimpleNamespace(global_step=0),
        optimizer_steps_per_rollout=1,
        logged={},
    )
    return schedule, trainer


@pytest.mark.parametrize("max_staleness", [0, 1])
def test_groups_older_than_max_staleness_are_dropped_and_counted(scripted, max_staleness):
    """``staleness_threshold=2``: three groups start at version 0 for a step of one. After an update the two waiting
    groups are one version old: with ``max_staleness=0`` they are dropped (4 episodes counted) and a fresh group is
    trained, with ``max_staleness=1`` the oldest is trained (staleness 1). Groups are taken whole, in start order."""
    schedule, trainer = _schedule_and_trainer(scripted, max_staleness)
    tasks = [{}] * 2  # two rows: one group of two chains
    first = schedule.episodes(trainer, tasks, SamplingParams())
    assert len(first) == 2 and first[0].prompt_ids == first[1].prompt_ids
    assert schedule.metrics()["async/staleness_max"] == 0
    assert len(schedule.groups) == 2 and len(set(schedule.source.pending) - {0, 1, 2}) == 0  # ran 2 groups ahead
    trainer.state.global_step = 1
    second = schedule.episodes(trainer, tasks, SamplingParams())
    metrics = schedule.metrics()
    trained_versions = {v for t in second for v in t.versions if v >= 0}
    if max_staleness == 0:
        assert metrics["async/dropped"] == 4 and metrics["async/staleness_max"] == 0
        assert trained_versions == {1}
    else:
        assert metrics["async/dropped"] == 0 and metrics["async/staleness_mean"] == 1
        # started at version 0; a turn still in flight at the update is sampled at version 1 (a partial rollout):
        # the envs' steps finish in threads, in any order, so a group may or may not have ended before it
        assert min(trained_versions) == 0 and trained_versions <= {0, 1}
    assert 0 <= metrics["timing/generator_idle_frac"] <= 1 and 0 < metrics["timing/trainer_idle_frac"] <= 1
    state = schedule.state_dict()
    resumed = AsyncSchedule(schedule.settings, schedule.rows, prompts_per_step=1, shuffle=False)
    resumed.load_state_dict(json.loads(json.dumps(state)))
    assert [resumed.source.next() for _ in state["source"]["pending"]] == state["source"]["pending"]
    trainer.port.agent.pool.close()


def test_one_batch_ahead_stays_one_batch_ahead_with_a_generator_thread(scripted):
    """``staleness_threshold=1``, one group a step, a backend with its own weights (a background generator): a weight
    sync lets the generator start only the groups that bring those not yet trained back to two, so each step after
    the first trains a group exactly one version old and none is dropped (``max_staleness=1``)."""
    schedule, trainer = _schedule_and_trainer(scripted, max_staleness=1, staleness_threshold=1.0, own_weights=True)
    try:
        for step in range(4):
            trainer.state.global_step = step
            time.sleep(0.3)  # the update: the generator fills its budget
            schedule.episodes(trainer, [{}] * 2, SamplingParams())
            metrics = schedule.metrics()
            assert (metrics["async/staleness_max"], metrics["async/dropped"]) == (min(step, 1), 0), step
        assert trainer.port.syncs == 1 + 3  # the engine's weights at the start, then after each update
    finally:
        schedule.close()
        trainer.port.agent.pool.close()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["async_training.max_staleness=-1"], r"async_training\.max_staleness must be >= 0"),
        (["async_training.require_batches=2"], r"require_batches=2: the trainer takes one rollout step"),
        (["async_training.partial_rollout=false"], r"partial_rollout=false holds a weight sync.*samples from the"),
        (["algorithm.rollout_correction.rollout_is=token"], r"use_rollout_log_probs=true makes the sampler's"),
        (["async_training.use_rollout_log_probs=false"], r"trains on stale episodes without correcting"),
        (["algorithm.adv_estimator=remax"], r"remax needs a greedy episode"),
        (
            ["async_training.trigger_parameter_sync_step=3"],
            r"trigger_parameter_sync_step=3 leaves the generator 2 versions behind",
        ),
        (
            [
                "actor_rollout_ref.rollout.name=vllm",
                "async_training.trigger_parameter_sync_step=2",
                "async_training.staleness_threshold=0.5",
            ],
            r"trigger_parameter_sync_step=2 needs async_training\.staleness_threshold >= 1: the trainer takes",
        ),
    ],
)
def test_settings_async_training_refuses_are_one_line_config_errors(overrides, message):
    if "actor_rollout_ref.rollout.name=vllm" in overrides:
        skip_without_vllm()  # the configuration checks that vLLM is installed
    with pytest.raises(ConfigError, match=message) as error:
        quickstart_config(["async_training.enable=true", *overrides])
    assert "\n" not in str(error.value)


def test_async_with_max_staleness_0_equals_sync_under_greedy_decoding(tmp_path, monkeypatch):
    """On-policy settings (``staleness_threshold=0 max_staleness=0``, HF, in file order): the same episodes, the
    same rollout-correction weights (from the behaviour log-probs) and the same updated weights as the synchronous
    schedule, over two steps."""
    common = [
        *TINY_RUN[:-1],
        "data.shuffle=false",
        "actor_rollout_ref.rollout.top_k=1",  # greedy, with log-probs at temperature 1 (temperature 0 trains nothing)
        "algorithm.adv_estimator=reinforce_plus_plus",  # greedy chains of a prompt are equal: no group signal
        "algorithm.rollout_correction.rollout_is=token",
        "trainer.total_training_steps=2",
        "actor_rollout_ref.model.tiny_hidden_size=32",
    ]
    reward = tmp_path / "reward.py"  # the untrained policy fails every task: a reward that varies with the answer
    reward.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                      "    return (len(solution_str) % 7) / 7\n")  # fmt: skip
    common.append(f"custom_reward_function.path={reward}")
    monkeypatch.setattr(REWARDS, "_entries", dict(REWARDS._entries))  # the runs register compute_score: not for later
    sync, asynchronous = sync_and_on_policy_async(common, tmp_path)
    sync_steps, async_steps = step_records(sync), step_records(asynchronous)
    for a, s in zip(async_steps, sync_steps, strict=True):
        for key in ("reward/mean", "episode/response_length", "rollout_corr/rollout_is_mean", "actor/pg_loss"):
            assert a[key] == pytest.approx(s[key], abs=1e-6), key
        assert a["async/staleness_max"] == 0 and a["async/dropped"] == 0
    assert all(s["grad_norm"] > 0 for s in sync_steps)  # the policy moved
    weights_async, weights_sync = final_weights(asynchronous), final_weights(sync)
    for name, tensor in weights_sync.items():
        torch.testing.assert_close(weights_async[name], tensor, atol=1e-6, rtol=1e-5)


@pytest.mark.slow  # a vLLM engine and two RL steps through the CLI
@pytest.mark.timeout(900)
def test_one_step_off_on_vllm_through_the_cli(tmp_path):
    """The background generator on the colocated engine, one step off (``partial_rollout=false``: the weight sync
    waits for the episodes in flight): two steps and the validations, the engine's log-probs the trainer's at step 1,
    one batch ahead (staleness 1) at step 2, metrics logged. Partial rollouts on an engine with its own weights, and
    a kill and resume, run on the vLLM server (``tests/train/generation/test_vllm_server.py``)."""
    overrides = [
        *TINY_RUN,
        "actor_rollout_ref.rollout.name=vllm",
        *SMALL_VLLM_ENGINE,
        "async_training.partial_rollout=false",
        "data.val_size=4",
        "trainer.total_training_steps=2",
        f"trainer.default_local_dir={tmp_path}",
    ]
    done = run_cli([sys.executable, "-m", "agentfly_train", "--no-progress", "--config", "quickstart", *overrides])
    assert done.returncode == 0, done.stderr[-3000:]
    assert noise_lines(done.stdout + done.stderr) == []
    steps = step_records(tmp_path)
    assert [s["step"] for s in steps] == [1, 2]
    assert steps[0]["rollout/logprob_diff_max"] < 1e-3
    assert [(s["async/staleness_max"], s["async/dropped"]) for s in steps] == [(0, 0), (1, 0)]
    for key in ("timing/generator_idle_frac", "timing/trainer_idle_frac", "async/in_flight", "async/dropped"):
        assert all(key in s for s in steps), key
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert sum("val/accuracy" in r for r in records) == 2  # before and after training, through the stream


@pytest.mark.slow  # two RL steps through the CLI
def test_the_asynchronous_schedule_on_continuous_batching_through_the_cli(tmp_path):
    """The HF backend on transformers' continuous batching under the off-policy schedule, pumped by the trainer,
    on-policy settings: two steps, the sampler's log-probs the trainer's (the gap ``rollout_is`` logs), metrics."""
    overrides = [
        *TINY_RUN,
        "actor_rollout_ref.rollout.hf_engine=continuous",
        "algorithm.rollout_correction.rollout_is=token",  # logs the sampler's log-prob gap to the trainer's
        "async_training.staleness_threshold=0",
        "async_training.max_staleness=0",
        "async_training.use_rollout_log_probs=false",
        "trainer.total_training_steps=2",
        f"trainer.default_local_dir={tmp_path}",
    ]
    done = run_cli([sys.executable, "-m", "agentfly_train", "--no-progress", "--config", "quickstart", *overrides])
    assert done.returncode == 0, done.stderr[-3000:]
    assert noise_lines(done.stdout + done.stderr) == []
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    gaps = [r["rollout/logprob_diff_max"] for r in records if "rollout/logprob_diff_max" in r]
    assert gaps and max(gaps) < 1e-3
    assert [r["async/staleness_max"] for r in records if "async/staleness_max" in r] == [0] * len(gaps)
    assert max(r["step"] for r in records) == 2
