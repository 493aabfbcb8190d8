"""Reward functions: the environments' scoring of a final answer, in a registry keyed by metric name.

Every reward has one signature, ``fn(response, ground_truth) -> RewardResult``: ``response`` is the
agent's final answer text, ``ground_truth`` the task's reference (a string, a list of acceptable
strings for QA, or the unit tests for code), or, in an env with an interactive world, the world's final
state (``world_success``, ``world_score``). The score is in [0, 1]; ``components`` holds the parts
it was computed from, which the env reports in ``info["reward_components"]``. The env runs a reward
through :func:`checked_score`: one that raises, or returns no finite number, scores 0 and the env reports
why in ``info["reward_error"]``. A reward that cannot score for a reason that is not the answer's (an LLM judge
that is down) raises :class:`~agentfly_envs.errors.InfrastructureError`: the env ends the episode unscored.
"""

from __future__ import annotations

import collections
import math
import numbers
import re
import secrets
import string
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING

from agentfly_envs.errors import InfrastructureError
from agentfly_envs.registry import Registry

if TYPE_CHECKING:
    from agentfly_envs.sandbox import SandboxPool


@dataclass(frozen=True)
class RewardResult:
    """A score and the named quantities it was computed from.

    Attributes:
        score: The reward, in [0, 1].
        components: Named parts of the score (e.g. ``{"f1": 0.5, "precision": 1.0, "recall": 0.33}``).
    """

    score: float
    components: dict[str, float] = field(default_factory=dict)


GroundTruth = str | Sequence[str] | Mapping[str, float]
RewardFunction = Callable[[str, GroundTruth], RewardResult]
REWARDS: Registry[RewardFunction] = Registry("reward", where="agentfly_envs/rewards.py")


def get_reward(name: str) -> RewardFunction:
    """Returns the registered reward ``name``; raises ``UnknownNameError`` with close matches."""
    return REWARDS.get(name)


MAX_REWARD_ERROR_CHARS = 300
"""Longest ``info["reward_error"]`` message, in characters (longer ones are cut)."""


def checked_score(
    name: str, reward_fn: RewardFunction, response: str, ground_truth: GroundTruth
) -> tuple[RewardResult, str | None]:
    """Scores ``response`` with the reward ``name``, turning its failures into a zero score and a reason.

    Args:
        name: The reward's registered name (for the reason).
        reward_fn: The reward function.
        response: The agent's final answer text.
        ground_truth: The task's reference, or the world's final state.

    Returns:
        The reward's result and ``None``; or, when it raised, returned something other than a
        :class:`RewardResult`, or a score that is not a finite number: ``RewardResult(0.0)`` and a
        one-line reason (at most :data:`MAX_REWARD_ERROR_CHARS` characters).

    Raises:
        InfrastructureError: the reward raised it: what failed is not the answer (the env ends the episode).

    Example:
        >>> checked_score("broken", lambda response, truth: RewardResult(float("nan")), "42", "42")
        (RewardResult(score=0.0, components={}), "reward function 'broken' returned a non-finite score (nan)")
        >>> checked_score("strict", lambda response, truth: 1 / 0, "42", "42")[1]
        "reward function 'strict' raised ZeroDivisionError: division by zero"
    """
    try:
        result = reward_fn(response, ground_truth)
    except InfrastructureError:
        raise
    except Exception as error:  # a user's reward: any failure scores 0 and is reported, never crashes step()
        reason = f"raised {type(error).__name__}: {error}"
    else:
        score = getattr(result, "score", None)
        if not isinstance(result, RewardResult):
            reason = f"returned {type(result).__name__} {result!r:.80}, not a RewardResult"
        elif not isinstance(score, numbers.Real):
            reason = f"returned a score of type {type(score).__name__} ({score!r:.80}), not a number"
        elif not math.isfinite(score):
            reason = f"returned a non-finite score ({score})"
        else:
            return result, None
    message = " ".join(f"reward function {name!r} {reason}".split())
    return RewardResult(0.0), message[:MAX_REWARD_ERROR_CHARS]


