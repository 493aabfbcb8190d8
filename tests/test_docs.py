"""The documentation site builds without a warning (a broken link or anchor fails ``--strict``), and its generated
pages hold what they are generated from."""

import importlib.util
import os

import pytest

from tests.helpers.processes import run_cli
from tests.helpers.readme import readme_command, runs_readme_command


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None, reason="needs the docs extra: pip install -e '.[docs]'")
@runs_readme_command("mkdocs build --strict --site-dir site")
def test_the_site_builds_strictly(readme, tmp_path):
    command = readme_command(readme, {"--site-dir": str(tmp_path / "site")})
    done = run_cli(command.argv, timeout=300, env={"NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "WARNING" not in done.stderr, done.stderr
    keys = (tmp_path / "site" / "reference" / "keys" / "index.html").read_text()
    from agentfly_train.config import config_keys

    assert all(f"<code>{key}</code>" in keys for key in config_keys())
    api = (tmp_path / "site" / "api" / "index.html").read_text()
    assert 'id="agentfly_envs.core.ToolEnv"' in api and 'id="agentfly_train.algorithms.compute_advantage"' in api
    extending = (tmp_path / "site" / "extending" / "index.html").read_text()
    assert "median_baseline" in extending and "CallLinesParser" in extending  # the examples, included
    assert os.listdir(tmp_path / "site")
