"""benchmarks/context_policies.py: its documented command, run small (3 turns, one episode, a window of one turn)."""

from __future__ import annotations

import json

import pytest

from tests.helpers.processes import run_cli
from tests.helpers.readme import readme_command, runs_readme_command


@pytest.mark.slow  # a tokenizer trained and four processes that load torch
@runs_readme_command(
    "python benchmarks/context_policies.py --turns 10 30 100 --json benchmarks/results/context_policies.json"
)
def test_context_policies_benchmark(readme, tmp_path):
    result_file = tmp_path / "context.json"
    command = readme_command(readme, {"--turns": "3", "--json": str(result_file)}, ["--episodes", "1", "--window", "1"])
    done = run_cli(command.argv, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(result_file.read_text())["results"]["3"]
    assert [figures[p]["rows"] for p in ("full", "window", "mask_observations", "summarize")] == [1, 3, 3, 3]
    assert figures["full"]["tokens_ratio"] == 1.0 and figures["window"]["tokens_ratio"] < 1.0
    assert figures["mask_observations"]["tokens_ratio"] < 1.0  # the 127-digit answers outweigh the placeholder
    assert figures["summarize"]["summaries"] == 1 and figures["summarize"]["summary_prompt_tokens_per_turn"] > 0
    assert all(row["peak_rss_mib"] > 100 for row in figures.values())
    assert "tokens/turn" in done.stdout and "x full" in done.stdout
