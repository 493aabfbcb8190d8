"""The run report: built from a real short training run and opened in headless Chromium (charts drawn with data,
no console errors, the step picker, filters and the side-by-side compare work), plus broken run directories."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from agentfly_train.__main__ import main
from agentfly_train.report import build_report, load_run
from agentfly_train.report.charts import chart_data
from tests.helpers.browser import console_errors, open_page, select
from tests.helpers.processes import run_cli
from tests.helpers.runs import LEARNING_TASKS, quickstart_command

TRAIN_SAMPLES = 6


# --- the browser ------------------------------------------------------------------------------------------------


def shown_episodes(driver) -> list:
    return driver.find_elements("css selector", "#episode-list article.episode")


def count_text(driver) -> str:
    return driver.find_element("id", "episode-count").text


# --- a real run -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trained_run(warm_policy, tmp_path_factory) -> Path:
    """Two RL steps of the warm-started tiny policy, validating at every step and saving training episodes."""
    run_dir = tmp_path_factory.mktemp("report_run")
    done = run_cli(
        quickstart_command(
            *LEARNING_TASKS,
            f"actor_rollout_ref.model.path={warm_policy}",
            "sft.enable=false",
            "data.train_batch_size=2",
            "data.val_size=2",
            "trainer.total_training_steps=2",
            "trainer.test_freq=1",
            f"trainer.log_train_generations={TRAIN_SAMPLES}",
            f"trainer.default_local_dir={run_dir}",
        )
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return run_dir


def _episodes(run_dir: Path, split: str, step: int) -> list[dict]:
    path = run_dir / f"{split}_samples" / f"step_{step:06d}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
def test_a_run_writes_its_report_and_training_episodes(trained_run):
    assert (trained_run / "report.html").is_file()
    for step in (1, 2):
        episodes = _episodes(trained_run, "train", step)
        assert 0 < len(episodes) <= TRAIN_SAMPLES
        for episode in episodes:
            assert len(episode["turn_calls"]) == episode["turns"]
            assert episode["completion_tokens"] >= episode["sampled_tokens"] > 0 and episode["prompt_tokens"] > 0
    assert sorted(load_run(trained_run).samples["val"]) == [0, 1, 2]
    data = load_run(trained_run)
    assert not [p for p in data.problems if "line" in p]  # every line of a finished run reads


@pytest.mark.slow
def test_report_in_a_browser_charts_filters_step_picker_and_compare(trained_run, browser, tmp_path):
    out = tmp_path / "report.html"
    assert main(["report", str(trained_run), "--out", str(out)]) == 0
    text = out.read_text()
    data_tag = '<script type="application/json" id="run-data">'
    assert re.findall(r"<script[^>]*>", text) == ["<script>", data_tag, "<script>"]
    open_page(browser, out)
    # Self-contained: the page fetched nothing (plotly.js, styles and data are inline).
    assert browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name)") == []

    # Every chart was drawn by plotly, with a line through its points.
    plots = browser.find_elements("css selector", ".chart .plot")
    titles = [element.text for element in browser.find_elements("css selector", ".chart h4")]
    assert {"Reward", "Accuracy", "Policy loss", "Entropy", "Turns", "Tool calls", "Step time"} <= set(titles)
    assert len(plots) == len(titles)
    for plot in plots:
        assert plot.find_elements("css selector", "svg.main-svg .scatterlayer .trace")
    reward = plots[titles.index("Reward")]
    paths = [p.get_attribute("d") for p in reward.find_elements("css selector", ".scatterlayer .trace path.js-line")]
    assert any(d and d.count("L") >= 1 for d in paths)  # a line with at least two points
    assert browser.execute_script("return document.querySelectorAll('.plot')[0].data.length") >= 1

    # Step picker: validation episodes of the chosen step, as chats with the tool turns.
    select(browser, "split-picker", "val")
    for step in (0, 2):
        select(browser, "step-picker", str(step))
        episodes = _episodes(trained_run, "val", step)
        assert count_text(browser) == f"{len(episodes)} of {len(episodes)} episodes"
        assert all(f"step {step}" in article.text for article in shown_episodes(browser))
        first = shown_episodes(browser)[0]
        assert len(first.find_elements("css selector", ".msg.role-assistant")) == episodes[0]["turns"]

    # Compare: each validation task beside the same task at another step.
    select(browser, "compare-picker", "0")
    for article in shown_episodes(browser):
        sides = article.find_elements("css selector", ".episode-side")
        assert len(sides) == 2 and "step 2" in sides[0].text and "step 0" in sides[1].text
        user = article.find_elements("css selector", ".role-user pre")
        assert len(user) == 2 and user[0].text == user[1].text
    select(browser, "compare-picker", "")

    # Filters over the training episodes of step 1: correctness, finish reason, text.
    select(browser, "split-picker", "train")
    select(browser, "step-picker", "1")
    episodes = _episodes(trained_run, "train", 1)
    correct = sum(episode["correct"] for episode in episodes)
    select(browser, "filter-correct", "correct")
    assert count_text(browser) == f"{correct} of {len(episodes)} episodes"
    assert all(a.get_attribute("data-correct") == "true" for a in shown_episodes(browser))
    select(browser, "filter-correct", "incorrect")
    assert len(shown_episodes(browser)) == len(episodes) - correct
    select(browser, "filter-correct", "all")
    reason = episodes[0]["finish_reason"]
    select(browser, "filter-finish", reason)
    expected = sum(episode["finish_reason"] == reason for episode in episodes)
    assert len(shown_episodes(browser)) == expected
    select(browser, "filter-finish", "all")
    question = next(m["content"] for m in episodes[0]["messages"] if m["role"] == "user")
    search = browser.find_element("id", "filter-text")
    search.send_keys(question.upper())  # case-insensitive
    expected = sum(any(m["content"] == question for m in episode["messages"]) for episode in episodes)
    assert len(shown_episodes(browser)) == expected > 0
    search.clear()
    search.send_keys("no such text anywhere")
    assert count_text(browser) == f"0 of {len(episodes)} episodes"
    assert console_errors(browser) == []


@pytest.mark.slow
def test_report_screenshots(trained_run, browser, tmp_path):
    """Writes PNGs of the report (to $AGENTFLY_REPORT_SHOTS if set) for a person to look at."""
    shots = Path(os.environ.get("AGENTFLY_REPORT_SHOTS", tmp_path))
    shots.mkdir(parents=True, exist_ok=True)
    open_page(browser, trained_run / "report.html")
    browser.save_screenshot(str(shots / "report_curves.png"))
    browser.execute_script("document.getElementById('episodes').scrollIntoView()")
    browser.save_screenshot(str(shots / "report_episodes.png"))
    for name in ("report_curves.png", "report_episodes.png"):
        png = (shots / name).read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000
    assert console_errors(browser) == []


# --- broken or young run directories ------------------------------------------------------------------------------


def _sample(question: str, correct: bool, content: str = "The answer is \\boxed{1}.") -> dict:
    return {
        "reward": float(correct),
        "correct": correct,
        "finish_reason": "stop",
        "turns": 1,
        "tool_calls": 0,
        "messages": [{"role": "user", "content": question}, {"role": "assistant", "content": content}],
    }


def _broken_run(run_dir: Path) -> Path:
    """metrics.jsonl and a validation file cut mid-line (a killed run), a NaN, a non-object line, message text
    that would end a <script> element if it were pasted into the page unescaped, and screenshots without a saved
    file (a run from before they were saved) or naming one outside the sample directory."""
    metrics = [{"step": 0, "val/accuracy": 0.0}, {"step": 1, "reward/mean": 0.5, "accuracy": 0.5, "loss": float("nan")}]
    lines = [json.dumps(record) for record in metrics]
    (run_dir / "metrics.jsonl").write_text("\n".join([*lines, "[1, 2]", '{"step": 2, "rewa']))
    (run_dir / "val_samples").mkdir()
    failed = _sample("Q2", False, "<tool_call>{oops</tool_call>")
    failed["messages"].append({"role": "assistant", "content": "\n" * 500})
    failed["messages"].append({"role": "tool", "name": "error", "content": "Error: tool call 1 is not valid JSON"})
    screens = [{"type": "image", "size": [160, 210]}, {"type": "image", "size": [8, 8], "file": "../../x.png"}]
    failed["messages"].append({"role": "tool", "name": "click", "content": [*screens, {"type": "text", "text": "Ok."}]})
    failed["turn_calls"] = [[{"error": "tool call 1 is not valid JSON"}]]
    episodes = [_sample("What is </script><script>alert(1)</script>?", True), failed]
    text = "\n".join(json.dumps(e) for e in episodes) + '\n{"reward": Na'
    (run_dir / "val_samples" / "step_000001.jsonl").write_text(text.replace('"reward": 1.0', '"reward": NaN'))
    (run_dir / "config.json").write_text("{not json")
    return run_dir


def test_truncated_and_malformed_lines_are_skipped_and_named(tmp_path):
    data = load_run(_broken_run(tmp_path))
    assert [record["step"] for record in data.metrics] == [0, 1]
    assert data.samples["val"][1][0]["reward"] is None and len(data.samples["val"][1]) == 2
    problems = "\n".join(data.problems)
    assert "metrics.jsonl line 3 is not a JSON object; skipped" in problems
    assert (
        "metrics.jsonl line 4 is not a JSON object (the last line: still being written, or the run was killed"
        in problems
    )
    assert "val_samples/step_000001.jsonl line 3" in problems
    assert "config.json is not a JSON object" in problems
    assert "1 screenshots named by the saved episodes are missing or not PNG files in their sample" in problems
    assert data.images == {} and "file" not in data.samples["val"][1][1]["messages"][-1]["content"][1]
    assert "no training episodes" in problems and "no validation episodes" not in problems
    groups = {group["title"]: group for group in chart_data(data.metrics)}
    reward = groups["Reward and accuracy"]["charts"][0]
    assert [(s["name"], s["x"], s["y"]) for s in reward["series"]] == [("train", [1], [0.5])]
    assert "Critic loss" in groups["Optimisation"]["missing"]
    assert "Policy loss" in groups["Optimisation"]["missing"]  # loss was NaN only


def eval_scores() -> dict:
    """What ``python -m agentfly_train eval`` writes for three tasks of three samples, k = 2."""
    from agentfly_train.evaluate import k_scores

    outcomes = [[(True, 1.0), (False, 0.0), (True, 1.0)], [(False, 0.0)] * 3, [(True, 1.0)] * 3]
    return {"env": "agentfly/Arith-Calc", **k_scores(outcomes, k=2)}


def test_eval_pass_at_k_is_read_and_a_malformed_file_is_named(tmp_path):
    scores = eval_scores()
    (tmp_path / "eval_pass_at_k.json").write_text(json.dumps(scores))
    assert load_run(tmp_path).pass_at_k == scores
    (tmp_path / "eval_pass_at_k.json").write_text(json.dumps({"k": 2, "tasks": "all"}))
    data = load_run(tmp_path)
    assert data.pass_at_k == {}
    assert "eval_pass_at_k.json lacks its overall figures or its list of tasks; ignored" in data.problems


@pytest.mark.slow
def test_report_shows_eval_pass_at_k_as_a_table(tmp_path, browser):
    (tmp_path / "eval_pass_at_k.json").write_text(json.dumps(eval_scores()))
    open_page(browser, build_report(tmp_path))
    table = browser.find_element("id", "pass-at-k-table")
    assert browser.find_element("id", "evaluation").is_displayed()
    rows = [
        [cell.text for cell in row.find_elements("css selector", "th, td")]
        for row in table.find_elements("css selector", "tr")
    ]
    low, high = eval_scores()["overall"]["pass@k_ci"]
    assert rows[0] == ["task", "samples", "correct", "pass@2", "mean@2"]
    assert rows[1][0] == "overall (3 tasks)" and rows[1][3] == f"0.6667 [{low:.4g}, {high:.4g}]"
    assert [row[:3] for row in rows[2:]] == [["0", "3", "2"], ["1", "3", "0"], ["2", "3", "3"]]
    for row, task in zip(rows[2:], eval_scores()["tasks"], strict=True):
        for cell, name in zip(row[3:], ("pass@k", "mean@k"), strict=True):
            low, high = task[f"{name}_ci"]
            assert cell == f"{task[name]:.4g} [{low:.4g}, {high:.4g}]"
    assert rows[2][3:] == ["1 [0, 1]", "0.6667 [0, 1]"] and rows[3][3:] == ["0 [0, 0]", "0 [0, 0]"]
    assert "agentfly/Arith-Calc: k = 2" in table.find_element("css selector", "caption").text
    assert console_errors(browser) == []


@pytest.mark.slow
def test_report_marks_excluded_and_replayed_episodes(tmp_path, browser):
    """An episode left out of training for an infrastructure failure, and one replayed after failures, say so."""
    chat = [{"role": "user", "content": "What is 6 * 7?"}, {"role": "assistant", "content": "42"}]
    plain = {"messages": chat, "reward": 1.0, "correct": True, "finish_reason": "stop", "turns": 1, "tool_calls": 0}
    episodes = [
        plain,
        {**plain, "failed_attempts": ["tool calculator: the worker died", "reset: the server stopped answering"]},
        {**plain, "reward": 0.0, "excluded": True, "infra_failure": "tool calculator: the worker died"},
    ]
    (tmp_path / "train_samples").mkdir()
    (tmp_path / "train_samples" / "step_000001.jsonl").write_text("".join(json.dumps(e) + "\n" for e in episodes))
    open_page(browser, build_report(tmp_path))
    select(browser, "split-picker", "train")
    facts = [article.find_element("css selector", ".facts").text for article in shown_episodes(browser)]
    assert len(facts) == 3 and "excluded" not in facts[0] and "replayed" not in facts[0]
    assert "replayed after 2 infrastructure failure(s): tool calculator: the worker died; reset: the server" in facts[1]
    assert "excluded, not trained: tool calculator: the worker died" in facts[2]
    assert console_errors(browser) == []


@pytest.mark.slow
def test_report_shows_each_turns_reward_and_advantage(tmp_path, browser):
    """A training episode's assistant turns each show their reward and the advantage their tokens got."""
    chat = [
        {"role": "user", "content": "What is 6 * 7?"},
        {"role": "assistant", "content": "<tool_call>6 * 7</tool_call>"},
        {"role": "tool", "name": "calculator", "content": "42"},
        {"role": "assistant", "content": "42"},
    ]
    episode = {"messages": chat, "reward": 0.9, "correct": True, "finish_reason": "stop", "turns": 2, "tool_calls": 1,
               "turn_rewards": [-0.1, 1.0], "turn_advantages": [0.4375, None]}  # fmt: skip
    (tmp_path / "train_samples").mkdir()
    (tmp_path / "train_samples" / "step_000001.jsonl").write_text(json.dumps(episode) + "\n")
    open_page(browser, build_report(tmp_path))
    select(browser, "split-picker", "train")
    credits = [
        element.text for element in browser.find_elements("css selector", "#episode-list .role-assistant .credit")
    ]
    assert credits == [
        "turn 1 · reward -0.1 · advantage 0.4375",
        "turn 2 · reward 1 · advantage none (no trained token)",
    ]
    assert console_errors(browser) == []


