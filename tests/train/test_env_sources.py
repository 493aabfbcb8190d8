"""Envs of other libraries in the trainer: ``agent.env=openenv:<url>`` (a served env) and
``agent.env=verifiers:<module>`` (a verifiers taskset written here) train two steps through the CLI."""

from __future__ import annotations

import json
import math
import subprocess
import time
import urllib.request

import pytest

from agentfly_envs.errors import TaskFormatError
from agentfly_train.__main__ import main
from agentfly_train.config import load_config
from tests.helpers.paths import REPO_ROOT
from tests.helpers.processes import free_port
from tests.helpers.readme import readme_command, runs_readme_command
from tests.helpers.runs import SMALLEST, step_records

TINY_SUMS = '''"""A verifiers taskset: add two numbers; the reward checks the reply's last word."""
import verifiers.v1 as vf


class SumData(vf.TaskData):
    answer: str


class SumTask(vf.Task[SumData, vf.State, vf.TaskConfig]):
    @vf.reward
    async def correct(self, task: SumData, trace: vf.Trace) -> float:
        return float(trace.last_reply.split()[-1:] == [task.answer])


class SumTaskset(vf.Taskset[SumTask, vf.TasksetConfig]):
    def load(self):
        for a in range(8):
            yield SumTask(SumData(prompt=f"{a} + {a + 1} =", answer=str(2 * a + 1), system_prompt="Add."))


__all__ = ["SumTaskset"]
'''


def test_a_verifiers_taskset_scores_as_its_rewards(tmp_path, monkeypatch):
    pytest.importorskip("verifiers", reason='needs verifiers (the "verifiers" extra)')
    import gymnasium as gym

    (tmp_path / "tiny_sums.py").write_text(TINY_SUMS)
    monkeypatch.syspath_prepend(str(tmp_path))
    env = gym.make("agentfly/Verifiers", taskset="tiny_sums")
    observation, info = env.reset(options={"index": 2})
    assert observation == "2 + 3 =" and [m["role"] for m in info["messages"]] == ["system", "user"]
    assert env.step("It is 5")[1:3] == (1.0, True)
    env.reset(options={"task": {"prompt": "1 + 1 =", "answer": "2"}})
    _, reward, _, _, step_info = env.step("3")
    assert reward == 0.0 and step_info["reward_components"] == {"correct": 0.0}
    with pytest.raises(TaskFormatError, match="field answer"):
        env.reset(options={"task": {"prompt": "1 + 1 ="}})


@pytest.mark.slow  # two RL steps of the tiny model
@runs_readme_command(
    "python -m agentfly_train --config quickstart agent.env=verifiers:tiny_sums 'agent.env_kwargs={}' "
    "'data.val_env_kwargs={}' agent.max_turns=1 sft.enable=false data.train_batch_size=2 agent.num_chains=2 "
    "data.val_size=2 trainer.total_training_steps=2 'trainer.logger=[console]'"
)
def test_tiny_model_trains_two_steps_on_a_verifiers_taskset(readme, tmp_path, monkeypatch):
    pytest.importorskip("verifiers", reason='needs verifiers (the "verifiers" extra)')
    (tmp_path / "tiny_sums.py").write_text(TINY_SUMS)
    monkeypatch.syspath_prepend(str(tmp_path))
    command = readme_command(readme, add=["--no-progress", f"trainer.default_local_dir={tmp_path / 'run'}", *SMALLEST])
    assert main(command.cli_arguments) == 0  # in this process: verifiers and torch are imported once
    records = step_records(tmp_path / "run")
    assert [record["step"] for record in records] == [1, 2]
    assert all(math.isfinite(record["loss"]) for record in records)
    samples = (tmp_path / "run" / "val_samples" / "step_000002.jsonl").read_text().splitlines()
    assert {tuple(json.loads(line)["reward_components"]) for line in samples} == {("correct",)}


