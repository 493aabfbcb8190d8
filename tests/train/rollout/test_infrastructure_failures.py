"""Episodes that meet an infrastructure failure (``info["infra_failure"]``) are replayed from their start, and left out
of scoring and training when every attempt fails: in both rollout loops and in a training run."""

from __future__ import annotations

import json
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import gymnasium as gym
import pytest

import agentfly_envs  # noqa: F401
from agentfly_envs import InfrastructureError
from agentfly_envs.rewards import REWARDS
from agentfly_train.__main__ import main
from agentfly_train.callbacks import MetricsFile
from agentfly_train.generation import SamplingParams
from agentfly_train.rollout import ChatCodec, RolloutBudgets, run_rollouts, run_rollouts_async, summarize, training_rows
from agentfly_train.rollout.stream import BatchedRequests
from tests.helpers.paths import REPO_ROOT
from tests.helpers.runs import LEARNING_TASKS
from tests.helpers.scripted import ScriptedPolicy, golden_scripts
from tests.helpers.skips import needs_textworld_express

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
from infra_failures import CHAOS

ENV_ID = "agentfly/Arith-Calc"
BUDGETS = RolloutBudgets(max_turns=4, max_tokens_per_turn=64, response_length=1024)
DEAD_JUDGE = "the judge did not answer (connection refused)"


class FlakyJudge:
    """A reward that fails as a dead judge would on the first ``fails`` scorings of each task, then scores as the
    env's own reward does."""

    def __init__(self, fails: int) -> None:
        self.fails = fails
        self.calls: Counter[str] = Counter()
        self.score = REWARDS.get("math_reward_string_equal")

    def __call__(self, response: str, ground_truth: object):
        self.calls[str(ground_truth)] += 1
        if self.calls[str(ground_truth)] <= self.fails:
            raise InfrastructureError(DEAD_JUDGE)
        return self.score(response, ground_truth)


@pytest.fixture
def judged(monkeypatch, tiny_tokenizer):
    """``(judge(fails) -> (envs, tasks, codec, policy), executor)``: three golden episodes of envs scored by a
    :class:`FlakyJudge` named ``flaky_judge``, a policy that can play each golden episode four times."""
    executor = ThreadPoolExecutor(4)

    def judge(fails: int):
        monkeypatch.setitem(REWARDS._entries, "flaky_judge", FlakyJudge(fails))
        envs = [gym.make(ENV_ID, level="easy", max_turns=4, reward="flaky_judge") for _ in range(3)]
        _, info = envs[0].reset(options={"index": 0})
        codec = ChatCodec(tiny_tokenizer, info["tools"])
        tasks = [envs[0].unwrapped.tasks.row(i) for i in range(3)]
        scripts = golden_scripts(envs, codec, tasks)
        return envs, tasks, codec, ScriptedPolicy(codec, {prompt: turns * 4 for prompt, turns in scripts.items()})

    yield judge, executor
    executor.shutdown()


def _play(loop: str, envs, tasks, codec, policy, executor, retries: int):
    if loop == "sync":
        return run_rollouts(envs, tasks, policy, codec, BUDGETS, SamplingParams(), executor, retries=retries)
    engine = BatchedRequests(policy)
    return run_rollouts_async(envs, tasks, engine, codec, BUDGETS, SamplingParams(), executor, retries=retries)


@pytest.mark.parametrize("loop", ["sync", "async"])
def test_an_episode_that_meets_a_dead_judge_is_replayed_and_scored_as_the_replay(judged, loop):
    judge, executor = judged
    envs, tasks, codec, policy = judge(fails=1)
    trajectories = _play(loop, envs, tasks, codec, policy, executor, retries=2)
    failure = f"reward flaky_judge: {DEAD_JUDGE}"
    for trajectory in trajectories:
        assert (trajectory.reward, trajectory.correct, trajectory.finish_reason) == (1.0, True, "stop")
        assert trajectory.infra_failure is None and trajectory.failed_attempts == [failure]
    stats = summarize(trajectories)
    assert (stats["rollout/infra_failures"], stats["rollout/retried"], stats["rollout/excluded"]) == (3, 3, 0)
    assert stats["accuracy"] == 1.0


