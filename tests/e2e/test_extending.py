"""The worked examples of docs/extending.md (examples/extending/) do what the page says.

Each test loads its example into this process inside :func:`restored_registries`, so the names it registers are
gone again for the other tests.
"""

from __future__ import annotations

import json
import runpy
import sys

import gymnasium as gym
import pytest

from agentfly_envs import PARSERS, REWARDS, TASKS, TOOLS, TURN_REWARDS
from tests.helpers.paths import REPO_ROOT
from tests.helpers.readme import readme_command, runs_readme_command
from tests.helpers.runs import TINY_RUN

EXAMPLES = REPO_ROOT / "examples" / "extending"


def _registries() -> list:
    """Every registry an example or a user's module may add to (the training side's where torch is installed)."""
    registries = [TOOLS, REWARDS, TURN_REWARDS, PARSERS, TASKS]
    try:
        from agentfly_train.algorithms import ADVANTAGE_ESTIMATORS
        from agentfly_train.generation import GENERATION_BACKENDS
        from agentfly_train.launchers import LAUNCHERS
    except ImportError:  # the base install, without torch
        return registries
    return [*registries, ADVANTAGE_ESTIMATORS, GENERATION_BACKENDS, LAUNCHERS]


@pytest.fixture
def restored_registries():
    """Loads an example by file name; every registry it adds to is restored afterwards, and the user modules that
    ``agent.imports`` imported are forgotten (so a later import registers again)."""
    saved = [(registry, dict(registry._entries), dict(registry._entry_points)) for registry in _registries()]
    saved_envs = dict(gym.registry)
    yield lambda name: runpy.run_path(str(EXAMPLES / name))
    for registry, entries, entry_points in saved:
        registry._entries, registry._entry_points = entries, entry_points
    gym.registry.clear()
    gym.registry.update(saved_envs)
    for name in [name for name in sys.modules if name.startswith("agentfly_user_")]:
        del sys.modules[name]
    from agentfly_envs import user_code

    user_code._LOADED_REWARDS.clear()


def test_a_new_env_plays_a_golden_episode(restored_registries):
    restored_registries("new_env.py")
    env = gym.make("myproject/Minutes-Calc", num_tasks=5)
    observation, info = env.reset(options={"index": 0})
    hours, minutes = (int(word) for word in observation.split() if word.isdigit())
    assert observation == f"How many minutes are in {hours} hours and {minutes} minutes?"
    assert [message["role"] for message in info["messages"]] == ["system", "user"]
    actions = env.unwrapped.golden_actions()
    observation, *_ = env.step(actions[0])
    assert observation == str(hours * 60 + minutes)  # the calculator's output
    _, reward, terminated, _, info = env.step(actions[1])
    assert (reward, terminated, info["reward_components"]["correct"]) == (1.0, True, 1.0)
    env.reset(options={"index": 1})
    *_, reward, terminated, _, _ = env.step("The answer is \\boxed{0}.")
    assert (reward, terminated) == (0.0, True)
    gym.make("myproject/Minutes-Calc").reset(seed=0)  # the default task set


def test_a_new_tool_answers_calls(restored_registries):
    restored_registries("new_tool.py")
    env = gym.make("agentfly/Arith-Calc", tools=("calculator", "convert_length"))
    _, info = env.reset(options={"index": 0})
    assert "convert_length" in [tool["function"]["name"] for tool in info["tools"]]
    call = '<tool_call>{"name": "convert_length", "arguments": {"value": 3, "unit": "km", "to": "m"}}</tool_call>'
    observation, *_, info = env.step(call)
    assert observation == "3000"
    observation, *_, info = env.step(call.replace('"km"', '"yd"'))
    assert observation.startswith("Error: unknown unit 'yd'") and info["error_counts"]["tool_error"] == 1


def test_a_new_reward_scores_answers(restored_registries):
    restored_registries("new_reward.py")
    from agentfly_envs import get_reward

    reward = get_reward("within_one_percent")
    assert reward("So \\boxed{99.5}.", "100").score == 1.0
    assert reward("So \\boxed{99.5}.", "100").components["relative_error"] == pytest.approx(0.005)
    assert reward("So \\boxed{90}.", ["100", "200"]).score == 0.0
    assert reward("I do not know.", "100").components == {"relative_error": 1.0}
    env = gym.make("agentfly/Arith-Calc", reward="within_one_percent")
    env.reset(options={"index": 0})
    *_, info = env.step(env.unwrapped.golden_actions()[-1])
    assert info["reward_components"] == {"relative_error": 0.0}


