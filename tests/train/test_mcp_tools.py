"""``agent.tools`` with an MCP server: the trainer's env lists the server's tools, and a tiny model trains on it."""

from __future__ import annotations

import math
import os
import sys

import pytest

from agentfly_train.__main__ import main
from tests.helpers.readme import readme_command, runs_readme_command
from tests.helpers.runs import SMALLEST, step_records

pytest.importorskip("mcp", reason='needs the mcp SDK (the "mcp" extra)')

TRAIN_WITH_MCP = (
    "python -m agentfly_train --config quickstart "
    "'agent.tools=[calculator,\"mcp:python tests/envs/tools/mcp_servers/toolbox.py\"]' sft.enable=false "
    "data.train_batch_size=2 agent.num_chains=2 data.val_size=2 trainer.total_training_steps=2 "
    "'trainer.logger=[console]'"
)


@pytest.fixture
def python_on_path(monkeypatch):
    """``python`` (in the documented ``mcp:python ...``) is this interpreter, as in an activated virtualenv."""
    monkeypatch.setenv("PATH", os.pathsep.join([os.path.dirname(sys.executable), os.environ["PATH"]]))


@pytest.mark.slow  # two RL steps of the tiny model
@runs_readme_command(
    "python -m agentfly_train --config quickstart "
    "'agent.tools=[calculator,\"mcp:python tests/envs/tools/mcp_servers/toolbox.py\"]' sft.enable=false "
    "data.train_batch_size=2 agent.num_chains=2 data.val_size=2 trainer.total_training_steps=2 "
    "'trainer.logger=[console]'"
)
def test_tiny_model_trains_two_steps_with_an_mcp_servers_tools(readme, tmp_path, python_on_path):
    assert readme == TRAIN_WITH_MCP  # the dry run below runs it too
    command = readme_command(readme, add=["--no-progress", f"trainer.default_local_dir={tmp_path}", *SMALLEST])
    assert main(command.cli_arguments) == 0
    records = step_records(tmp_path)
    assert [record["step"] for record in records] == [1, 2]
    assert all(math.isfinite(record["loss"]) for record in records)


def test_dry_run_lists_the_mcp_servers_tools(python_on_path, capsys):
    arguments = readme_command(TRAIN_WITH_MCP).cli_arguments
    assert main([*arguments, "--dry-run"]) == 0
    out = capsys.readouterr().out
    tools = "['calculator', 'add', 'shout', 'fail', 'nap', 'pid', 'die', 'picture']"
    assert f"env: agentfly/Arith-Calc with tools {tools}, parser tool_calls" in out


def test_a_server_that_does_not_start_is_a_config_error_naming_agent_tools(capsys):
    assert main(["--config", "quickstart", "--dry-run", "agent.tools=[calculator,mcp:no-such-mcp-server]"]) == 2
    error = capsys.readouterr().err
    assert error == (
        "config error: agent.tools: the MCP server no-such-mcp-server did not start: [Errno 2] No such file or "
        "directory: 'no-such-mcp-server'\n"
    )
