"""Two CPU processes under ``accelerate launch``: rows gathered across processes for the advantages, KL
controller and loss denominators, the critic prepared for DDP, and its checkpoint written once."""

from __future__ import annotations

import json
import math

import pytest

from agentfly_train.callbacks import MetricsFile
from agentfly_train.report.charts import chart_data
from tests.helpers.distributed import accelerate_launch
from tests.helpers.processes import run_cli
from tests.train.trainer.test_resume import PPO_WITH_KL_IN_REWARD, SMALL_RUN

pytestmark = pytest.mark.slow


def test_ppo_with_kl_in_reward_trains_on_two_processes(tmp_path):
    overrides = [*SMALL_RUN, *PPO_WITH_KL_IN_REWARD, "actor_rollout_ref.actor.use_kl_loss=true"]
    launch, env = accelerate_launch(2)
    command = [*launch, "--no-progress", "--config", "quickstart"]
    done = run_cli([*command, *overrides, f"trainer.default_local_dir={tmp_path}"], timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("run directory:") == 2  # both processes ran the job
    records = MetricsFile(tmp_path / "metrics.jsonl").read()
    assert [record["step"] for record in records] == [1, 2, 3, 4]
    for record in records:
        # known values: each batch trains one epoch on-policy (ratio 1), so the policy term is the token mean of the
        # whitened advantages: 0; the loss adds kl_loss_coef (0.001) x the KL loss (entropy_coeff is 0)
        assert abs(record["actor/pg_loss"]) < 1e-6
        assert record["loss"] == pytest.approx(
            record["actor/pg_loss"] + 0.001 * record["actor/kl_loss"], rel=1e-4, abs=1e-8
        )
        assert math.isfinite(record["critic/vf_loss"])
    # the policy is its reference until the first update, and moves away from it after
    assert records[0]["actor/kl_loss"] == records[0]["actor/reward_kl_penalty"] == 0
    assert all(record["actor/kl_loss"] > 0 for record in records[1:])
    # the adaptive controller's KL is far below its target (0.1), so β moves by its full -20 % x the global batch's
    # 4 sequences (2 per process) / horizon 10 each step: x 0.92 (counting one process's 2 would give x 0.96)
    coefficients = [record["actor/reward_kl_penalty_coeff"] for record in records]
    assert coefficients == pytest.approx([0.001 * 0.92**k for k in range(4)], rel=1e-9)
    state = json.loads((tmp_path / "checkpoint-4" / "algorithm_state.json").read_text())
    assert state["kl_ctrl"]["value"] < records[-1]["actor/reward_kl_penalty_coeff"]  # updated after step 4's use
    _critic_checkpoint_resumes_on_one_process(tmp_path / "checkpoint-4" / "critic", steps=4)
    # The run report, written once by the main process, plots the critic and both KL terms.
    assert (tmp_path / "report.html").is_file() and "could not write" not in done.stdout
    charts = {chart["title"]: chart for group in chart_data(records) for chart in group["charts"]}
    assert {"critic/vf_loss"} == {series["key"] for series in charts["Critic loss"]["series"]}
    assert {"actor/kl_loss", "actor/reward_kl_penalty"} <= {series["key"] for series in charts["KL"]["series"]}
    assert "Explained variance" in charts


def _critic_checkpoint_resumes_on_one_process(directory, steps: int) -> None:
    """The critic checkpoint of a two-process run of ``steps`` training steps (whole state dicts) loads into a
    one-process critic."""
    import torch
    from accelerate import Accelerator
    from transformers import AutoModelForTokenClassification

    from agentfly_train.config import CriticConfig, OptimConfig
    from agentfly_train.critic import Critic, CriticSettings

    critic = Critic(
        AutoModelForTokenClassification.from_pretrained(directory),
        CriticSettings(CriticConfig(optim=OptimConfig(lr=1.0))),
        Accelerator(),
    )
    critic.load(str(directory))
    saved = torch.load(directory / "optimizer.pt", weights_only=True)
    names = [name for name, _ in critic.model.named_parameters()]
    assert sorted(saved["state"]) == sorted(names)  # keyed by parameter name, not by position
    counts = {float(state["step"]) for state in critic.optimizer.state.values()}
    assert len(critic.optimizer.state) == len(names) and len(counts) == 1 and counts.pop() >= steps
    assert critic.optimizer.param_groups[0]["lr"] == 1e-3  # the run's critic.optim.lr, restored


def test_fsdp2_ppo_samples_the_sharded_policy_and_the_final_model_is_whole(tmp_path, warm_policies):
    """Two processes under FSDP2 (the policy and the critic sharded across them, each holding half of every
    weight), PPO with KL in the reward and the KL loss: the multi-turn HF rollouts, which end at different turns
    on the two processes, run on the policy held unsharded for the rollout; the SFT warm start's sharded model is
    handed to the RL trainer whole; checkpoints are sharded (the critic's whole) and ``final/`` is a whole model,
    whose one-process greedy validation is the run's own last validation."""
    from agentfly_train.evaluate import evaluate
    from tests.helpers.runs import LEARNING_TASKS, quickstart_config

    tasks = [o for o in LEARNING_TASKS if not o.startswith("data.val_size")]
    model_and_data = [*tasks, f"actor_rollout_ref.model.path={warm_policies(60)}", "data.val_size=8"]
    launch, env = accelerate_launch(2, fsdp=True)
    overrides = [*model_and_data, *PPO_WITH_KL_IN_REWARD, "actor_rollout_ref.actor.use_kl_loss=true",
                 "sft.steps=2", "data.train_batch_size=2", "agent.num_chains=4",
                 "actor_rollout_ref.actor.optim.lr=1e-3", "trainer.total_training_steps=2", "trainer.save_freq=2",
                 "trainer.val_before_train=false"]  # fmt: skip
    command = [*launch, "--no-progress", "--config", "quickstart", *overrides, f"trainer.default_local_dir={tmp_path}"]
    done = run_cli(command, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("run directory:") == 2 and "SFT warm start" in done.stdout
    records = MetricsFile(tmp_path / "metrics.jsonl").read()
    assert [r["step"] for r in records if "loss" in r] == [1, 2]
    for record in [r for r in records if "loss" in r]:
        assert record["episode/sampled_tokens"] > 0
        # as in the DDP run above: on-policy whitened advantages give a policy term of 0, plus 0.001 x the KL loss
        assert abs(record["actor/pg_loss"]) < 1e-6
        assert record["loss"] == pytest.approx(
            record["actor/pg_loss"] + 0.001 * record["actor/kl_loss"], rel=1e-4, abs=1e-8
        )
        assert math.isfinite(record["critic/vf_loss"])
    assert list((tmp_path / "checkpoint-2").glob("pytorch_model_fsdp_0/*.distcp"))  # the policy was sharded
    _critic_checkpoint_resumes_on_one_process(tmp_path / "checkpoint-2" / "critic", steps=2)
    final = [r for r in records if r.get("final")]
    assert len(final) == 1
    config = quickstart_config([*model_and_data, f"actor_rollout_ref.model.path={tmp_path / 'final'}",
                                f"trainer.default_local_dir={tmp_path / 'eval'}"])  # fmt: skip
    stats, _, _ = evaluate(config)
    for key in ("accuracy", "reward/mean", "episode/response_length", "episode/tool_calls"):
        assert stats[key] == pytest.approx(final[0][f"val/{key}"]), key
