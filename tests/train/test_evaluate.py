"""The evaluation command: a model and an env id in, accuracy and trajectories out."""

from __future__ import annotations

import itertools
import json
import random
from dataclasses import asdict
from pathlib import Path

import pytest

from agentfly_train.__main__ import main
from agentfly_train.config import QUICKSTART, load_config
from agentfly_train.evaluate import eval_config, k_scores, pass_at_k


def test_eval_command_writes_one_trajectory_per_validation_row(tmp_path, capsys):
    status = main(
        [
            "eval",
            "--config",
            "quickstart",
            "data.val_size=2",
            "actor_rollout_ref.model.tiny_hidden_size=32",
            "agent.max_tokens_per_turn=8",
            "agent.max_turns=2",
            f"trainer.default_local_dir={tmp_path}",
            "eval.k=2",
            "eval.n=2",
            "--samples",
            "1",
        ]
    )
    assert status == 0
    records = [json.loads(line) for line in (tmp_path / "eval.jsonl").read_text().splitlines()]
    assert len(records) == 4  # 2 tasks x eval.n samples, each task's samples together
    assert all(r["messages"][0]["role"] == "system" and r["messages"][-1]["role"] == "assistant" for r in records)
    assert records[0]["messages"][1] == records[1]["messages"][1] != records[2]["messages"][1]
    out = capsys.readouterr().out
    assert "agentfly/Arith-Calc: accuracy" in out and "pass@2 " in out and "over 2 tasks x 2 samples" in out
    assert out.count('{\n  "reward"') == 1 and json.dumps(records[0], indent=2) in out  # --samples 1
    scores = json.loads((tmp_path / "eval_pass_at_k.json").read_text())
    assert [task["n"] for task in scores["tasks"]] == [2, 2] and scores["k"] == 2
    for task, start in zip(scores["tasks"], (0, 2), strict=True):
        assert task["correct"] == sum(r["correct"] for r in records[start : start + 2])
        assert task["mean@k"] == pytest.approx(sum(r["reward"] for r in records[start : start + 2]) / 2)


def test_eval_of_a_saved_model_prints_its_summary_alone(tmp_path, tiny_tokenizer, capfd):
    """Issue #43: eval printed transformers' weights-loading bar and three trajectories as JSON (about 190 lines)
    before its summary; the trajectories are in eval.jsonl, and ``--samples N`` prints N of them."""
    import datasets
    from transformers.utils import logging as transformers_logging

    from agentfly_train.tiny_model import build_model

    model_dir = tmp_path / "model"
    build_model(tiny_tokenizer, hidden_size=32, num_layers=1).save_pretrained(model_dir)
    tiny_tokenizer.save_pretrained(model_dir)
    bars = transformers_logging.is_progress_bar_enabled(), datasets.is_progress_bar_enabled()
    transformers_logging.enable_progress_bar()  # as in a new process: a test before this one may have turned it off
    try:
        status = main(
            [
                "eval",
                "--config",
                "quickstart",
                f"actor_rollout_ref.model.path={model_dir}",
                "data.val_size=2",
                "agent.max_tokens_per_turn=8",
                "agent.max_turns=2",
                f"trainer.default_local_dir={tmp_path / 'eval'}",
            ]
        )
    finally:
        (transformers_logging.enable_progress_bar if bars[0] else transformers_logging.disable_progress_bar)()
        (datasets.enable_progress_bars if bars[1] else datasets.disable_progress_bars)()
    assert status == 0
    out, err = capfd.readouterr()
    assert "Loading weights" not in err
    lines = out.splitlines()
    assert len(lines) == 2 and lines[0].startswith("agentfly/Arith-Calc: accuracy") and lines[1].startswith("pass@1 ")
    assert len((tmp_path / "eval" / "eval.jsonl").read_text().splitlines()) == 2


