import json

import pytest

from agentfly_envs import DataUnavailableError, TaskFormatError
from agentfly_envs.tasks import ArithmeticTasks, GSM8KTasks, calculator_annotations, final_answer, generate_problem
from agentfly_envs.tasks.arithmetic import LEVELS
from agentfly_envs.tools.calculator import evaluate


def test_final_answer_and_annotations():
    solution = "It takes 2/2=<<2/2=1>>1 bolt.\nSo 2+1=<<2+1=3>>3 in total.\n#### 3"
    assert final_answer(solution) == "3"
    assert calculator_annotations(solution) == [("2/2", "1"), ("2+1", "3")]
    with pytest.raises(TaskFormatError, match="####"):
        final_answer("no final line")


def test_gsm8k_from_jsonl(gsm8k_sample):
    tasks = GSM8KTasks(data_files=str(gsm8k_sample))
    assert len(tasks) == 12
    row = tasks.row(3)
    assert tasks.ground_truth(row) == "1,240"
    golden = tasks.golden(row)
    assert golden.expressions == ("1200/4", "1200-300", "900+340")
    assert golden.results == ("300", "900", "1240")
    assert tasks.user_prompt(row).startswith("A farm has 1,200 chickens.")


def test_gsm8k_from_json_list_and_parquet(gsm8k_sample, tmp_path):
    rows = [json.loads(line) for line in gsm8k_sample.read_text().splitlines()]
    json_list = tmp_path / "rows.json"
    json_list.write_text(json.dumps(rows))
    assert GSM8KTasks(data_files=str(json_list)).row(0) == rows[0]

    import datasets

    parquet = tmp_path / "rows.parquet"
    datasets.Dataset.from_list(rows).to_parquet(str(parquet))
    assert GSM8KTasks(data_files=str(parquet)).row(11) == rows[11]


def test_gsm8k_split_mapping(gsm8k_sample):
    tasks = GSM8KTasks(data_files={"train": str(gsm8k_sample), "test": str(gsm8k_sample)}, split="test")
    assert len(tasks) == 12


def test_gsm8k_missing_column_is_a_clear_error(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"problem": "1+1?", "solution": "#### 2"}\n')
    with pytest.raises(TaskFormatError, match=r"lacks column\(s\) \['question', 'answer'\]"):
        GSM8KTasks(data_files=str(path))


def test_gsm8k_bad_file_says_how_to_provide_data(tmp_path):
    with pytest.raises(DataUnavailableError, match="data_files="):
        GSM8KTasks(data_files=str(tmp_path / "missing.jsonl"))
    with pytest.raises(DataUnavailableError, match=r"\.jsonl or \.parquet"):
        GSM8KTasks(data_files=str(tmp_path / "rows.csv"))