def test_chart_prefixes_drop_series_that_stay_zero():
    records = [
        {"step": 1, "episode/tool_error_rate/parse_error": 0.5, "episode/tool_error_rate/unknown_tool": 0.0},
        {"step": 2, "episode/tool_error_rate/parse_error": 0.25, "episode/tool_error_rate/unknown_tool": 0.0},
    ]
    charts = {chart["title"]: chart for group in chart_data(records) for chart in group["charts"]}
    series = charts["Tool error rate by kind (train)"]["series"]
    assert [(s["name"], s["y"]) for s in series] == [("parse_error", [0.5, 0.25])]


def test_report_command_errors_are_one_line(tmp_path, capsys):
    assert main(["report", str(tmp_path / "missing")]) == 2
    error = capsys.readouterr().err
    assert error.startswith("report error: run directory") and error.count("\n") == 1
    assert main(["report"]) == 2
    assert "usage: python -m agentfly_train report RUN_DIR" in capsys.readouterr().err


def test_log_train_generations_is_checked():
    from agentfly_train.config import ConfigError
    from tests.helpers.runs import quickstart_config

    assert quickstart_config(["trainer.log_train_generations=3"]).trainer.log_train_generations == 3
    with pytest.raises(ConfigError, match=r"trainer\.log_train_generations must be >= 0"):
        quickstart_config(["trainer.log_train_generations=-1"])


