"""The documented training-side commands that no other test runs: the dry run, and eval and report of a run.

Each runs as the README or docs/ writes it (:func:`tests.helpers.readme.readme_command`), on a one-step tiny quickstart
run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("trl", reason="the trainer's commands need the train extra: pip install 'agentfly-rl[train]'")

from agentfly_train.__main__ import main
from tests.helpers.paths import REPO_ROOT
from tests.helpers.readme import readme_command, runs_readme_command


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> Path:
    """The run directory of a one-step quickstart run of the tiny model, validating 2 tasks before and after."""
    run_dir = tmp_path_factory.mktemp("quickstart")
    status = main(
        [
            "--no-progress",
            "--config",
            "quickstart",
            "actor_rollout_ref.model.tiny_hidden_size=32",
            "sft.steps=2",
            "sft.num_demos=4",
            "data.train_batch_size=2",
            "agent.num_chains=2",
            "agent.max_tokens_per_turn=16",
            "actor_rollout_ref.rollout.response_length=64",
            "data.val_size=2",
            "trainer.total_training_steps=1",
            f"trainer.default_local_dir={run_dir}",
        ]
    )
    assert status == 0
    return run_dir


def test_sample_files_are_named_as_the_docs_say(tiny_run):
    # docs/report.md and docs/training.md name them val_samples/step_000010.jsonl: the step, six digits
    assert sorted(path.name for path in (tiny_run / "val_samples").iterdir()) == [
        "step_000000.jsonl",
        "step_000001.jsonl",
    ]


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@runs_readme_command(
    "python -m agentfly_train --dry-run algorithm.adv_estimator=grpo data.train_files=data/guide/math_train.json "
    "agent.tools=[calculator] agent.reward_name=math_reward_string_equal actor_rollout_ref.model.path=agentfly:tiny"
)
def test_dry_run_command(readme, monkeypatch, capsys):
    monkeypatch.chdir(REPO_ROOT)
    assert main(readme_command(readme).cli_arguments) == 0
    out = capsys.readouterr().out
    assert "env: agentfly/Files with tools ['calculator']" in out and "algorithm.adv_estimator = 'grpo'" in out


@pytest.mark.slow  # a training run of the tiny model (about 15 s)
@runs_readme_command("python -m agentfly_train eval actor_rollout_ref.model.path=runs/agentfly/quickstart/final")
def test_eval_of_a_run_runs_its_validation_tasks(readme, tiny_run, capsys):
    command = readme_command(readme, {"actor_rollout_ref.model.path": str(tiny_run / "final")})
    assert main(command.cli_arguments) == 0
    out = capsys.readouterr().out
    assert f"eval: on the settings of the run in {tiny_run / 'config.json'}" in out
    assert "agentfly/Arith-Calc: accuracy" in out
    # The run's tasks (level single, validation task_seed 1, 2 of them), not the env's defaults.
    evaluated = [record["messages"][1]["content"] for record in _records(tiny_run / "eval.jsonl")]
    validated = [record["messages"][1]["content"] for record in _records(tiny_run / "val_samples/step_000000.jsonl")]
    assert evaluated == validated and len(evaluated) == 2


@pytest.mark.slow  # a training run of the tiny model (about 15 s)
@runs_readme_command(
    "python -m agentfly_train report runs/agentfly/quickstart",
    "python -m agentfly_train report RUN_DIR --out /tmp/run.html",
)
def test_report_commands(readme, tiny_run, tmp_path, capsys):
    if "RUN_DIR" in readme:
        page = tmp_path / "run.html"
        command = readme_command(readme, {"RUN_DIR": str(tiny_run), "--out": str(page)})
    else:
        page = tiny_run / "report.html"
        page.unlink(missing_ok=True)  # the run wrote one when it ended; the command writes it again
        command = readme_command(readme, {"runs/agentfly/quickstart": str(tiny_run)})
    assert main(command.cli_arguments) == 0
    assert capsys.readouterr().out.strip() == str(page)
    assert '<script type="application/json" id="run-data">' in page.read_text()
