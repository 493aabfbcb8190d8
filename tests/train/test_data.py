"""The TRL dataset of a run: tasks stored as JSON, prompts rendered only for the rows read."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest

import agentfly_envs  # noqa: F401  (registers the env ids)
from agentfly_envs.errors import DataUnavailableError, TaskFormatError
from agentfly_envs.tasks.files import check_json_file
from agentfly_train.data import file_task_rows, takes_data_files
from agentfly_train.prompt_dataset import trl_dataset
from tests.helpers.paths import REPO_ROOT


def test_prompts_are_rendered_for_the_rows_read_and_only_those(capfd):
    rows = [{"question": f"What is {i} times 3?", "answer": str(3 * i), "extra": i} for i in range(10_000)]
    rendered: list[dict] = []

    def render(row: dict) -> str:
        rendered.append(row)
        return f"<user>{row['question']}</user>"

    dataset = trl_dataset(rows, render)
    assert rendered == [] and len(dataset) == 10_000
    assert "hashed" not in capfd.readouterr().err  # datasets fingerprints the transform without pickling the renderer
    batch = dataset[[7, 4242]]
    assert batch["prompt"] == ["<user>What is 7 times 3?</user>", "<user>What is 4242 times 3?</user>"]
    assert rendered == [rows[7], rows[4242]]  # the JSON round trip keeps every field
    assert dataset[5]["prompt"] == "<user>What is 5 times 3?</user>" and len(rendered) == 3


def _rows_file(path, rows):
    path.write_text(json.dumps(rows))
    return str(path)


def test_every_row_of_every_file_is_checked_and_a_bad_one_is_named_by_file_and_row(tmp_path):
    good = _rows_file(tmp_path / "good.json", [{"question": "1+1?", "answer": "2"}] * 5)
    bad = _rows_file(tmp_path / "bad.json", [{"question": "2+2?", "answer": "4"}] * 3 + [{"answer": "3"}])
    env = gym.make("agentfly/Files", data_files=good)
    assert len(file_task_rows([good, good], env, limit=None)) == 10
    with pytest.raises(TaskFormatError) as error:
        file_task_rows([good, bad], env, limit=1)  # the limit cuts what is returned, not what is checked
    message = str(error.value)
    assert message.startswith(f"{bad} row 4 (1-based): the row has no question") and "\n" not in message
    assert message.endswith("the row has ['answer']")  # the field datasets fills with None is absent, as in the file


def test_a_malformed_jsonl_line_is_named_with_its_json_error(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"question": "a", "answer": "1"}\n\n{"question": "b", "answer": 2,}\n')
    env = gym.make("agentfly/GSM8K-Calc", data_files=str(REPO_ROOT / "data" / "gsm8k_sample.jsonl"))
    with pytest.raises(DataUnavailableError) as error:
        file_task_rows([str(path)], env, limit=None)
    assert str(error.value).startswith(
        f"{path} line 3: invalid JSON: Expecting property name enclosed in double quotes"
    )
    assert "\n" not in str(error.value)


def test_a_malformed_json_list_is_named_with_its_line(tmp_path):
    path = tmp_path / "rows.json"
    path.write_text('[{"question": "a", "answer": "1"},\n {"question": "b" "answer": 2}]')
    with pytest.raises(DataUnavailableError, match=r"rows.json line 2: invalid JSON: Expecting ',' delimiter"):
        check_json_file(path)


def test_an_env_with_data_files_reads_them_instead_of_the_hub():
    spec_kwargs = {"parser": "hermes"}
    assert takes_data_files("agentfly/GSM8K-Calc", spec_kwargs) and takes_data_files("agentfly/HotpotQA-Search", {})
    assert not takes_data_files("agentfly/Arith-Calc", spec_kwargs)  # generated tasks: the files are only rows
    assert takes_data_files("agentfly/Arith-Calc", {"task": "files"})  # agent.env_kwargs may pick another source


def test_an_env_reading_the_runs_train_files_validates_on_its_val_files_only_and_never_asks_the_hub(monkeypatch):
    from agentfly_train.config import load_config
    from agentfly_train.data import has_validation, run_data

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # GSM8K's own data (the Hub) would fail at once, not after 35 s
    sample = str(REPO_ROOT / "data" / "gsm8k_sample.jsonl")
    base = [
        "actor_rollout_ref.model.path=agentfly:tiny",
        "agent.env=agentfly/GSM8K-Calc",
        f"data.train_files=[{sample}]",
    ]
    data = run_data(load_config(base))
    data.env.close()
    assert data.val == [] and len(data.train) > 2
    assert data.notes == [
        "no validation: agent.env=agentfly/GSM8K-Calc reads data.train_files, and its own data would come from the "
        "Hub; set data.val_files to validate"
    ]
    with_val = run_data(load_config([*base, f"data.val_files=[{sample}]", "data.val_size=3"]))
    with_val.env.close()
    assert len(with_val.val) == 3 and with_val.notes == []
    assert has_validation(
        load_config(["actor_rollout_ref.model.path=agentfly:tiny", "agent.env=agentfly/Arith-Calc"])
    )  # an env whose own tasks are generated
