import concurrent.futures

import gymnasium as gym
import pytest

import agentfly_envs  # noqa: F401
from agentfly_envs.sandbox import SandboxLimits, SandboxPool
from agentfly_envs.tools import CallStatus, get_tool
from agentfly_envs.tools.python_executor import NO_OUTPUT, PythonExecutor

ROW = {"question": "What is 6 times 7?", "answer": "#### 42"}


@pytest.fixture(scope="module")
def fast_pool():
    with SandboxPool(SandboxLimits(timeout_s=1.0, file_bytes=1 << 20), workers=2) as pool:
        yield pool


def call(code: str) -> dict:
    return {"role": "assistant", "tool_calls": [{"function": {"name": "python_executor", "arguments": {"code": code}}}]}


def test_each_env_has_its_own_notebook_per_episode():
    prototype = get_tool("python_executor")
    first, second = prototype.for_env(), prototype.for_env()
    assert first is not prototype and isinstance(first, PythonExecutor)
    first.begin_episode(ROW)
    second.begin_episode(ROW)
    assert first({"code": "x = 1"}).content == NO_OUTPUT
    assert first({"code": "x + 1"}).content == "2\n"
    assert "NameError" in second({"code": "x"}).content
    first.begin_episode(ROW)  # a new episode starts from a fresh interpreter
    assert "NameError" in first({"code": "x"}).content
    for tool in (first, second):
        tool.end_episode()


def test_notebook_can_be_turned_off_and_the_description_says_so():
    tool = get_tool("python_executor").for_env(notebook=False)
    assert tool({"code": "x = 1"}).content == NO_OUTPUT
    assert "NameError" in tool({"code": "print(x)"}).content
    assert "Each call starts from scratch" in tool.schema["function"]["description"]
    assert "persist between calls" in get_tool("python_executor").schema["function"]["description"]
    assert tool.schema["function"]["name"] == "python_executor"


def test_env_runs_calls_in_one_episode_and_resets_between_episodes():
    env = gym.make("agentfly/Arith-Calc", tools=("python_executor",), max_turns=4)
    env.reset(options={"task": ROW})
    assert env.step(call("x = 6 * 7"))[0] == NO_OUTPUT
    observation, *_ = env.step(call("x"))
    assert observation == "42\n"
    env.reset(options={"task": ROW})
    assert "NameError" in env.step(call("x"))[0]
    env.close()


def test_sandbox_interventions_are_error_observations_with_counts(fast_pool):
    env = gym.make(
        "agentfly/Arith-Calc", tools=("python_executor",), tool_options={"python_executor": {"pool": fast_pool}}
    )
    env.reset(options={"task": ROW})
    env.step(call("x = 1"))
    observation, reward, terminated, truncated, info = env.step(call("while True: pass"))
    assert reward == 0.0
    assert observation == "Error: the code was stopped: it ran longer than 1 s"
    assert info["error_counts"]["tool_error"] == 1 and not terminated and not truncated
    observation, *_, info = env.step(call("import os; os.write(1, b'\\xff'); x"))
    assert observation.startswith("Error: the output is not valid UTF-8") and "\ufffd" in observation
    assert info["error_counts"]["tool_error"] == 2
    observation, *_, info = env.step(call("import os; os._exit(1)"))
    assert "the interpreter crashed or was killed" in observation and "variables and imports" in observation
    observation, *_, info = env.step(call("x"))
    assert "NameError" in observation and info["error_counts"]["tool_error"] == 3
    env.close()


def test_code_format_reaches_python_executor_by_its_alias():
    env = gym.make("agentfly/Arith-Calc", tools=("python_executor",), parser="code", max_turns=3)
    _, info = env.reset(options={"task": ROW})
    system = info["messages"][0]["content"]
    assert "persist between calls in this task" in system and "plain ``` fence" in system
    assert "Compute every arithmetic step with Python code." in system
    observation, *_, info = env.step("```python\nx = 6\n```\n```python\nx * 7\n```")
    assert observation == f"{NO_OUTPUT}\n\n42\n" and info["tool_calls"][0]["function"]["name"] == "python"
    env.close()


def test_configuration_mistakes_raise_early():
    with pytest.raises(ValueError, match="add 'python' or 'python_executor' to tools"):
        gym.make("agentfly/Arith-Calc", parser="code")
    with pytest.raises(ValueError, match=r"tool_options names tool\(s\) \['python'\]"):
        gym.make("agentfly/Arith-Calc", tool_options={"python": {"notebook": True}})
    with pytest.raises(TypeError, match="Did you mean 'notebook'"):
        gym.make("agentfly/Arith-Calc", tools=("python_executor",), tool_options={"python_executor": {"notebok": 1}})
    with pytest.raises(TypeError, match="takes no options"):
        gym.make("agentfly/Arith-Calc", tool_options={"calculator": {"precision": 3}})


def test_nul_character_is_rejected_before_running():
    result = get_tool("python_executor").for_env()({"code": "print(1)\x00"})
    assert result.status is CallStatus.TOOL_ERROR and result.content == "Error: code contains a NUL character"


def test_many_envs_in_threads_share_the_default_pool():
    def play(n: int) -> list:
        env = gym.make("agentfly/Arith-Calc", tools=("python_executor",), max_turns=21)
        env.reset(options={"task": ROW})
        outputs = []
        for step in range(10):  # each thread's notebook holds its own x while the others write theirs
            env.step(call(f"x = {n} * 1000 + {step}"))
            outputs.append(env.step(call("x"))[0])
        env.close()
        return outputs

    with concurrent.futures.ThreadPoolExecutor(8) as executor:
        results = list(executor.map(play, range(8)))
    assert results == [[f"{n * 1000 + step}\n" for step in range(10)] for n in range(8)]
