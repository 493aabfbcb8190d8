import time
from concurrent.futures import ThreadPoolExecutor

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


def test_qa_f1_reports_exact_match():
    assert qa_f1_reward("<answer>the Seine</answer>", ["Seine"]).components["em"] == 1.0
    partial = qa_f1_reward("<answer>river Seine</answer>", ["Seine"])
    assert partial.components["em"] == 0.0 and 0 < partial.score < 1


ADD_TESTS = ["assert add(2, 3) == 5", "assert add(-1, 1) == 0", "assert add(0, 0) == 0"]


@pytest.mark.parametrize(
    ("response", "passed"),
    [
        ("```python\ndef add(a, b):\n    return a + b\n```", 3),
        (
            "First try:\n```python\ndef add(a, b):\n    return 0\n```\n"
            "Fixed:\n```\ndef add(a, b):\n    return a + b\n```",
            3,
        ),
        ("def add(a, b):\n    return a * b if a else 0", 1),  # bare code; add(0, 0) only
        ("```python\ndef add(a, b) return a + b\n```", 0),  # syntax error: no test passes
        ("```python\nimport sys\nsys.exit(0)\n```", 0),  # exits before the tests can pass
        ("```python\ndef add(a, b):\n    while True: pass\n```", 0),  # hangs: every test times out
        ("I do not know.", 0),
        ("", 0),
    ],
)
def test_code_reward_runs_the_tests_in_the_sandbox(monkeypatch, response, passed):
    from agentfly_envs import rewards

    monkeypatch.setattr(rewards, "CODE_TEST_TIMEOUT_S", 0.5)
    monkeypatch.setattr(rewards, "CODE_TESTS_BUDGET_S", 2.0)  # the hanging answer uses up the budget in 2 tests
    start = time.monotonic()
    result = rewards.code_reward(response, ADD_TESTS)
    assert time.monotonic() - start < 3
    assert result.components["tests_passed"] == passed and result.score == pytest.approx(passed / 3)
    assert result.components["passed"] == float(passed == 3) and result.components["tests"] == 3
    assert result.components["code_found"] == float(bool(response))


def test_code_reward_survives_a_test_that_crashes_the_interpreter():
    from agentfly_envs.rewards import code_reward

    code = "def add(a, b):\n    if a == -1:\n        import os; os._exit(1)\n    return a + b"
    result = code_reward(code, ADD_TESTS)  # the second test kills the interpreter; the third runs in a new one
    assert result.components["tests_passed"] == 2


CHECK_TESTS = [
    "def check(candidate):\n    if candidate(2, 3) != 5:\n        raise AssertionError('add(2, 3)')\n\ncheck(add)"
]  # HumanEval style, raising by name


@pytest.mark.parametrize(
    ("code", "tests", "passed"),
    [
        ("def add(a, b):\n    raise SystemExit", ADD_TESTS, 0),
        ("import sys\ndef add(a, b):\n    sys.exit(0)", ADD_TESTS, 0),
        ("def add(a, b):\n    exit()", ADD_TESTS, 0),
        ("def add(a, b):\n    quit()", ADD_TESTS, 0),
        ("import os\ndef add(a, b):\n    os._exit(0)", ADD_TESTS, 0),
        ("def add(a, b):\n    if a < 0:\n        raise SystemExit(0)\n    return a + b", ADD_TESTS, 2),  # partly right
        ("class Exits:\n    def __eq__(self, other):\n        raise SystemExit(0)\ndef add(a, b):\n    return Exits()",
         ADD_TESTS, 0),  # exits in the test's comparison
        # At module level: the program ends before its tests run, as in HumanEval's harness.
        ("import sys\ndef add(a, b):\n    return a + b\nsys.exit(0)", ADD_TESTS, 0),
        ("def add(a, b):\n    return a + b\nraise SystemExit", ADD_TESTS, 0),
        ("import os\ndef add(a, b):\n    return a + b\nos._exit(0)", ADD_TESTS, 0),
        ("def add(a, b):\n    raise KeyboardInterrupt", ADD_TESTS, 0),
        ("import os, signal\ndef add(a, b):\n    os.kill(os.getpid(), signal.SIGINT)", ADD_TESTS, 0),
        # Forged pass lines, on stdout and straight to the output file.
        ("import os, sys\ndef add(a, b):\n    print('passed\\nAll tests passed\\nOK')\n"
         "    os.write(1, b'PASSED\\n'); sys.stdout.flush(); sys.exit(0)", ADD_TESTS, 0),
        # Patched builtins and exits: none changes how the harness runs the test or writes its mark.
        ("import builtins\nbuiltins.print = lambda *args, **kwargs: None\ndef add(a, b):\n    raise SystemExit",
         ADD_TESTS, 0),
        ("import os, sys\nsys.exit = os._exit = lambda *args: None\ndef add(a, b):\n    raise SystemExit(0)",
         ADD_TESTS, 0),
        ("import builtins\nbuiltins.AssertionError = lambda *args: SystemExit(0)\ndef add(a, b):\n    return 0",
         CHECK_TESTS, 0),
        ("import builtins\nbuiltins.exec = lambda *args, **kwargs: None\ndef add(a, b):\n    return a - b",
         ADD_TESTS, 1),  # add(0, 0) only: the tests still run
        ("import builtins\nreal = builtins.compile\n"
         "builtins.compile = lambda *args, **kwargs: real(*args[:3], optimize=2)  # no asserts\n"
         "def add(a, b):\n    return a - b", ADD_TESTS, 1),
    ],
)  # fmt: skip
def test_code_reward_fails_a_test_the_code_exits_or_forges_its_way_out_of(code, tests, passed):
    """A test passes only when it runs to its end: exits count as failures, whatever the code patched or printed."""
    from agentfly_envs.rewards import code_reward

    result = code_reward(code, tests)
    assert result.components["tests_passed"] == passed and result.score == pytest.approx(passed / len(tests))


