"""A user's modules and reward files (agent.imports, custom_reward_function) load by name, once, with clear errors."""

from __future__ import annotations

import sys

import pytest

from agentfly_envs import user_code
from agentfly_envs.rewards import REWARDS, RewardResult, get_reward
from agentfly_envs.user_code import UserCode, UserCodeError, import_user_module, reward_from_function


@pytest.fixture
def clean(monkeypatch):
    """The rewards registered and the user modules imported during a test are forgotten after it."""
    monkeypatch.setattr(REWARDS, "_entries", dict(REWARDS._entries))
    monkeypatch.setattr(user_code, "_LOADED_REWARDS", {})
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        del sys.modules[name]


def test_a_file_is_imported_once_and_registers_what_it_defines(clean, tmp_path, monkeypatch):
    path = tmp_path / "mine.py"
    path.write_text(
        "from agentfly_envs.rewards import REWARDS, RewardResult\n"
        "CALLS = []\n"
        "CALLS.append(1)\n"
        "@REWARDS.register('always_half')\n"
        "def always_half(response, ground_truth):\n"
        "    return RewardResult(0.5)\n"
    )
    monkeypatch.chdir(tmp_path)
    UserCode(imports=("mine.py",)).load()
    UserCode(imports=(str(path),)).load()  # the same file by another path: not run again
    assert get_reward("always_half")("x", "y").score == 0.5
    assert import_user_module("mine.py").CALLS == [1]


def test_rewards_of_either_signature_and_return_type(clean, tmp_path):
    ours = reward_from_function(lambda response, ground_truth: float(response == ground_truth))
    assert ours("4", "4") == RewardResult(1.0)

    def compute_score(data_source, solution_str, ground_truth, extra_info=None):
        assert data_source is None and extra_info == {}
        return {"score": 0.25, "length": len(solution_str), "note": "not a number"}

    assert reward_from_function(compute_score)("abc", "x") == RewardResult(0.25, {"length": 3.0})
    path = tmp_path / "verl.py"
    path.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 1\n")
    code = UserCode(reward_file=str(path))
    code.load()
    code.load()  # loading again is a no-op, not a duplicate registration
    assert get_reward("compute_score")("anything", "x").score == 1.0


@pytest.mark.parametrize(
    ("source", "code", "message"),
    [
        (None, UserCode(imports=("missing_file.py",)), "'missing_file.py': no such file"),
        (None, UserCode(imports=("no_such_module_xyz",)), "cannot import it (ModuleNotFoundError"),
        ("raise RuntimeError('boom')\n", UserCode(imports=("FILE",)), "importing it raised RuntimeError: boom"),
        ("def other(r, t):\n    return 1.0\n", UserCode(reward_file="FILE"), "has no function 'compute_score'"),
        ("def math_equal(r, t):\n    return 1.0\n", UserCode(reward_file="FILE", reward_function="math_equal"),
         "a reward named 'math_equal' is already registered"),
    ],
)  # fmt: skip
def test_bad_user_code_is_one_line_naming_it(clean, tmp_path, source, code, message):
    path = tmp_path / "broken.py"
    if source is not None:
        path.write_text(source)
        imports = tuple(str(path) if spec == "FILE" else spec for spec in code.imports)
        reward_file = str(path) if code.reward_file == "FILE" else code.reward_file
        code = UserCode(imports, reward_file, code.reward_function)
    with pytest.raises(UserCodeError) as error:
        code.load()
    assert message in str(error.value) and "\n" not in str(error.value)
