"""Bad configurations and data files fail before any model is loaded: one line, exit code 2, no traceback."""

from __future__ import annotations

import json
import sys
import time

import pytest

from agentfly_train.__main__ import main
from tests.conftest import REPO_ROOT
from tests.train.conftest import run_cli

GUIDE = REPO_ROOT / "data" / "guide"
BASE = [
    f"data.train_files={GUIDE / 'math_train.json'}",
    "agent.tools=[calculator]",
    "agent.reward_name=math_reward_string_equal",
    "actor_rollout_ref.model.path=agentfly:tiny",
    "algorithm.adv_estimator=grpo",
    "data.train_batch_size=2",
]


def _write(path, text):
    path.write_text(text)
    return str(path)


def bad_inputs(tmp):
    """(name, overrides replacing/adding to BASE, expected text in the message)."""
    return [
        (
            "missing file",
            ["data.train_files=nope/train.json"],
            "data.train_files: file 'nope/train.json' does not exist",
        ),
        ("empty file", [f"data.train_files={_write(tmp / 'empty.json', '[]')}"], "data.train_files"),
        ("malformed file", [f"data.train_files={_write(tmp / 'bad.json', '[{oops')}"], "data.train_files"),
        ("unknown format", [f"data.train_files={_write(tmp / 'rows.csv', 'a,b')}"], "use a .json"),
        (
            "rows without a question",
            [f"data.train_files={_write(tmp / 'noq.json', json.dumps([{'text': 'x', 'answer': '1'}]))}"],
            "no question",
        ),
        ("unknown tool", ["agent.tools=[calculater]"], "did you mean 'calculator'"),
        ("unknown reward", ["agent.reward_name=f1"], "agent.reward_name"),
        ("unknown estimator", ["algorithm.adv_estimator=ppo"], "algorithm.adv_estimator='ppo' is not one of"),
        ("missing model", ["actor_rollout_ref.model.path=./models/none"], "no such directory"),
        ("zero size", ["data.train_batch_size=0"], "data.train_batch_size must be > 0"),
        ("negative size", ["agent.num_chains=-1"], "agent.num_chains must be > 0"),
        ("resume_path without path", ["trainer.resume_mode=resume_path"], "needs trainer.resume_from_path"),
        ("search without backend", ["agent.tools=[google_search,answer]"], "agent.tool_options={google_search"),
        ("group estimator with one chain", ["agent.num_chains=1"], "set agent.num_chains >= 2"),
        ("unknown key", ["agent.max_turn=3"], "did you mean agent.max_turns"),
    ]


def _arguments(overrides, tmp_path):
    keys = {item.partition("=")[0] for item in overrides}
    kept = [item for item in BASE if item.partition("=")[0] not in keys]
    return [*kept, *overrides, f"trainer.default_local_dir={tmp_path / 'run'}"]


@pytest.mark.parametrize("case", range(15))
def test_a_bad_input_fails_in_one_line_before_the_model_loads(case, tmp_path, capsys, monkeypatch):
    import agentfly_train.models as models

    def no_model(*_, **__):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(models, "load_policy", no_model)
    name, overrides, message = bad_inputs(tmp_path)[case]
    assert main(["--no-progress", *_arguments(overrides, tmp_path)]) == 2, name
    err = capsys.readouterr().err
    assert err.startswith("config error: ") and err.count("\n") == 1, err
    assert message in err, (name, err)


def test_the_process_exits_2_quickly_without_a_traceback(tmp_path):
    started = time.monotonic()
    arguments = _arguments([f"data.train_files={_write(tmp_path / 'empty.json', '[]')}"], tmp_path)
    result = run_cli([sys.executable, "-m", "agentfly_train", *arguments], timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.startswith("config error: data.train_files") and result.stderr.count("\n") == 1
    assert time.monotonic() - started < 60  # no model, no training: seconds, not minutes
