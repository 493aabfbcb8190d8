"""Rollouts and training with the envs on Ray actors (``actor_rollout_ref.rollout.env_runtime=ray``), on a real
local Ray cluster: the same trajectories as local envs, a killed actor mid-rollout, a training run."""

from __future__ import annotations

import dataclasses
import json
import re
from concurrent.futures import ThreadPoolExecutor

import pytest

from agentfly_envs.runtime import LocalEnvPool, RayEnvPool
from agentfly_train.__main__ import main
from agentfly_train.callbacks import MetricsFile
from agentfly_train.config import ConfigError
from agentfly_train.generation import HFGenerationBackend, SamplingParams
from agentfly_train.rollout import ChatCodec, RolloutBudgets, run_rollouts
from agentfly_train.run_dir import RESULT_FILE
from agentfly_train.tiny_model import build_model
from tests.helpers.paths import OFFLINE_KWARGS
from tests.helpers.processes import kill_actor, lines_printed_without
from tests.helpers.readme import readme_command, runs_readme_command
from tests.helpers.runs import LEARNING_TASKS, quickstart_config
from tests.helpers.scripted import ScriptedPolicy, golden_scripts

pytestmark = pytest.mark.xdist_group("ray")
"""On one worker with the other Ray tests (one local cluster at a time)."""

ENV_ID = "agentfly/Math-Python"
KWARGS = {**OFFLINE_KWARGS[ENV_ID], "max_turns": 4}
BUDGETS = RolloutBudgets(max_turns=4, max_tokens_per_turn=48, response_length=512)


@pytest.fixture(scope="module")
def setup(ray_cluster, tiny_tokenizer):
    """Four Math-Python tasks, local envs, and envs on two Ray actors."""
    local, remote = LocalEnvPool(ENV_ID, KWARGS), RayEnvPool(ENV_ID, KWARGS, num_workers=2, worker_cpus=0.5)
    env = local.take(1)[0]
    _, info = env.reset(options={"index": 0})
    tasks = [env.unwrapped.tasks.row(i) for i in range(4)]
    executor = ThreadPoolExecutor(8)
    yield local, remote, ChatCodec(tiny_tokenizer, info["tools"]), tasks, executor
    executor.shutdown()
    local.close()
    remote.close()


def episode(trajectory) -> dict:
    """Everything of a trajectory but its timing, with the random tool-call ids masked."""
    fields = {k: v for k, v in dataclasses.asdict(trajectory).items() if k != "env_seconds"}
    return json.loads(re.sub(r"call_[0-9a-f]{12}", "call_ID", json.dumps(fields)))


class KillingBackend:
    """A real backend that kills an env actor after its first generation call, before the envs step."""

    def __init__(self, backend, pool: RayEnvPool, ray) -> None:
        self.backend, self.pool, self.ray, self.calls = backend, pool, ray, 0

    def generate(self, prompts, max_new_tokens, params):
        generations = self.backend.generate(prompts, max_new_tokens, params)
        self.calls += 1
        if self.calls == 1:
            kill_actor(self.ray, self.pool.actors[0])
        return generations


def test_ray_envs_give_the_same_trajectories_as_local_envs_under_greedy_decoding(setup):
    local, remote, codec, tasks, executor = setup
    model = build_model(codec.tokenizer, hidden_size=32, seed=4)
    greedy = HFGenerationBackend.for_model(model, codec.tokenizer.pad_token_id, [codec.eos_token_id])

    def local_and_remote(make_backend) -> list[list[dict]]:
        return [
            [
                episode(t)
                for t in run_rollouts(
                    pool.take(4), tasks, make_backend(), codec, BUDGETS, SamplingParams(temperature=0.0), executor
                )
            ]
            for pool in (local, remote)
        ]

    here, there = local_and_remote(lambda: greedy)  # the tiny random model's own turns
    assert there == here
    # Golden python calls, then the answer: every tool call runs on the actors.
    here, there = local_and_remote(lambda: ScriptedPolicy(codec, golden_scripts(local.take(4), codec, tasks)))
    assert there == here and all(e["num_tool_calls"] > 0 and e["reward"] == 1.0 for e in there)
    assert remote.pop_failures() == {"actor_died": 0, "timeout": 0}