def test_a_per_turn_reward_pays_at_each_step(restored_registries):
    restored_registries("turn_reward.py")
    from agentfly_envs import TurnStep, get_turn_reward

    bonus = get_turn_reward("tool_call_bonus")
    call = {"type": "function", "function": {"name": "calculator", "arguments": "{}"}}
    assert bonus(TurnStep(turn=1, tool_calls=[call], errors=0, output="59", answered=False)) == 0.05
    assert bonus(TurnStep(turn=1, tool_calls=[call], errors=1, output="Error: ...", answered=False)) == 0.0
    assert bonus(TurnStep(turn=2, tool_calls=[], errors=0, output="", answered=True)) == 0.0
    env = gym.make("agentfly/Arith-Calc", turn_reward="tool_call_bonus")
    env.reset(options={"index": 0})
    *actions, answer = env.unwrapped.golden_actions()
    paid = [env.step(action)[1] for action in actions]
    assert actions and paid == [0.05] * len(actions)
    assert env.step(answer)[1] == 1.0  # the outcome reward, and no bonus for the answer


def test_a_new_parser_reads_and_writes_its_format(restored_registries):
    restored_registries("new_parser.py")
    from agentfly_envs import ToolCall, get_parser

    parser = get_parser("call_lines")
    result = parser.parse('First 12*8.\nCALL calculator({"expression": "12*8"})')
    assert (result.content, result.calls[0].name, result.calls[0].arguments) == (
        "First 12*8.",
        "calculator",
        {"expression": "12*8"},
    )
    assert parser.parse(parser.format_calls([ToolCall("calculator", {"expression": "1+1"})])).calls[0].arguments == {
        "expression": "1+1"
    }
    assert parser.parse("CALL calculator(expression=12*8)").errors == [
        "call 1: the arguments are not a JSON object (Expecting value)"
    ]
    env = gym.make("agentfly/Arith-Calc", parser="call_lines")
    _, info = env.reset(options={"index": 0})
    assert "CALL <tool>(<JSON object of arguments>)" in info["messages"][0]["content"]
    for action in env.unwrapped.golden_actions():
        *_, reward, terminated, _, info = env.step(action)
    assert (reward, terminated, sum(info["error_counts"].values())) == (1.0, True, 0)


def test_a_new_estimator_computes_its_advantages(restored_registries):
    torch = pytest.importorskip("torch")
    from agentfly_train.algorithms import compute_advantage, get_advantage_estimator
    from agentfly_train.config import ConfigError, load_config

    restored_registries("new_estimator.py")
    rewards = torch.tensor([[0, 0, 1.0], [0, 0, 0], [0, 0.5, 0], [0, 0, 1], [0, 0, 0]])
    mask = torch.tensor([[1, 0, 1], [1, 1, 1], [1, 1, 0], [1, 1, 1], [1, 1, 1]])  # 0: a tool token or padding
    advantages, returns = compute_advantage("median_baseline", rewards, mask, index=["a", "a", "a", "b", "b"])
    # group a: scores 1, 0, 0.5, median 0.5; group b: scores 1, 0, lower median 0
    expected = torch.tensor([[0.5, 0, 0.5], [-0.5, -0.5, -0.5], [0, 0, 0], [1, 1, 1], [0, 0, 0]])
    torch.testing.assert_close(advantages, expected)
    torch.testing.assert_close(returns, expected)
    entry = get_advantage_estimator("median_baseline")
    assert entry.compares_responses and not entry.trains_critic and not entry.needs_greedy_baseline
    with pytest.raises(ValueError, match="needs index"):
        compute_advantage("median_baseline", rewards, mask)
    with pytest.raises(ConfigError, match=r"agent\.num_chains >= 2"):
        load_config(
            [
                "algorithm.adv_estimator=median_baseline",
                "agent.num_chains=1",
                "agent.env=agentfly/Arith-Calc",
                "actor_rollout_ref.model.path=agentfly:tiny",
            ]
        )


def run_tiny(readme: str, run_dir) -> dict:
    """Runs the documented training command on :data:`TINY_RUN` in this process; returns the run's result.json."""
    pytest.importorskip("trl", reason="training needs the train extra")
    from agentfly_train.__main__ import main

    command = readme_command(readme, add=[*TINY_RUN, f"trainer.default_local_dir={run_dir}", "--no-progress"])
    assert main(command.cli_arguments) == 0
    return json.loads((run_dir / "result.json").read_text())