def _references(ground_truth: GroundTruth) -> list[str]:
    return [ground_truth] if isinstance(ground_truth, str) else [str(g) for g in ground_truth]


# ----------------------------------------------------------------------------------------------
# Math answers
# ----------------------------------------------------------------------------------------------

_NUMBER = r"[-+]?(?:\$\s?)?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|[-+]?\$?\.\d+"
_HASHES = re.compile(r"####\s*(.+)")
_ANSWER_IS = re.compile(
    r"(?:the\s+(?:final\s+)?answer\s+is|final\s+answer\s*:|answer\s*:)\s*[:=]?\s*\**\s*(" + _NUMBER + ")",
    re.IGNORECASE,
)
_ANY_NUMBER = re.compile(_NUMBER)
_BRACES = re.compile(r"[{}]")
_LEADING_NUMBER = re.compile(r"^[-+]?(\d+(\.\d*)?|\.\d+)")
_PLAIN_INTEGER = re.compile(r"0|[1-9][0-9]{0,27}")
"""An integer of at most 28 digits (``Decimal``'s default precision) without a sign or leading zeros."""


def last_boxed(text: str) -> str | None:
    r"""Returns the content of the last ``\boxed{...}`` (or ``\fbox{...}``), braces balanced, or ``None``.

    Example:
        >>> last_boxed(r"so \boxed{\frac{1}{2}} and finally \boxed{18}")
        '18'
    """
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    brace = text.find("{", start)
    if brace < 0:
        return None
    depth = 0
    for match in _BRACES.finditer(text, brace):
        depth += 1 if match.group() == "{" else -1
        if depth == 0:
            return text[brace + 1 : match.start()].strip()
    return None


def extract_final_answer(text: str) -> str | None:
    r"""Finds the final answer in a response.

    In order of preference: the last ``\boxed{}``, the text after ``####``, the number after
    "the answer is" / "final answer:", else the last number in the text.

    Example:
        >>> extract_final_answer("She makes 9 * 2 = $18 a day. The answer is $18.")
        '$18'
        >>> extract_final_answer("No digits here") is None
        True
    """
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed
    hashes = _HASHES.findall(text)
    if hashes:
        return hashes[-1].strip()
    stated = _ANSWER_IS.findall(text)
    if stated:
        return stated[-1]
    numbers = _ANY_NUMBER.findall(text)
    return numbers[-1] if numbers else None


def normalize_number(text: str) -> str:
    r"""Canonical text of a numeric answer: no ``$``, commas, spaces, units text or trailing zeros.

    Non-numbers are returned lower-cased and stripped, so they can still compare equal as strings.

    Example:
        >>> [normalize_number(text) for text in ("$1,000.00", "18.0", ".50", "7 apples")]
        ['1000', '18', '0.5', '7']
    """
    cleaned = text.strip().replace("\\$", "").replace("$", "").replace(",", "").replace(" ", "").rstrip(".")
    cleaned = cleaned.removeprefix("\\text{").removesuffix("}")
    if _PLAIN_INTEGER.fullmatch(cleaned):  # the usual answer, already canonical (what the Decimal path gives)
        return cleaned
    match = _LEADING_NUMBER.match(cleaned)
    if match is None:
        return text.strip().lower()
    try:
        value = Decimal(match.group(0))
    except InvalidOperation:
        return text.strip().lower()
    if value == value.to_integral_value():
        return str(value.quantize(Decimal(1)))
    return format(value.normalize(), "f")


@REWARDS.register("math_reward_string_equal")
def math_reward_string_equal(response: str, ground_truth: GroundTruth) -> RewardResult:
    """1.0 when the extracted final answer equals the reference after number normalisation.

    Example:
        >>> math_reward_string_equal(r"... so she makes \\boxed{\\$18}.", "18").score
        1.0
        >>> math_reward_string_equal("I think it is 17", "18")
        RewardResult(score=0.0, components={'answer_found': 1.0, 'correct': 0.0})
    """
    extracted = extract_final_answer(response)
    if extracted is None:
        return RewardResult(0.0, {"answer_found": 0.0, "correct": 0.0})
    predicted = normalize_number(extracted)
    correct = float(any(predicted == normalize_number(ref) for ref in _references(ground_truth)))
    return RewardResult(correct, {"answer_found": 1.0, "correct": correct})


