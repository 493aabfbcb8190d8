"""The README's code and claims stay true."""

import re

from tests.conftest import REPO_ROOT

README = (REPO_ROOT / "README.md").read_text()


def test_quick_tour_runs_as_written(monkeypatch):
    monkeypatch.chdir(REPO_ROOT)
    block = re.search(r"```python\n(.*?)```", README, re.DOTALL).group(1)
    namespace: dict = {}
    exec(compile(block, "README.md", "exec"), namespace)
    assert namespace["reward"] == 1.0 and namespace["terminated"]
    assert namespace["info"]["reward_components"] == {"answer_found": 1.0, "correct": 1.0}


def test_first_lines_are_the_two_setup_commands():
    lines = README.splitlines()
    assert lines[3].startswith("python3 -m venv .venv") and lines[3].endswith("python -m agentfly_train")
    assert lines[4] == ". .venv/bin/activate && python -m pytest -q"
    ci = (REPO_ROOT / ".ci" / "run").read_text()
    assert "python -m pytest -q" in ci.splitlines()[-1]


def test_readme_lists_every_registered_component():
    from agentfly_envs import ENVIRONMENTS, PARSERS, REWARDS, TOOLS

    for name in [*ENVIRONMENTS, *PARSERS, *REWARDS, *TOOLS]:
        assert f"`{name}" in README, name