@runs_readme_command(
    "python -m agentfly_train --config quickstart agent.imports=[examples/extending/chunked_backend.py] "
    "actor_rollout_ref.rollout.name=hf_chunked"
)
def test_a_new_backend_samples_a_run_from_the_command_line(restored_registries, readme, tmp_path):
    from agentfly_envs.user_code import import_user_module

    assert run_tiny(readme, tmp_path)["steps"] == 1
    backend = import_user_module("examples/extending/chunked_backend.py").ChunkedHFBackend
    assert backend.largest_call == 4  # the step's 8 episodes went to generate 4 at a time


@runs_readme_command(
    "python -m agentfly_train --config quickstart agent.imports=[examples/extending/subprocess_launcher.py] "
    "trainer.launcher=subprocess"
)
def test_a_new_launcher_runs_the_job_from_the_command_line(restored_registries, readme, tmp_path):
    assert run_tiny(readme, tmp_path)["steps"] == 1
    # the child process ran the job: it wrote the run's configuration with trainer.launcher=local
    assert json.loads((tmp_path / "config.json").read_text())["trainer"]["launcher"] == "local"
    assert (tmp_path / "launch.yaml").is_file() and (tmp_path / "final").is_dir()


@runs_readme_command(
    "python -m agentfly_train list keys",
    "python -m agentfly_train list estimators",
    "python -m agentfly_train list tools agent.imports=[examples/extending/new_tool.py]",
    "python -m agentfly_train --dry-run --config quickstart "
    "custom_reward_function.path=examples/extending/verl_reward.py custom_reward_function.name=compute_score",
)
def test_user_code_loads_from_the_command_line(restored_registries, readme, capsys):
    pytest.importorskip("trl", reason="the command line needs the train extra")
    from agentfly_envs import get_reward
    from agentfly_train.__main__ import main
    from agentfly_train.algorithms import ADVANTAGE_ESTIMATORS
    from agentfly_train.config import config_keys

    assert main(readme_command(readme).cli_arguments) == 0
    out = capsys.readouterr().out
    if "list keys" in readme:  # every key, its default, its help
        lines = {line.split()[0]: line for line in out.splitlines()}
        assert set(lines) == set(config_keys())
        assert "'gae'" in lines["algorithm.adv_estimator"] and "reinforce_plus_plus" in lines["algorithm.adv_estimator"]
    elif "list estimators" in readme:
        assert {line.split()[0] for line in out.splitlines()} == set(ADVANTAGE_ESTIMATORS)
    elif "list tools" in readme:
        assert "convert_length" in out and "calculator" in out
    else:
        assert "reward compute_score" in out
        reward = get_reward("compute_score")  # verl's signature, its dict's extras as components
        assert reward("It is 12.", "12").score == 1.0
        assert reward("It is 13.", "12").components == {"has_number": 1.0}
        assert reward("No idea.", "12").score == 0.0


def test_a_tool_without_a_docstring_is_one_line_from_the_command_line(restored_registries, tmp_path, capsys):
    pytest.importorskip("trl", reason="the command line needs the train extra")
    from agentfly_train.__main__ import main

    mine = tmp_path / "my_tools.py"
    mine.write_text(
        "from agentfly_envs.tools import register_tool\n\n"
        "@register_tool()\n"
        "def shout(text: str) -> str:\n"
        "    return text.upper()\n"
    )
    arguments = [
        "--dry-run",
        f"agent.imports=[{mine}]",
        "agent.tools=[shout]",
        f"data.train_files={REPO_ROOT / 'data' / 'guide' / 'math_train.json'}",
        "agent.reward_name=math_reward_string_equal",
        "actor_rollout_ref.model.path=agentfly:tiny",
        f"trainer.default_local_dir={tmp_path / 'run'}",
    ]
    why = f"tool 'shout' (shout at {mine}:3): it has no docstring; a tool needs a Google-style docstring"
    assert main(arguments) == 2
    err = capsys.readouterr().err
    assert err.startswith("config error: agent.tools: ") and err.count("\n") == 1 and why in err, err
    assert main(["list", "tools", f"agent.imports=[{mine}]"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("config error: agent.imports: ") and err.count("\n") == 1 and why in err, err