@REWARDS.register("math_equal")
def math_equal(response: str, ground_truth: GroundTruth) -> RewardResult:
    r"""1.0 when the response's answer is symbolically equal to the reference (math-verify).

    Handles LaTeX (``\frac{1}{2}`` = ``0.5``), sets and intervals, and plain expressions.

    Example:
        >>> math_equal(r"The answer is $\boxed{\frac{1}{2}}$", "0.5").score
        1.0
    """
    import math_verify  # lazy: sympy takes ~0.5 s to import

    # math-verify's timeouts use SIGALRM, which only the main thread may set.
    timeout = 5 if threading.current_thread() is threading.main_thread() else None
    predicted = math_verify.parse(response, parsing_timeout=timeout)
    found = float(bool(predicted))
    correct = 0.0
    for reference in _references(ground_truth):
        gold = math_verify.parse(reference if "$" in reference else f"${reference}$", parsing_timeout=timeout)
        if found and gold and math_verify.verify(gold, predicted, timeout_seconds=timeout):
            correct = 1.0
            break
    return RewardResult(correct, {"answer_found": found, "correct": correct})


# ----------------------------------------------------------------------------------------------
# Question answering (SQuAD-style)
# ----------------------------------------------------------------------------------------------

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_ANSWER_PREFIX = re.compile(r"(?:final\s+answer|the\s+answer\s+is|answer)\s*[:=]?\s*(.+)", re.IGNORECASE)


def normalize_qa_answer(text: str) -> str:
    """SQuAD normalisation: lower case, no punctuation, no articles, single spaces.

    Example:
        >>> normalize_qa_answer("The  Eiffel Tower!")
        'eiffel tower'
    """
    text = _ARTICLES.sub(" ", text.lower().translate(_PUNCTUATION))
    return " ".join(text.split())


def extract_qa_answer(response: str) -> str:
    r"""The answer span of a QA response: ``\boxed{}``, ``<answer>...</answer>``, the text after
    "answer:" / "the answer is" on the last such line, or else the whole response."""
    boxed = last_boxed(response)
    if boxed is not None:
        return boxed
    tags = _ANSWER_TAG.findall(response)
    if tags:
        return tags[-1]
    stated = _ANSWER_PREFIX.findall(response)
    return stated[-1] if stated else response


def _f1_parts(predicted: str, reference: str) -> tuple[float, float, float]:
    predicted_tokens = normalize_qa_answer(predicted).split()
    reference_tokens = normalize_qa_answer(reference).split()
    common = collections.Counter(predicted_tokens) & collections.Counter(reference_tokens)
    overlap = sum(common.values())
    if not predicted_tokens or not reference_tokens:
        same = float(predicted_tokens == reference_tokens)
        return same, same, same
    if overlap == 0:
        return 0.0, 0.0, 0.0
    precision, recall = overlap / len(predicted_tokens), overlap / len(reference_tokens)
    return 2 * precision * recall / (precision + recall), precision, recall


@REWARDS.register("qa_f1_reward")
def qa_f1_reward(response: str, ground_truth: GroundTruth) -> RewardResult:
    """Token-level F1 between the answer span and the best-matching reference (SQuAD v1.1); exact match
    is reported as the ``em`` component.

    Example:
        >>> qa_f1_reward("The answer is Eiffel Tower in Paris", ["the Eiffel Tower"]).components
        {'f1': 0.6666666666666666, 'precision': 0.5, 'recall': 1.0, 'em': 0.0}
    """
    predicted = extract_qa_answer(response)
    f1, precision, recall = max(_f1_parts(predicted, ref) for ref in _references(ground_truth))
    return RewardResult(
        f1, {"f1": f1, "precision": precision, "recall": recall, "em": _exact_match(predicted, ground_truth)}
    )