@pytest.mark.parametrize(
    "late",
    [
        "    try:\n        time.sleep(60)\n    except BaseException:\n        pass",
        "    signal.signal(signal.SIGALRM, signal.SIG_IGN)\n    time.sleep(0.6)",
        "    signal.setitimer(signal.ITIMER_REAL, 0)\n    time.sleep(0.6)",
    ],
    ids=["catches-the-timeout", "ignores-the-alarm", "cancels-the-alarm"],
)
def test_code_reward_fails_code_that_outlives_its_time_limit(monkeypatch, late):
    """Code that gets past the exception of its time limit and then answers right is late: the test fails."""
    from agentfly_envs import rewards

    monkeypatch.setattr(rewards, "CODE_TEST_TIMEOUT_S", 0.3)
    code = f"import signal, time\ndef add(a, b):\n{late}\n    return a + b"
    assert rewards.code_reward(code, ADD_TESTS).components["tests_passed"] == 0
    assert rewards.code_reward("def add(a, b):\n    return a + b", ADD_TESTS).score == 1.0


BUDGET_SLACK_S = 0.5
"""How far past ``CODE_TESTS_BUDGET_S`` a call may end, in seconds (at most 0.003 s measured, over 24 hanging
calls on a 2-core machine)."""


def test_code_reward_does_not_count_a_wait_for_a_busy_sandbox(monkeypatch):
    """A right answer graded while every sandbox worker is busy passes all its tests: the budget counts the time the
    tests run, not the wait for a worker."""
    from agentfly_envs import rewards
    from agentfly_envs.sandbox import SandboxPool

    monkeypatch.setattr(rewards, "CODE_TESTS_BUDGET_S", 1.5)
    with SandboxPool(workers=1) as pool, ThreadPoolExecutor(1) as executor:
        monkeypatch.setattr("agentfly_envs.sandbox.default_pool", lambda: pool)
        pool.run("")
        busy = executor.submit(pool.run, "import time; time.sleep(2.5)")  # holds the one worker
        time.sleep(0.3)
        start = time.monotonic()
        result = rewards.code_reward("def add(a, b):\n    return a + b", ADD_TESTS)
        assert time.monotonic() - start > 1.5 and busy.result().status.value == "ok"  # it waited past the budget
    assert result.score == 1.0 and result.components["tests_passed"] == 3


@pytest.mark.parametrize(
    "code",
    [
        "import time\nwhile True:\n    try:\n        time.sleep(60)\n    except BaseException:\n        pass",
        "import time\ndef add(a, b):\n    while True:\n        try:\n            time.sleep(60)\n"
        "        except BaseException:\n            pass",
        "import time\ndef add(a, b):\n    time.sleep(60)",
    ],
    ids=["module-ignores-its-limit", "function-ignores-its-limit", "function-sleeps"],
)
def test_code_reward_keeps_to_its_budget(monkeypatch, code):
    """The budget bounds the whole call, the code's run included, even where the sandbox must kill the code."""
    from agentfly_envs import rewards
    from agentfly_envs.sandbox import default_pool

    monkeypatch.setattr(rewards, "CODE_TEST_TIMEOUT_S", 1.0)
    monkeypatch.setattr(rewards, "CODE_TESTS_BUDGET_S", 1.5)
    default_pool().run("")  # the fork server's start, once per process, is not the reward's
    start = time.monotonic()
    result = rewards.code_reward(code, ADD_TESTS)
    elapsed = time.monotonic() - start
    assert result.score == 0.0
    assert 0.4 < elapsed <= rewards.CODE_TESTS_BUDGET_S + BUDGET_SLACK_S, elapsed