@pytest.mark.slow
def test_empty_and_broken_runs_give_pages_that_say_what_is_missing(tmp_path, browser, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["report", str(empty)]) == 0
    assert capsys.readouterr().out.strip() == str(empty / "report.html")
    open_page(browser, empty / "report.html")
    notes = browser.find_element("id", "problems").text
    assert "no metrics.jsonl" in notes and "no validation episodes" in notes and "log_train_generations" in notes
    assert "No curves" in browser.find_element("id", "curves").text
    assert "No saved episodes" in browser.find_element("id", "episodes").text
    assert not browser.find_element("id", "evaluation").is_displayed()  # no eval_pass_at_k.json
    assert console_errors(browser) == []

    (tmp_path / "broken").mkdir()
    page = build_report(_broken_run(tmp_path / "broken"))
    open_page(browser, page)
    assert "killed mid-write" in browser.find_element("id", "problems").text
    assert "reward n/a" in shown_episodes(browser)[0].text  # the NaN reward
    errors = shown_episodes(browser)[1].find_elements("css selector", ".msg.error, .call.error")
    assert [e.get_attribute("class") for e in errors] == ["call error", "msg role-tool error"]  # highlighted
    assert "(whitespace only: 500 characters" in shown_episodes(browser)[1].text
    assert "[screenshot 160×210: not saved]\n[screenshot 8×8: not saved]\nOk." in shown_episodes(browser)[1].text
    assert len(browser.find_elements("css selector", ".chart .plot svg.main-svg")) >= 1
    assert len(shown_episodes(browser)) == 2
    assert "</script><script>alert(1)</script>" in shown_episodes(browser)[0].text  # shown as text, not run
    assert console_errors(browser) == []
