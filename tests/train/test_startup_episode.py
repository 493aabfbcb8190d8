"""The start-up episode (``build.make_codec``'s template check) runs each reset and step under
``actor_rollout_ref.rollout.env_step_timeout``: a tool that hangs, or one that meets an infrastructure failure, stops
the run and the dry run in one line (exit 2) instead of hanging start-up without a word."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from agentfly_envs import TOOLS, user_code
from agentfly_train.__main__ import main
from tests.helpers.processes import run_cli

TOOL = '''import time

from agentfly_envs import InfrastructureError
from agentfly_envs.tools import register_tool


@register_tool()
def slow_tool(x: int) -> str:
    """Looks ``x`` up.

    Args:
        x: What to look up.
    """
    BODY
'''
"""A user module whose tool ``slow_tool`` runs ``BODY``."""
HANGS = "time.sleep(10**6)"
FAILS = "raise InfrastructureError('the judge is down')"

TIMED_OUT = (
    "the start-up episode's step ran past actor_rollout_ref.rollout.env_step_timeout=1 s (in tool 'slow_tool'); "
    "a tool or reward that hangs would stall every episode: fix it, or raise the timeout"
)


@pytest.fixture
def clean(monkeypatch):
    """The tools registered and the user modules imported during a test are forgotten after it."""
    monkeypatch.setattr(TOOLS, "_entries", dict(TOOLS._entries))
    monkeypatch.setattr(user_code, "_LOADED_REWARDS", {})
    yield
    for name in [name for name in sys.modules if name.startswith("agentfly_user_")]:
        del sys.modules[name]


def _tool_file(directory: Path, body: str) -> Path:
    """The user module :data:`TOOL` with ``body``, in ``directory``."""
    path = directory / "slow_tools.py"
    path.write_text(TOOL.replace("BODY", body))
    return path


def _arguments(tools: Path, run_dir: Path) -> list[str]:
    """A quickstart run whose only tool is ``slow_tool`` (the start-up episode's probe call calls it)."""
    return [
        "--no-progress",
        "--config",
        "quickstart",
        f"agent.imports=[{tools}]",
        "agent.tools=[slow_tool]",
        "actor_rollout_ref.rollout.env_step_timeout=1",
        f"trainer.default_local_dir={run_dir}",
    ]


def _one_line_exit_2(arguments: list[str], capsys) -> str:
    assert main(arguments) == 2
    err = capsys.readouterr().err
    assert err.startswith("config error: ") and err.count("\n") == 1, err
    return err.removeprefix("config error: ").rstrip("\n")


@pytest.mark.parametrize("dry_run", [False, True], ids=["train", "dry-run"])
def test_a_tool_that_hangs_stops_start_up_in_one_line(clean, tmp_path, capsys, dry_run):
    arguments = _arguments(_tool_file(tmp_path, HANGS), tmp_path / "run")
    started = time.monotonic()
    assert _one_line_exit_2(["--dry-run", *arguments] if dry_run else arguments, capsys) == TIMED_OUT
    assert time.monotonic() - started < 20


def test_an_infrastructure_failure_stops_start_up_in_one_line(clean, tmp_path, capsys):
    arguments = ["--dry-run", *_arguments(_tool_file(tmp_path, FAILS), tmp_path / "run")]
    assert _one_line_exit_2(arguments, capsys) == (
        'the start-up episode met an infrastructure failure: "tool slow_tool: the judge is down"; the run checks its '
        "chat template on one working episode: fix it and run again"
    )


def test_the_hung_thread_does_not_keep_the_process_alive(tmp_path):
    arguments = _arguments(_tool_file(tmp_path, HANGS), tmp_path / "run")
    started = time.monotonic()
    done = run_cli([sys.executable, "-m", "agentfly_train", *arguments], timeout=120)
    assert (done.returncode, done.stderr) == (2, f"config error: {TIMED_OUT}\n")
    assert time.monotonic() - started < 60
