"""``python -m agentfly_envs``: its help names both of its commands."""

from __future__ import annotations

import pytest

from agentfly_envs.__main__ import main


def test_help_names_the_serve_command(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "python -m agentfly_envs serve ENV_ID" in out.split("\n\n")[0]  # in the usage lines
    assert "`python -m agentfly_envs serve --help` lists its options" in " ".join(out.split())
    assert "`python -m agentfly_envs serve ENV_ID --mcp` its tools to MCP clients" in " ".join(out.split())


def test_serve_help_lists_its_options(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["serve", "--help"])
    assert exit_.value.code == 0
    assert "--max-sessions" in capsys.readouterr().out