def test_dry_run_checks_a_verifiers_taskset(tmp_path, monkeypatch, capsys):
    pytest.importorskip("verifiers", reason='needs verifiers (the "verifiers" extra)')
    (tmp_path / "tiny_sums.py").write_text(TINY_SUMS)
    monkeypatch.syspath_prepend(str(tmp_path))
    arguments = ["--config", "quickstart", "agent.env=verifiers:tiny_sums", "agent.env_kwargs={}"]
    arguments += ["data.val_env_kwargs={}", "agent.max_turns=1", "sft.enable=false", "--dry-run"]
    assert main(arguments) == 0
    out = capsys.readouterr().out
    assert "env: agentfly/Verifiers with tools [], parser tool_calls (agent.agent_type=hf), reward the env's own" in out
    assert out.rstrip().endswith("round trip ok")


@pytest.mark.slow  # a served env and two RL steps of the tiny model
@runs_readme_command(
    "python -m agentfly_envs serve agentfly/Arith-Calc --port 8000 "
    '--env-kwargs \'{"level": "single", "parser": "tool_calls"}\''
)
def test_tiny_model_trains_two_steps_on_a_served_env(readme, tmp_path):
    pytest.importorskip("openenv", reason='needs openenv-core (the "openenv" extra)')
    port = str(free_port())
    serve = readme_command(readme, change={"--port": port})
    server = subprocess.Popen(serve.argv, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(url + "/health", timeout=5) as response:
                    assert json.loads(response.read()) == {"status": "healthy"}
                    break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, server.communicate()[1][-2000:]
                time.sleep(0.5)
        train = readme_command(
            TRAIN_ON_SERVED,
            change={"agent.env": f"openenv:{url}"},
            add=["--no-progress", f"trainer.default_local_dir={tmp_path}", *SMALLEST, "agent.max_turns=2"],
        )
        assert main(train.cli_arguments) == 0
    finally:
        server.terminate()
        server.wait(timeout=30)
    records = step_records(tmp_path)
    assert [record["step"] for record in records] == [1, 2]
    samples = [json.loads(line) for line in (tmp_path / "val_samples" / "step_000002.jsonl").read_text().splitlines()]
    assert len(samples) == 2 and all("correct" in sample["reward_components"] for sample in samples)


TRAIN_ON_SERVED = (
    "python -m agentfly_train --config quickstart agent.env=openenv:http://127.0.0.1:8000 'agent.env_kwargs={}' "
    "'data.val_env_kwargs={}' sft.enable=false data.train_batch_size=2 agent.num_chains=2 "
    "data.val_size=2 trainer.total_training_steps=2 'trainer.logger=[console]'"
)


@runs_readme_command(
    "python -m agentfly_train --config quickstart agent.env=openenv:http://127.0.0.1:8000 'agent.env_kwargs={}' "
    "'data.val_env_kwargs={}' sft.enable=false data.train_batch_size=2 agent.num_chains=2 "
    "data.val_size=2 trainer.total_training_steps=2 'trainer.logger=[console]'"
)
def test_served_env_training_command_is_the_one_run_above(readme):
    """The training command of the docs (:data:`TRAIN_ON_SERVED`) is run by the test above, against the server it
    starts; here it names the served env."""
    assert readme == TRAIN_ON_SERVED
    arguments = readme_command(readme).cli_arguments
    assert arguments[:2] == ["--config", "quickstart"]
    config = load_config(arguments[2:], ["quickstart"], check=False)
    assert config.env_id == "agentfly/Remote" and config.env_source_kwargs == {"url": "http://127.0.0.1:8000"}


def test_a_bad_source_is_a_config_error(capsys):
    assert main(["--dry-run", "agent.env=openenv:localhost:1"]) == 2
    error = capsys.readouterr().err
    assert (
        error.startswith("config error: agent.env=openenv:localhost:1: give the server's URL")
        and error.count("\n") == 1
    )