def test_pass_at_k_is_the_unbiased_estimate_on_a_scripted_policy():
    """A scripted policy solves task t with probability p_t; pass@k from n samples equals the mean over every k-subset
    of the samples (what the estimator is unbiased for), and over many tasks it lands on 1 - (1 - p)^k."""
    rng = random.Random(0)
    rates = [0.0, 0.1, 0.5, 0.9, 1.0] * 40
    outcomes = [[(rng.random() < p, float(rng.random() < p)) for _ in range(8)] for p in rates]
    for k in (1, 3, 8):
        scores = k_scores(outcomes, k)
        for task, samples in zip(scores["tasks"], outcomes, strict=True):
            subsets = list(itertools.combinations([correct for correct, _ in samples], k))
            assert task["pass@k"] == pytest.approx(sum(any(subset) for subset in subsets) / len(subsets))
            for name in ("pass@k", "mean@k"):
                low, high = task[f"{name}_ci"]
                assert 0.0 <= low <= task[name] <= high <= 1.0
        for rate in set(rates):
            estimates = [task["pass@k"] for task, p in zip(scores["tasks"], rates, strict=True) if p == rate]
            assert sum(estimates) / len(estimates) == pytest.approx(1 - (1 - rate) ** k, abs=0.12)
        low, high = scores["overall"]["pass@k_ci"]
        assert 0.0 <= low < sum(1 - (1 - p) ** k for p in rates) / len(rates) < high <= 1.0
    few = k_scores([[(True, 1.0)] * 2, [(False, 0.0)] * 2, [(True, 1.0), (False, 0.0)]], 1)
    low, high = few["overall"]["pass@k_ci"]  # a normal approximation gives [-0.07, 1.07]
    assert 0.0 <= low <= high <= 1.0
    assert pass_at_k(5, 0, 3) == 0.0 and pass_at_k(5, 3, 3) == 1.0
    with pytest.raises(ValueError, match="1 <= k <= n"):
        pass_at_k(2, 1, 3)


def test_eval_k_above_its_samples_is_a_config_error(capsys):
    assert main(["eval", "--config", "quickstart", "eval.k=4", "eval.n=2"]) == 2
    assert "eval.n=2 samples per task cannot estimate pass@4: set eval.n >= eval.k" in capsys.readouterr().err


def _run_dir(tmp_path: Path, overrides: list[str]) -> Path:
    """A run directory as training leaves it (its config.json, a final/ model dir), from the quickstart preset."""
    run_dir = tmp_path / "run"
    (run_dir / "final").mkdir(parents=True)
    (run_dir / "checkpoint-2").mkdir()
    (run_dir / "export").mkdir()
    config = load_config([*overrides, f"trainer.default_local_dir={tmp_path / 'elsewhere'}"], [QUICKSTART])
    (run_dir / "config.json").write_text(json.dumps(asdict(config)))
    return run_dir


def test_eval_of_a_run_model_starts_from_the_runs_settings(tmp_path):
    run_dir = _run_dir(tmp_path, ["agent.model_name_or_path=Qwen/Qwen2.5-0.5B-Instruct", "data.val_size=5"])
    for model in ("final", "checkpoint-2"):
        overrides = [f"actor_rollout_ref.model.path={run_dir / model}", "agent.max_turns=2"]
        config, source = eval_config(overrides, [])
        assert source == str(run_dir / "config.json")
        assert config.agent.env == "agentfly/Arith-Calc" and config.agent.env_kwargs == {"level": "single"}
        assert config.data.val_env_kwargs == {"task_seed": 1} and config.data.val_size == 5
        assert config.agent.max_tokens_per_turn == 48 and config.actor_rollout_ref.rollout.response_length == 256
        assert config.agent.max_turns == 2  # the command line's on top
        assert config.model_path == str(run_dir / model)  # not the run's agent.model_name_or_path
        assert config.trainer.default_local_dir == str(run_dir)  # eval.jsonl goes into the run directory
        assert config.sft.enable is False and config.trainer.total_training_steps != 30  # training keys: defaults
    config, _ = eval_config([f"actor_rollout_ref.model.path={run_dir / 'final'}", "agent.env_kwargs.level=easy"], [])
    assert config.agent.env_kwargs == {"level": "easy"}


def test_eval_of_a_model_outside_a_run_starts_from_the_defaults(tmp_path):
    run_dir = _run_dir(tmp_path, [])
    config, source = eval_config(
        [f"actor_rollout_ref.model.path={run_dir / 'export'}", "agent.env=agentfly/Arith-Calc"], []
    )
    assert source is None and config.agent.env_kwargs == {} and config.data.val_env_kwargs == {}


def test_unreadable_run_settings_are_a_one_line_error_naming_the_file(tmp_path, capsys):
    run_dir = _run_dir(tmp_path, [])
    model = f"actor_rollout_ref.model.path={run_dir / 'final'}"
    (run_dir / "config.json").write_text("{cut")
    assert main(["eval", model]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and f"cannot read the run's settings in {run_dir / 'config.json'}" in error
    saved = asdict(load_config([], [QUICKSTART]))
    saved["agent"]["max_turn"] = 3  # a key this version does not know
    (run_dir / "config.json").write_text(json.dumps(saved))
    assert main(["eval", model]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "'agent.max_turn'" in error and str(run_dir / "config.json") in error