@pytest.mark.parametrize("loop", ["sync", "async"])
def test_an_episode_whose_every_attempt_fails_is_excluded_unscored_and_untrained(judged, loop):
    judge, executor = judged
    envs, tasks, codec, policy = judge(fails=0)
    scored = _play(loop, envs[:2], tasks[:2], codec, policy, executor, retries=2)
    REWARDS.get("flaky_judge").fails = 99  # the judge is gone
    (excluded,) = _play(loop, envs[2:], tasks[2:], codec, policy, executor, retries=2)
    assert excluded.excluded and excluded.infra_failure == f"reward flaky_judge: {DEAD_JUDGE}"
    assert len(excluded.failed_attempts) == 2 and excluded.reward == 0.0 and excluded.finish_reason == "max_turns"
    stats = summarize([*scored, excluded])
    assert (stats["rollout/infra_failures"], stats["rollout/retried"], stats["rollout/excluded"]) == (3, 2, 1)
    assert stats["accuracy"] == 1.0 and stats["reward/min"] == 1.0  # the excluded episode is not scored
    rows = training_rows([*scored, excluded])
    assert all(sum(mask) > 0 for mask in rows["env_mask"][:2]) and sum(rows["env_mask"][2]) == 0


class FlakyReset(gym.Wrapper):
    """An env whose first ``fails`` resets raise :class:`InfrastructureError`, as a lost server's would."""

    def __init__(self, env: gym.Env, fails: int) -> None:
        super().__init__(env)
        self.fails = fails

    def reset(self, **kwargs):
        if self.fails > 0:
            self.fails -= 1
            raise InfrastructureError("the env server at http://envs:8000 stopped answering")
        return self.env.reset(**kwargs)


@pytest.mark.parametrize("loop", ["sync", "async"])
def test_an_episode_whose_reset_fails_is_replayed_and_left_out_when_every_reset_fails(judged, loop):
    judge, executor = judged
    envs, tasks, codec, policy = judge(fails=0)
    envs = [FlakyReset(envs[0], fails=1), FlakyReset(envs[1], fails=0), FlakyReset(envs[2], fails=99)]
    replayed, plain, excluded = _play(loop, envs, tasks, codec, policy, executor, retries=2)
    lost = "reset: the env server at http://envs:8000 stopped answering"
    assert (replayed.reward, replayed.correct, replayed.failed_attempts) == (1.0, True, [lost])
    assert not replayed.excluded
    assert (plain.reward, plain.failed_attempts) == (1.0, [])
    assert excluded.excluded and excluded.infra_failure == lost and excluded.failed_attempts == [lost, lost]
    assert excluded.prompt_ids == [] and excluded.num_turns == 0 and envs[2].fails == 96  # 1 try + 2 replays
    stats = summarize([replayed, plain, excluded])
    assert (stats["rollout/infra_failures"], stats["rollout/retried"], stats["rollout/excluded"]) == (4, 3, 1)
    assert stats["accuracy"] == 1.0
    rows = training_rows([replayed, plain, excluded])
    assert rows["completion_ids"][2] == [0] and rows["env_mask"][2] == [0]  # one untrained token (TRL needs one)
    assert all(sum(mask) > 0 for mask in rows["env_mask"][:2])