def test_a_killed_env_actor_mid_rollout_truncates_its_episodes_and_the_next_rollout_works(setup, ray_cluster):
    local, remote, codec, tasks, executor = setup
    policy = KillingBackend(ScriptedPolicy(codec, golden_scripts(local.take(4), codec, tasks)), remote, ray_cluster)
    trajectories = run_rollouts(remote.take(4), tasks, policy, codec, BUDGETS, SamplingParams(), executor)
    # Envs 0 and 2 lived on the killed actor: their first step came back as an error that ends the episode.
    assert [(t.finish_reason, t.reward, t.num_turns) for t in trajectories[::2]] == [("max_turns", 0.0, 1)] * 2
    assert all(t.finish_reason == "stop" and t.reward == 1.0 for t in trajectories[1::2])
    assert remote.pop_failures() == {"actor_died": 2, "timeout": 0}
    policy = ScriptedPolicy(codec, golden_scripts(local.take(4), codec, tasks))
    again = run_rollouts(remote.take(4), tasks, policy, codec, BUDGETS, SamplingParams(), executor)
    assert all(t.finish_reason == "stop" and t.reward == 1.0 for t in again)


def test_env_runtime_keys_are_checked_in_one_line(ray_cluster):
    from agentfly_train.build import env_pool

    with pytest.raises(
        ConfigError, match=r"rollout.env_runtime: env runtime 'remote' is not registered\. Known: local, ray"
    ):
        quickstart_config(["actor_rollout_ref.rollout.env_runtime=remote"])
    with pytest.raises(ConfigError, match=r"rollout.env_step_timeout must be > 0, got 0"):
        quickstart_config(["actor_rollout_ref.rollout.env_step_timeout=0"])
    with pytest.raises(ConfigError, match=r"rollout.env_worker_resources.tools must be >= 0, got -1"):
        quickstart_config(["actor_rollout_ref.rollout.env_worker_resources={tools: -1}"])
    config = quickstart_config(["actor_rollout_ref.rollout.env_runtime=ray"])  # 8 actors of 1 CPU each
    with pytest.raises(ConfigError, match=r"env_worker_\*: 8 env workers need 8 CPU in all, the Ray cluster has 2"):
        env_pool(config, {})


def test_without_ray_the_key_is_a_config_error_that_says_what_to_install():
    code = (
        "from agentfly_train.config import QUICKSTART, ConfigError, load_config\n"
        "try:\n"
        "    load_config(['actor_rollout_ref.rollout.env_runtime=ray'], [QUICKSTART])\n"
        "except ConfigError as error:\n"
        "    print(error)\n"
    )
    assert lines_printed_without("ray", code) == [
        'actor_rollout_ref.rollout.env_runtime=ray needs Ray (the "ray" extra): pip install "agentfly-rl[ray]", or '
        'pip install "ray>=2.40"'
    ]


@pytest.mark.slow
@runs_readme_command(
    "python -m agentfly_train --config quickstart actor_rollout_ref.rollout.env_runtime=ray "
    "actor_rollout_ref.rollout.env_workers=2 actor_rollout_ref.rollout.env_worker_cpus=0.5"
)
def test_a_training_run_with_ray_envs(readme, ray_cluster, tmp_path):
    sizes = ["sft.enable=false", "data.train_batch_size=2", "agent.num_chains=2", "data.val_size=2",
             "trainer.total_training_steps=2"]  # fmt: skip
    command = readme_command(
        readme, add=["--no-progress", *LEARNING_TASKS, *sizes, f"trainer.default_local_dir={tmp_path}"]
    )
    assert main(command.cli_arguments) == 0
    result = json.loads((tmp_path / RESULT_FILE).read_text())
    steps = [r for r in MetricsFile(tmp_path / "metrics.jsonl").read() if "reward/mean" in r]
    assert [(r["step"], r["env/remote_failures"]) for r in steps] == [(1, 0), (2, 0)]
    assert result["steps"] == 2 and result["val_after"]["val/env/remote_failures"] == 0
    assert result["val_after"]["val/episode/turns"] >= 1