def test_gsm8k_offline_hub_error_says_how_to_provide_data(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(DataUnavailableError) as error:
        GSM8KTasks(path="agentfly-test/definitely-not-cached-gsm8k")
    assert "To run offline, pass data_files=" in str(error.value)
    assert "agentfly/Arith-Calc" in str(error.value)


def test_validate_rejects_missing_and_non_string_fields():
    tasks = ArithmeticTasks()
    with pytest.raises(TaskFormatError, match=r"missing field\(s\) \['answer'\]"):
        tasks.validate({"question": "q"})
    with pytest.raises(TaskFormatError, match="must be a string"):
        tasks.validate({"question": "q", "answer": 3})
    with pytest.raises(TaskFormatError, match="mapping"):
        tasks.validate(["question"])


@pytest.mark.parametrize("level", list(LEVELS))
def test_arithmetic_problems_are_exact_and_self_consistent(level):
    spec = LEVELS[level]
    for index in range(200):
        row = generate_problem(seed=7, level=level, index=index)
        pairs = calculator_annotations(row["answer"])
        assert spec.min_steps + 1 <= len(pairs) <= spec.max_steps + 1
        for expression, result in pairs:  # every annotation is what the calculator computes
            assert evaluate(expression) == int(result)
            assert 0 < int(result) <= spec.max_value
        assert final_answer(row["answer"]) == pairs[-1][1]
        assert row["question"].endswith("have now?")


def test_arithmetic_is_deterministic_and_seeded():
    assert generate_problem(0, "medium", 5) == generate_problem(0, "medium", 5)
    assert generate_problem(0, "medium", 5) != generate_problem(1, "medium", 5)
    assert generate_problem(0, "medium", 5) != generate_problem(0, "medium", 6)
    questions = {generate_problem(0, "hard", i)["question"] for i in range(500)}
    assert len(questions) > 490


def test_arithmetic_arguments_are_checked():
    with pytest.raises(TaskFormatError, match="choose one of"):
        ArithmeticTasks(level="impossible")
    with pytest.raises(TaskFormatError, match="num_tasks"):
        ArithmeticTasks(num_tasks=0)
    assert len(ArithmeticTasks(num_tasks=3)) == 3


def test_reference_answer_takes_gsm8k_boxed_or_plain_answers():
    from agentfly_envs.tasks import reference_answer

    assert reference_answer("2+1=<<2+1=3>>3\n#### 3") == "3"
    assert reference_answer("so it is \\boxed{\\frac{1}{2}}") == "\\frac{1}{2}"
    assert reference_answer(" Paris ") == "Paris"
    with pytest.raises(TaskFormatError, match="####"):
        reference_answer("solution\n####  ")


def test_code_problem_reads_mbpp_sanitized_and_humaneval_rows():
    from agentfly_envs.tasks import code_problem

    full = {"text": "Square it.", "code": "def sq(x):\n    return x * x", "test_list": ["assert sq(2) == 4"] * 2,
            "test_setup_code": "import math"}  # fmt: skip
    problem = code_problem(full)
    assert problem.entry_point == "sq" and problem.reference == full["code"]
    assert problem.tests == ("import math\nassert sq(2) == 4",) * 2 and "`sq`" in problem.prompt
    sanitized = {"prompt": "Add.", "test_imports": ["import math"], "test_list": ["assert math.isclose(add(1, 1), 2)"]}
    assert code_problem(sanitized).entry_point == "add"  # not isclose: a method call is not the entry point
    humaneval = {"prompt": "def f(x):\n    '''Double.'''\n", "test": "def check(c):\n    assert c(1) == 2\n",
                 "entry_point": "f", "canonical_solution": "    return 2 * x\n"}  # fmt: skip
    problem = code_problem(humaneval)
    assert problem.tests == ("def check(c):\n    assert c(1) == 2\n\ncheck(f)",)
    assert problem.reference == "def f(x):\n    '''Double.'''\n    return 2 * x\n"
    with pytest.raises(TaskFormatError, match="MBPP fields"):
        code_problem({"question": "q", "answer": "a"})


def test_code_tasks_from_files_and_golden_solutions(tmp_path):
    from agentfly_envs.rewards import code_reward
    from agentfly_envs.tasks import CodeTestTasks
    from tests.helpers.paths import MBPP_SAMPLE

    tasks = CodeTestTasks(data_files=str(MBPP_SAMPLE), shown_tests=2)
    row = tasks.row(0)
    assert tasks.user_prompt(row).count("assert digit_square_sum") == 2 and len(tasks.ground_truth(row)) == 3
    golden = tasks.golden(row)
    assert golden.answer == row["code"] and golden.final.endswith(f"```python\n{row['code']}\n```")
    assert code_reward(golden.final, tasks.ground_truth(row)).score == 1.0
    assert tasks.golden({**row, "code": ""}) is None  # no reference solution, no golden episode
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q", "answer": "a"}\n')
    with pytest.raises(TaskFormatError, match="MBPP fields"):
        CodeTestTasks(data_files=str(bad))


def test_code_tasks_offline_hub_error_says_how_to_provide_data(monkeypatch):
    from agentfly_envs.tasks import CodeTestTasks

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(DataUnavailableError, match=r"data/mbpp_sample\.jsonl"):
        CodeTestTasks(path="agentfly-test/definitely-not-cached-mbpp")


def test_hotpotqa_rows_and_supporting_titles():
    from agentfly_envs.tasks import HotpotQATasks, supporting_titles
    from tests.helpers.paths import HOTPOTQA_SAMPLE

    tasks = HotpotQATasks(data_files=str(HOTPOTQA_SAMPLE))
    row = tasks.row(0)
    assert tasks.ground_truth(row) == ["Seine"] and tasks.user_prompt(row).startswith("Which river")
    assert tasks.golden(row).queries == ("Eiffel Tower", "Paris")
    assert supporting_titles({"supporting_facts": [["A", 0], ["A", 1], ["B", 0]]}) == ["A", "B"]
    assert "search tool" in tasks.system_prompt(True, ("search", "answer"))