@REWARDS.register("qa_em_reward")
def qa_em_reward(response: str, ground_truth: GroundTruth) -> RewardResult:
    """1.0 when the normalised answer span equals a normalised reference (SQuAD exact match).

    Example:
        >>> qa_em_reward("<answer>the Eiffel Tower.</answer>", ["Eiffel Tower", "La tour Eiffel"]).score
        1.0
    """
    em = _exact_match(extract_qa_answer(response), ground_truth)
    return RewardResult(em, {"em": em})


def _exact_match(predicted: str, ground_truth: GroundTruth) -> float:
    normalized = normalize_qa_answer(predicted)
    return float(any(normalized == normalize_qa_answer(ref) for ref in _references(ground_truth)))


# ----------------------------------------------------------------------------------------------
# Code (unit tests in the sandbox)
# ----------------------------------------------------------------------------------------------

_FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)```", re.DOTALL)
CODE_TEST_TIMEOUT_S = 5.0
"""Wall-clock limit of one test of ``code_reward`` (the code, then the test), in seconds."""
CODE_TESTS_BUDGET_S = 10.0
"""Wall-clock time the tests of one ``code_reward`` call may run in all, in seconds (a wait for a free sandbox worker
is not counted: a busy machine fails no test): each test's limit is cut so that it ends in time even if the sandbox
must kill it, and tests left when the budget is spent fail."""
_ALARM_DELAY_S = 0.1
"""How long after a test's limit the sandbox's own time limit ends, in seconds: code that catches the sandbox's
exception there has run past the harness's limit, which counts from a little after the sandbox's start."""
_HARNESS = """\
def _agentfly_grade(code, test, mark, limit, exec=exec, compile=compile, clock=__import__("time").monotonic,
                    write=__import__("os").write):
    start, namespace = clock(), globals()
    code, test = compile(code, "<code>", "exec"), compile(test, "<test>", "exec")
    exec(code, namespace)
    exec(test, namespace)
    if clock() - start < limit:
        write(1, mark)


_agentfly_grade({code!r}, {test!r}, {mark!r}, {limit!r})
"""
"""The program that grades one test in a fresh interpreter. It compiles the code and the test and keeps its own
``exec``, ``compile``, clock and ``os.write`` before any of the code runs, and writes ``mark`` (a fresh random token)
only once the test has returned within ``limit`` seconds: code that exits, raises, patches builtins, prints a pass
line or catches the exception of its time limit cannot write it."""


def extract_code(response: str) -> str:
    """The program in a response: the last fenced block (```` ```python ````, ```` ```py ```` or a plain
    fence), else the whole response.

    Example:
        >>> extract_code("Here it is:\\n```python\\ndef f():\\n    return 1\\n```\\nDone.")
        'def f():\\n    return 1'
    """
    blocks = _FENCE.findall(response)
    return (blocks[-1] if blocks else response).strip("\n")


@REWARDS.register("code_reward")
def code_reward(response: str, ground_truth: GroundTruth) -> RewardResult:
    """The fraction of unit tests the response's code passes in the sandbox; ``passed`` is 1.0 when all do.

    ``ground_truth`` is the list of test programs. For each test, the code runs in a fresh sandboxed
    interpreter and then the test in it (``CODE_TEST_TIMEOUT_S`` together, ``CODE_TESTS_BUDGET_S`` for the
    whole call); a test passes when it runs to its end in time and raises nothing. An exit of any kind
    (``sys.exit``, ``SystemExit``, ``os._exit``, ``KeyboardInterrupt``, a kill), in the code or in the test,
    fails the test, and so does code that fails to run or leaves a thread running. Components:
    ``pass_rate`` (the score), ``passed`` (all tests pass: the pass/fail part), ``tests_passed``,
    ``tests`` and ``code_found``.

    Example:
        >>> tests = ["assert add(2, 3) == 5", "assert add(-1, 1) == 0", "assert add('a', 'b') == 'ab'"]
        >>> code_reward("```python\\ndef add(a, b):\\n    return a + b\\n```", tests).score
        1.0
        >>> code_reward("def add(a, b):\\n    return int(a) + int(b)", tests).components["tests_passed"]
        2.0
    """
    from agentfly_envs.sandbox import default_pool  # lazy: rewards stay importable alone

    code, tests = extract_code(response), _references(ground_truth)
    passed = 0
    if code.strip() and tests:
        pool, spent = default_pool(), 0.0
        for test in tests:
            limit = _time_left(spent)
            if limit <= 0:
                break
            ran, seconds = _test_passes(pool, code, test, limit)
            passed, spent = passed + ran, spent + seconds
    rate = passed / len(tests) if tests else 0.0
    return RewardResult(
        rate,
        {
            "pass_rate": rate,
            "passed": float(bool(tests) and passed == len(tests)),
            "tests_passed": float(passed),
            "tests": float(len(tests)),
            "code_found": float(bool(code.strip())),
        },
    )


def _time_left(spent: float) -> float:
    """The wall-clock limit of the next test, in seconds: ``CODE_TEST_TIMEOUT_S``, cut so that code the sandbox
    has to kill (``GRACE_S`` past its own limit) still ends within the budget, of which the tests so far ran
    ``spent`` seconds."""
    from agentfly_envs.sandbox.call import GRACE_S

    return min(CODE_TEST_TIMEOUT_S, CODE_TESTS_BUDGET_S - spent - _ALARM_DELAY_S - GRACE_S)


def _test_passes(pool: SandboxPool, code: str, test: str, limit: float) -> tuple[bool, float]:
    """Whether ``test`` runs to its end after ``code`` in a fresh interpreter of ``pool`` within ``limit`` seconds,
    with nothing of the code left running; and the seconds it ran (a wait for a free worker not counted)."""
    from agentfly_envs.sandbox import ExecStatus

    mark = secrets.token_hex(16)
    program = _HARNESS.format(code=code, test=test, mark=mark.encode(), limit=limit)
    result = pool.run(program, timeout_s=limit + _ALARM_DELAY_S)
    return result.status is ExecStatus.OK and not result.restarted and mark in result.output, result.seconds


# ----------------------------------------------------------------------------------------------
# Interactive worlds
# ----------------------------------------------------------------------------------------------


WORLD_REWARDS = ("world_success", "world_score")
"""The rewards that score an interactive world's state, for envs with the ``act`` tool (and only those)."""


def _world_components(world: GroundTruth) -> dict[str, float]:
    if not isinstance(world, Mapping):
        raise TypeError("world rewards score an interactive world's state; use them in envs with the act tool")
    return {key: float(world.get(key, 0.0)) for key in ("success", "score", "moves", "world_error")}


@REWARDS.register("world_success")
def world_success(response: str, ground_truth: GroundTruth) -> RewardResult:
    """1.0 when the world's task is solved, else 0.0; what the agent wrote last is not read.

    ``ground_truth`` is the world's final state (``ActTool.report()``). Components: ``success``, ``score``
    (the world's own progress, in [0, 1]), ``moves`` (commands played) and ``world_error`` (1.0 when the
    simulator died during the episode).

    Example:
        >>> world_success("", {"done": 1.0, "success": 1.0, "score": 1.0, "moves": 12.0, "world_error": 0.0})
        RewardResult(score=1.0, components={'success': 1.0, 'score': 1.0, 'moves': 12.0, 'world_error': 0.0})
    """
    components = _world_components(ground_truth)
    return RewardResult(components["success"], components)


@REWARDS.register("world_score")
def world_score(response: str, ground_truth: GroundTruth) -> RewardResult:
    """The world's normalised score in [0, 1] (partial credit for progress); components as ``world_success``.

    Example:
        >>> world_score("", {"done": 0.0, "success": 0.0, "score": 0.25, "moves": 3.0, "world_error": 0.0}).score
        0.25
    """
    components = _world_components(ground_truth)
    return RewardResult(components["score"], components)
