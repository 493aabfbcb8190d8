"""Bad configurations and data files fail before any model is loaded: one line, exit code 2, no traceback; and the
hints those lines give (install, tool registration, --config quickstart) work when followed."""

from __future__ import annotations

import json
import sys
import time

import pytest

from agentfly_train.__main__ import main
from tests.helpers.paths import REPO_ROOT
from tests.helpers.processes import run_cli
from tests.helpers.skips import needs_train_extra

pytestmark = needs_train_extra  # the CLI loads its configuration with hydra

GUIDE = REPO_ROOT / "data" / "guide"
BASE = [
    f"data.train_files={GUIDE / 'math_train.json'}",
    "agent.tools=[calculator]",
    "agent.reward_name=math_reward_string_equal",
    "actor_rollout_ref.model.path=agentfly:tiny",
    "algorithm.adv_estimator=grpo",
    "data.train_batch_size=2",
]

FOURTH_ROW_WITHOUT_QUESTION = json.dumps([{"question": "x", "answer": "1"}] * 3 + [{"answer": "2"}])
MALFORMED_JSONL = '{"question": "x", "answer": 1}\n{"question": }\n'


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
            f"data.train_files: {tmp / 'noq.json'} row 1 (1-based): the row has no question",  # as for row 4 below
        ),
        ("unknown tool", ["agent.tools=[calculater]"], "did you mean 'calculator'"),
        ("unknown reward", ["agent.reward_name=f1"], "agent.reward_name"),
        (
            "unknown estimator",
            ["algorithm.adv_estimator=ppo"],
            "algorithm.adv_estimator: advantage estimator 'ppo' is not registered",
        ),
        ("missing model", ["actor_rollout_ref.model.path=./models/none"], "no such directory"),
        ("zero size", ["data.train_batch_size=0"], "data.train_batch_size must be > 0"),
        ("negative size", ["agent.num_chains=-1"], "agent.num_chains must be > 0"),
        ("resume_path without path", ["trainer.resume_mode=resume_path"], "needs trainer.resume_from_path"),
        ("search without backend", ["agent.tools=[google_search,answer]"], "agent.tool_options={google_search"),
        ("group estimator with one chain", ["agent.num_chains=1"], "set agent.num_chains >= 2"),
        ("unknown key", ["agent.max_turn=3"], "did you mean agent.max_turns"),
        (
            "4th row without a question",
            [f"data.train_files={_write(tmp / 'q4.json', FOURTH_ROW_WITHOUT_QUESTION)}"],
            f"data.train_files: {tmp / 'q4.json'} row 4 (1-based): the row has no question",
        ),
        (
            "malformed JSONL row",
            [f"data.train_files={_write(tmp / 'bad.jsonl', MALFORMED_JSONL)}"],
            f"data.train_files: {tmp / 'bad.jsonl'} line 2: invalid JSON: Expecting value (column 14)",
        ),
        ("not an integer", ["data.train_batch_size=abc"], "error: data.train_batch_size=abc: expected an integer"),
        ("reward name by prefix", ["agent.reward_name=math_reward"], "did you mean 'math_reward_string_equal'"),
        ("AgentFly's client backend", ["agent.init_args.backend=client"], "use agent.backend=vllm"),
    ]


def _arguments(overrides, tmp_path):
    keys = {item.partition("=")[0] for item in overrides}
    kept = [item for item in BASE if item.partition("=")[0] not in keys]
    return [*kept, *overrides, f"trainer.default_local_dir={tmp_path / 'run'}"]


@pytest.mark.parametrize("case", range(20))
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


def _one_line_exit_2(arguments: list[str]) -> str:
    result = run_cli([sys.executable, "-m", "agentfly_train", *arguments], timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    return result.stderr


@pytest.mark.long
@pytest.mark.slow  # two CLI processes, ~10 s each
def test_bad_data_rows_fail_in_one_line_from_the_cli(tmp_path):
    bad_row = _write(tmp_path / "q4.json", FOURTH_ROW_WITHOUT_QUESTION)
    err = _one_line_exit_2(_arguments([f"data.train_files={bad_row}"], tmp_path))
    assert f"{bad_row} row 4 (1-based): the row has no question" in err
    bad_json = _write(tmp_path / "bad.jsonl", MALFORMED_JSONL)
    err = _one_line_exit_2(_arguments([f"data.train_files={bad_json}"], tmp_path))
    assert f"{bad_json} line 2: invalid JSON" in err


def test_overrides_without_a_config_say_how_to_apply_them_to_the_quickstart(tmp_path, capsys):
    assert main(["trainer.total_training_steps=2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "overrides without --config replace the embedded quickstart" in err
    recipe = "`python -m agentfly_train --config quickstart KEY=VALUE` applies them on top of it"
    assert recipe in err
    # the recipe works: the same override on top of the quickstart
    run_dir = f"trainer.default_local_dir={tmp_path / 'run'}"
    assert main(["--dry-run", "--config", "quickstart", "trainer.total_training_steps=2", run_dir]) == 0
    assert "length: 2 rollout steps" in capsys.readouterr().out


def test_the_unknown_tool_hint_is_a_recipe_that_works(tmp_path):
    from agentfly_envs.errors import UnknownNameError
    from agentfly_envs.tools import get_tool

    with pytest.raises(UnknownNameError) as error:
        get_tool("shout")
    hint = str(error.value)
    assert "`from agentfly_envs.tools import register_tool` and @register_tool() on a typed function" in hint
    script = tmp_path / "my_tools.py"
    script.write_text(
        "import gymnasium as gym\n"
        "import agentfly_envs\n"
        "from agentfly_envs.tools import register_tool\n\n"
        "@register_tool()\n"
        "def shout(text: str) -> str:\n"
        '    """Repeats the text in capitals.\n\n'
        "    Args:\n"
        '        text: What to shout.\n    """\n'
        "    return text.upper()\n\n"
        "env = gym.make('agentfly/Arith-Calc', tools=('shout',))\n"
        "env.reset(seed=0)\n"
        'observation, *_ = env.step(\'<tool_call>{"name": "shout", "arguments": {"text": "hi"}}</tool_call>\')\n'
        "print(observation)\n"
    )
    result = run_cli([sys.executable, str(script)], timeout=120)
    assert result.returncode == 0, result.stderr
    assert "HI" in result.stdout


@pytest.mark.long
@pytest.mark.slow  # one tiny-model training step through the CLI, ~40 s on 2 cores
def test_a_registered_env_trains_on_the_given_files_without_the_hub(tmp_path):
    no_hub = {"HF_HUB_OFFLINE": "0", "HF_DATASETS_OFFLINE": "0", "HF_ENDPOINT": "http://127.0.0.1:9"}  # refused
    sample = "[data/gsm8k_sample.jsonl]"
    result = run_cli(
        [sys.executable, "-m", "agentfly_train", "--no-progress", "--config", "configs/gsm8k_calc_grpo.yaml",
         f"data.train_files={sample}", f"data.val_files={sample}", "actor_rollout_ref.model.path=agentfly:tiny",
         "data.train_batch_size=2", "agent.num_chains=2", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
         "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2", "trainer.total_training_steps=1",
         "data.val_size=1", "trainer.val_before_train=false", "trainer.logger=[console]", "trainer.n_gpus_per_node=0",
         "trainer.save_freq=-1", "agent.max_turns=1", "agent.max_tokens_per_turn=8",
         "actor_rollout_ref.rollout.response_length=8", f"trainer.default_local_dir={tmp_path / 'run'}"],
        timeout=300,
        env=no_hub,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "(1 steps)" in result.stdout and "validation after RL" in result.stdout
