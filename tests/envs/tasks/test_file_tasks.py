"""``agentfly/Files``: any file of rows in AgentFly's data format, posed by its question field."""

import json

import gymnasium as gym
import pytest

import agentfly_envs  # noqa: F401
from agentfly_envs.errors import AgentflyError, TaskFormatError
from tests.helpers.paths import REPO_ROOT

GUIDE_DATA = REPO_ROOT / "data" / "guide"


@pytest.mark.parametrize("field", ["question", "prompt", "instruction", "problem"])
def test_the_question_field_is_the_user_turn_and_the_answer_is_scored(field, tmp_path):
    path = tmp_path / "rows.json"
    path.write_text(json.dumps([{field: "What is 6*7?", "answer": "42", "source": "mine"}]))
    env = gym.make("agentfly/Files", data_files=str(path))
    observation, info = env.reset(options={"index": 0})
    assert observation == "What is 6*7?" and info["task"]["source"] == "mine"
    assert env.step("It is \\boxed{42}.")[1] == 1.0
    env.reset(options={"index": 0})
    assert env.step("It is \\boxed{41}.")[1] == 0.0


def test_code_rows_are_scored_by_their_tests_with_code_reward():
    env = gym.make(
        "agentfly/Files",
        data_files=str(GUIDE_DATA / "code_train.json"),
        tools=("python_executor",),
        parser="code",
        reward="code_reward",
    )
    observation, _ = env.reset(options={"index": 0})
    assert "bigger" in observation
    good = "```\ndef bigger(a, b):\n    return max(a, b)\n```"  # the code format: a plain fence answers
    assert env.step(good)[1] == 1.0
    env.reset(options={"index": 0})
    assert env.step("```\ndef bigger(a, b):\n    return a\n```")[1] == 0.5  # one of the two tests passes
    env.close()


def test_google_search_over_a_bm25_corpus_finds_the_fact():
    env = gym.make(
        "agentfly/Files",
        data_files=str(GUIDE_DATA / "qa_train.json"),
        tools=("google_search", "answer"),
        tool_options={"google_search": {"backend": "bm25", "corpus_file": str(GUIDE_DATA / "wiki_corpus.jsonl")}},
        reward="qa_f1_reward",
    )
    _, info = env.reset(options={"index": 0})
    assert [tool["function"]["name"] for tool in info["tools"]] == ["google_search", "answer"]
    call = '<tool_call>{"name": "google_search", "arguments": {"query": "Paris river"}}</tool_call>'
    observation, *_ = env.step(call)
    assert "Seine" in observation
    answer = '<tool_call>{"name": "answer", "arguments": {"answer": "Seine"}}</tool_call>'
    assert env.step(answer)[1:3] == (1.0, True)


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([{"text": "no question here", "answer": "1"}], "no question"),
        ([{"question": "q?"}], "no reference answer"),
        ([{"text": "code", "test_list": []}], "empty 'test_list'"),
    ],
)
def test_rows_the_task_cannot_pose_or_score_are_refused_naming_the_fields(rows, message, tmp_path):
    path = tmp_path / "rows.json"
    path.write_text(json.dumps(rows))
    with pytest.raises(TaskFormatError, match=message):
        gym.make("agentfly/Files", data_files=str(path))


def test_a_bad_first_row_is_named_by_its_file_and_row_as_any_other(tmp_path):
    """Issue #43: the check at ``gym.make`` named neither the file nor the row (the trainer's own check of every row
    named both from row 2 on), and listed the field ``datasets`` had filled with ``None`` as present."""
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    first.write_text('{"question": "2+2?"}\n{"question": "3+3?", "answer": "6"}\n')
    second.write_text('{"question": "4+4?", "answer": "8"}\n')
    with pytest.raises(TaskFormatError) as error:
        gym.make("agentfly/Files", data_files=[str(first), str(second)])
    assert str(error.value).startswith(f"{first} row 1 (1-based): the row has no reference answer")
    assert str(error.value).endswith("the row has ['question']")


def test_a_row_an_episode_cannot_start_on_is_named_by_its_file_and_its_row_in_that_file(tmp_path):
    from datasets import Dataset

    files = [str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet")]
    Dataset.from_list([{"question": "2+2?", "answer": "#### 4"}] * 3).to_parquet(files[0])
    Dataset.from_list([{"question": "3+3?", "answer": "#### 6"}, {"question": "4+4?", "answer": None}]).to_parquet(
        files[1]
    )
    env = gym.make("agentfly/GSM8K-Calc", data_files=files)
    env.reset(options={"index": 3})
    with pytest.raises(TaskFormatError) as error:
        env.reset(options={"index": 4})
    assert str(error.value).startswith(f"{files[1]} row 2 (1-based): task row is missing field(s) ['answer']")
    env.reset(options={"task": {"question": "5+5?", "answer": "#### 10"}})  # a row of the caller's: no location
    with pytest.raises(TaskFormatError, match=r"^task row is missing field\(s\) \['answer'\]"):
        env.reset(options={"task": {"question": "5+5?"}})


def test_no_data_says_what_to_pass():
    with pytest.raises(AgentflyError, match="data_files="):
        gym.make("agentfly/Files")


@pytest.mark.parametrize(
    ("rows", "python"),
    [
        ([{"question": "What is 6*7?", "answer": "42", "level": 3}, {"question": "And 2+2?", "answer": "4"}], True),
        ([{"question": "What is 6*7?", "answer": "42", "tags": ["easy", "mult"]}, {"question": "2+2?", "answer": "4"}],
         False),
    ],
    ids=["scalar columns", "a list column"],
)  # fmt: skip
def test_rows_are_what_datasets_gives_whether_or_not_they_are_kept_as_python_rows(rows, python, tmp_path):
    path = tmp_path / "rows.json"
    path.write_text(json.dumps(rows))
    tasks = gym.make("agentfly/Files", data_files=str(path)).unwrapped.tasks
    dataset = tasks._rows
    assert [tasks.row(index) for index in range(len(tasks))] == [
        {key: value for key, value in dataset[index].items() if value is not None} for index in range(len(tasks))
    ]
    assert "level" not in tasks.row(1) and "tags" not in tasks.row(1)  # datasets' None for a field a row lacks
    assert (tasks._python is not None) is python
    first = tasks.row(0)
    first["answer"] = "changed"
    first.get("tags", []).append("changed")
    assert tasks.row(0) == {key: value for key, value in rows[0].items()}  # each row() is a copy of its own
