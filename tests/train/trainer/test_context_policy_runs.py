"""2-step training runs of the quickstart under each context policy (``agent.context.policy``) and step-wise
training (``agent.context.step_wise``): the CLI trains with ``summarize`` (its summaries written by the tiny policy
through the HF backend), and the same run in this process with the others, each turn a row of its own."""

from __future__ import annotations

import math

import pytest

from tests.helpers.processes import run_cli
from tests.helpers.readme import readme_command, runs_readme_command
from tests.helpers.runs import quickstart_config, step_records

TINY_RUN = (
    "sft.enable=false",
    "trainer.total_training_steps=2",
    "trainer.val_before_train=false",
    "data.train_batch_size=2",
    "agent.num_chains=2",
    "agent.max_tokens_per_turn=16",
    "actor_rollout_ref.rollout.response_length=128",
    "data.val_size=2",
    "actor_rollout_ref.model.tiny_hidden_size=32",
)


def _trained_two_steps(run_dir) -> None:
    records = step_records(run_dir)
    assert [record["step"] for record in records] == [1, 2]
    assert all(math.isfinite(record["loss"]) for record in records)


@pytest.mark.slow
@runs_readme_command(
    "python -m agentfly_train --config quickstart agent.context.policy=summarize agent.context.window=2 "
    "agent.max_turns=8 sft.enable=false"
)
def test_a_summarize_run_trains_two_steps_from_the_command_line(readme, tmp_path):
    changes = {"agent.context.window": "1", "agent.max_turns": "4"}
    add = ["--no-progress", "agent.context.summary_tokens=16", *TINY_RUN, f"trainer.default_local_dir={tmp_path}"]
    command = readme_command(readme, changes, add)
    done = run_cli(command.argv, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    _trained_two_steps(tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize(
    "setting", ["agent.context.step_wise=true", "agent.context.policy=window", "agent.context.policy=mask_observations"]
)
def test_a_step_wise_run_trains_two_steps(tmp_path, setting):
    from agentfly_train.train import run

    window = [] if "step_wise" in setting else ["agent.context.window=1"]  # full reads no window
    config = quickstart_config([setting, *window, *TINY_RUN, f"trainer.default_local_dir={tmp_path}"])
    assert config.agent.trains_turn_rows
    run(config, show_progress=False)
    _trained_two_steps(tmp_path)