class JVMKilledMidEpisode(gym.Wrapper):
    """A world env whose JVM is killed (SIGKILL) before its first step, as a crashed simulator would be."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.killed = False

    def step(self, action):
        if not self.killed:
            self.killed = True
            jvm = self.env.unwrapped.tools["act"]._worlds["textworld_express"]._jvm
            jvm.process.kill()
            jvm.process.wait()
        return self.env.step(action)


@needs_textworld_express
@pytest.mark.parametrize("loop", ["sync", "async"])
def test_an_episode_whose_worlds_jvm_is_killed_is_replayed_on_a_relaunched_one(tiny_tokenizer, loop):
    envs = [gym.make("agentfly/TWX-Coin", num_tasks=2) for _ in range(2)]
    tasks = [envs[0].unwrapped.tasks.row(i) for i in range(2)]
    _, info = envs[0].reset(options={"task": tasks[0]})
    codec = ChatCodec(tiny_tokenizer, info["tools"])
    scripts = golden_scripts(envs, codec, tasks)
    (first, turns), (second, other) = scripts.items()
    policy = ScriptedPolicy(codec, {first: [*turns[:1], *turns], second: other})  # the killed turn, then the replay
    budgets = RolloutBudgets(max_turns=100, max_tokens_per_turn=256, response_length=65536)
    killed = JVMKilledMidEpisode(envs[0])
    with ThreadPoolExecutor(2) as executor:
        if loop == "sync":
            played = run_rollouts(
                [killed, envs[1]], tasks, policy, codec, budgets, SamplingParams(), executor, retries=1
            )
        else:
            engine = BatchedRequests(policy)
            played = run_rollouts_async(
                [killed, envs[1]], tasks, engine, codec, budgets, SamplingParams(), executor, retries=1
            )
    replayed, plain = played
    assert killed.killed and replayed.failed_attempts and plain.failed_attempts == []
    assert replayed.failed_attempts[0].startswith("tool act: the world stopped working")
    assert (replayed.reward, replayed.excluded, plain.reward) == (1.0, False, 1.0)
    for env in envs:
        env.close()


def test_the_run_stops_with_one_line_when_too_many_episodes_fail_and_resumes_once_mended(
    monkeypatch, warm_policy, tmp_path, capfd
):
    """Above ``rollout.max_infra_failure_rate`` the run keeps the checkpoint of the steps trained so far and exits
    with status 1 and one line naming the failure; once the judge answers again, the same command resumes."""
    original = REWARDS.get("math_reward_string_equal")

    def judge_gone_after_step_1(response: str, ground_truth: object):
        if (tmp_path / "checkpoint-1").is_dir():
            raise InfrastructureError(DEAD_JUDGE)
        return original(response, ground_truth)

    monkeypatch.setitem(REWARDS._entries, "flaky_judge", judge_gone_after_step_1)
    command = [
        "--config",
        "quickstart",
        *LEARNING_TASKS,
        f"actor_rollout_ref.model.path={warm_policy}",
        "sft.enable=false",
        "data.train_batch_size=2",
        "agent.num_chains=2",
        "data.val_size=2",
        "trainer.total_training_steps=3",
        "trainer.save_freq=1",
        "agent.reward_name=flaky_judge",
        "actor_rollout_ref.rollout.retries=1",
        "actor_rollout_ref.rollout.max_infra_failure_rate=0.2",
        f"trainer.default_local_dir={tmp_path}",
        "--no-progress",
    ]
    assert main(command) == 1
    err = capfd.readouterr().err.strip().splitlines()
    (note,) = [line for line in err if line.startswith("note: infrastructure failure: ")]  # once per message
    assert note.startswith(f"note: infrastructure failure: reward flaky_judge: {DEAD_JUDGE}; ")
    assert note.endswith(" attempt(s) replayed or left out of training (counted in rollout/infra_failures)")
    line = err[-1]
    assert (
        line.startswith("error: ") and "of the episodes of step 2 met infrastructure failures after 1 retries" in line
    )
    assert "rollout.max_infra_failure_rate=0.2 (most often, " in line and f"reward flaky_judge: {DEAD_JUDGE}" in line
    assert line.endswith("rerun the same command (trainer.resume_mode=auto) to resume")
    assert (tmp_path / "checkpoint-1").is_dir() and not (tmp_path / "checkpoint-2").exists()
    monkeypatch.setitem(REWARDS._entries, "flaky_judge", original)
    assert main(command) == 0
    assert "resuming from" in capfd.readouterr().err
    steps = [
        record["step"] for record in MetricsFile(tmp_path / "metrics.jsonl").read() if "rollout/excluded" in record
    ]
    assert steps == [1, 2, 3]


def test_a_run_whose_tool_calls_fail_completes_and_trains_no_episode_that_met_a_failure(warm_policy, tmp_path):
    """A third of the calculator's calls fail as a dead worker would, during a real CLI run: the run completes, the
    failures are counted, and every episode left with one is marked excluded in the saved samples."""
    chaos = tmp_path / "chaos.py"
    chaos.write_text(CHAOS.format(rate=0.3, failure="InfrastructureError"))  # the benchmark's chaos env
    run_dir = tmp_path / "run"
    command = [
        "--config",
        "quickstart",
        *LEARNING_TASKS,
        "agent.env=chaos/Arith-Calc",
        f"agent.imports=[{chaos}]",
        f"actor_rollout_ref.model.path={warm_policy}",
        "sft.enable=false",
        "data.train_batch_size=2",
        "agent.num_chains=4",
        "trainer.total_training_steps=3",
        "trainer.log_train_generations=8",
        "actor_rollout_ref.rollout.retries=1",
        "actor_rollout_ref.rollout.max_infra_failure_rate=1.0",
        f"trainer.default_local_dir={run_dir}",
        "--no-progress",
    ]
    assert main(command) == 0
    records = [r for r in MetricsFile(run_dir / "metrics.jsonl").read() if "rollout/infra_failures" in r]
    assert [r["step"] for r in records] == [1, 2, 3] and sum(r["rollout/infra_failures"] for r in records) > 0
    samples = [json.loads(line) for path in (run_dir / "train_samples").glob("*.jsonl") for line in path.open()]
    failed = [sample for sample in samples if "infra_failure" in sample]
    replayed = [sample for sample in samples if "failed_attempts" in sample]
    assert failed or replayed
    for sample in failed:
        assert sample["excluded"] and sample["infra_failure"] == "tool calculator: the calculator's worker died"
    for sample in samples:
        assert "excluded" not in sample or "infra_failure" in sample
