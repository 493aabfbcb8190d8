import pytest

from agentfly_envs.rewards import (
    extract_final_answer,
    get_reward,
    last_boxed,
    math_equal,
    math_reward_string_equal,
    normalize_number,
    qa_em_reward,
    qa_f1_reward,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("so \\boxed{18} dollars", "18"),
        ("first \\boxed{1} then \\boxed{\\frac{3}{4}}", "\\frac{3}{4}"),
        ("Janet makes 18 dollars.\n#### 18", "18"),
        ("The answer is $1,250.", "$1,250"),
        ("Final answer: 42", "42"),
        ("I computed 3 then 4 and finally 5.5 apples", "5.5"),
        ("the answer is -7", "-7"),
        ("no numbers", None),
        ("\\boxed{unclosed", None),
    ],
)
def test_extract_final_answer(text, expected):
    if expected is None and "\\boxed" in text:
        assert last_boxed(text) is None
    else:
        assert extract_final_answer(text) == expected


@pytest.mark.parametrize(
    ("raw", "normal"),
    [("$1,000", "1000"), ("18.0", "18"), ("18.50", "18.5"), ("0.5", "0.5"), (".5", "0.5"), ("-3.", "-3"),
     ("\\$12", "12"), ("+4", "4"), ("12 dollars", "12"), ("x", "x")],
)  # fmt: skip
def test_normalize_number(raw, normal):
    assert normalize_number(raw) == normal


@pytest.mark.parametrize(
    ("response", "truth", "score"),
    [
        ("The answer is \\boxed{18}.", "18", 1.0),
        ("#### 1,240", "1,240", 1.0),
        ("She keeps $1240.00 in total, so the answer is $1240.00", "1240", 1.0),
        ("The answer is 17", "18", 0.0),
        ("no idea", "18", 0.0),
        ("\\boxed{5.5}", "5.50", 1.0),
        ("\\boxed{0.5}", "1/2", 0.0),  # string equality: use math_equal for symbolic answers
    ],
)
def test_math_reward_string_equal(response, truth, score):
    result = math_reward_string_equal(response, truth)
    assert result.score == score
    assert result.components["correct"] == score


def test_math_reward_string_equal_reports_missing_answer():
    assert math_reward_string_equal("no idea", "3").components == {"answer_found": 0.0, "correct": 0.0}


@pytest.mark.parametrize(
    ("response", "truth", "score"),
    [
        ("The answer is \\boxed{\\frac{1}{2}}", "0.5", 1.0),
        ("\\boxed{0.5}", "1/2", 1.0),
        ("\\boxed{2\\sqrt{2}}", "\\sqrt{8}", 1.0),
        ("\\boxed{18}", "18", 1.0),
        ("\\boxed{19}", "18", 0.0),
        ("no answer here", "18", 0.0),
    ],
)
def test_math_equal_is_symbolic(response, truth, score):
    assert math_equal(response, truth).score == score


def test_math_equal_works_off_the_main_thread():
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        assert pool.submit(math_equal, "\\boxed{\\frac{1}{2}}", "0.5").result().score == 1.0


def test_qa_f1_hand_computed():
    # prediction tokens: [eiffel, tower, in, paris]; reference: [eiffel, tower]; overlap 2
    result = qa_f1_reward("Answer: The Eiffel Tower in Paris", "the Eiffel Tower")
    assert result.components["precision"] == pytest.approx(2 / 4)
    assert result.components["recall"] == pytest.approx(2 / 2)
    assert result.score == pytest.approx(2 * 0.5 * 1.0 / 1.5)


def test_qa_f1_takes_best_reference_and_handles_empty():
    assert qa_f1_reward("<answer>Paris</answer>", ["London", "paris!"]).score == 1.0
    assert qa_f1_reward("<answer></answer>", ["Paris"]).score == 0.0
    assert qa_f1_reward("<answer>the</answer>", ["a"]).score == 1.0  # both normalise to empty


def test_qa_em():
    assert qa_em_reward("\\boxed{The Beatles.}", ["beatles"]).score == 1.0
    assert qa_em_reward("the answer is Rolling Stones", ["The Beatles"]).score == 0.0


def test_rewards_are_registered_by_metric_name():
    assert get_reward("qa_em_reward") is qa_em_reward
