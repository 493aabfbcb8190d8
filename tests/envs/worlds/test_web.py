"""The MiniWoB web envs (agentfly/MiniWoB-<Task>): golden episodes, the Gymnasium checks, hostile actions, both
observation modes, and no Chromium left behind.

Each env starts a Chromium (seconds), so the tests share two browsers, one per observation mode, and each plays
every offered task (a row names its task; the browser loads its page).
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import agentfly_envs
from agentfly_envs.worlds.miniwob import TASKS, page_listing
from tests.envs.hostile import HOSTILE_ACTIONS
from tests.envs.test_all_envs import MINIWOB_IDS
from tests.helpers.paths import REPO_ROOT
from tests.helpers.processes import world_error_in_fresh_process
from tests.helpers.skips import needs_miniwob

pytestmark = [needs_miniwob, pytest.mark.xdist_group("web")]
"""One worker runs the module, so that its two browsers start once."""
MODES = ("text", "screenshot")


def row(task: str, seed: int = 3) -> dict:
    return {"world": "miniwob", "game": task, "split": "train", "seed": seed, "time_limit_s": 300.0}


def descendants(pid: int) -> set[int]:
    """The processes under ``pid`` (from /proc), with ``pid`` itself."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = set(), [pid]
    while todo:
        found.add(todo[-1])
        todo.extend(children.get(todo.pop(), []))
    return found


def browser_processes(env: gym.Env) -> set[int]:
    """The env's chromedriver and every Chromium process under it."""
    return {pid for driver in env.unwrapped.tools["click"].session.browser.pids for pid in descendants(driver)}


@pytest.fixture(scope="module")
def envs():
    """One env per observation mode (two browsers for the module), the screenshot one reading GUI agents' actions
    (agent_type=gui); closed at the end, with no process left."""
    made = {
        "text": gym.make("agentfly/MiniWoB-ClickButton"),
        "screenshot": gym.make("agentfly/MiniWoB-ClickButton", obs="screenshot", parser="gui"),  # a VLM agent's
    }
    for env in made.values():
        env.reset(seed=0)
    processes = set().union(*(browser_processes(env) for env in made.values()))
    assert len(processes) >= 4  # per env a chromedriver, the browser and its helpers
    yield made
    for env in made.values():
        env.close()
    deadline = time.monotonic() + 10
    while (alive := {pid for pid in processes if Path(f"/proc/{pid}").exists()}) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive, f"Chromium processes left after close: {sorted(alive)}"


@pytest.mark.parametrize("mode", MODES)
def test_golden_episodes_win_every_task(envs, mode):
    env = envs[mode]
    for task in TASKS.values():
        observation, info = env.reset(options={"task": row(task)})
        for action in env.unwrapped.golden_actions():
            observation, reward, terminated, truncated, info = env.step(action)
            assert sum(info["error_counts"].values()) == 0, (task, info["messages"])
        assert (reward, terminated, truncated) == (1.0, True, False), (task, observation)
        assert info["reward_components"]["success"] == 1.0


@pytest.mark.parametrize("mode", MODES)
def test_check_env_and_same_seed_same_page(envs, mode):
    env = envs[mode]
    check_env(env.unwrapped, skip_render_check=True)
    first, _ = env.reset(seed=11)
    again, _ = env.reset(seed=11)
    if mode == "text":
        assert first == again and "Page:\n[" in first
    else:
        assert first["text"] == again["text"] and np.array_equal(first["image"], again["image"])


def test_text_mode_lists_the_page_with_ids_and_acts_on_them(envs):
    env = envs["text"]
    observation, info = env.reset(options={"task": row("enter-text")})
    assert observation.startswith('Task: Enter "') and info["messages"][1]["content"] == observation
    page = env.unwrapped.tools["click"].session.browser.page
    field = next(e for e in page.elements if e.tag == "input_text")
    observation, *_ = env.step(
        f'<tool_call>{{"name": "type", "arguments": {{"text": "abc", "element": {field.ref}}}}}</tool_call>'
    )
    assert observation.startswith(f"Typed 'abc' into [{field.ref}].\n\nPage:\n")
    assert f'[{field.ref}] textbox value="abc" focused' in observation
    assert observation.endswith(page_listing(env.unwrapped.tools["click"].session.browser.page))


def test_screenshot_mode_shows_the_screen_in_the_observation_and_the_messages(envs):
    env = envs["screenshot"]
    observation, info = env.reset(options={"task": row("click-button")})
    assert env.observation_space.contains(observation) and observation["image"].shape == (210, 160, 3)
    assert observation["image"].std() > 0  # a rendered page, not a blank
    image, text = info["messages"][1]["content"]
    assert image["type"] == "image" and np.array_equal(np.asarray(image["image"]), observation["image"])
    assert text == {"type": "text", "text": observation["text"]}
    assert [tool["function"]["parameters"]["required"] for tool in info["tools"]] == [
        ["x", "y"],
        ["text"],
        ["key"],
        ["direction", "x", "y"],
    ]
    click = {"name": "computer_use", "arguments": {"action": "left_click", "coordinate": [150, 200]}}
    observation, _, terminated, _, info = env.step(f"<tool_call>{json.dumps(click)}</tool_call>")
    assert observation["text"].startswith("Clicked at (150, 200).") and not terminated
    assert info["messages"][-1]["content"][0]["type"] == "image"


@pytest.mark.parametrize(
    ("call", "error"),
    [
        ('{"name": "click", "arguments": {"element": 999}}', "Error: the page has no element [999]"),
        ('{"name": "click", "arguments": {"element": -1}}', "Error: the page has no element [-1]"),
        ('{"name": "click", "arguments": {"element": "Yes"}}', "Error: bad arguments for click"),
        ('{"name": "type", "arguments": {"text": ""}}', "Error: the text to type is empty"),
        ('{"name": "type", "arguments": {"text": "' + "x" * 65 + '"}}', "Error: type at most 64 characters"),
        ('{"name": "press", "arguments": {"key": "hyperspace"}}', "Error: cannot press 'hyperspace'"),
        ('{"name": "scroll", "arguments": {"direction": "sideways"}}', "Error: scroll direction must be"),
        ('{"name": "click", "arguments": {"x": 5, "y": 5}}', "Error: bad arguments for click"),
    ],
)
def test_impossible_text_actions_are_error_observations(envs, call, error):
    env = envs["text"]
    env.reset(options={"task": row("click-button")})
    observation, reward, terminated, *_ = env.step(f"<tool_call>{call}</tool_call>")
    assert observation.startswith(error) and not terminated and reward == 0.0
    assert "\n\nPage:\n[" in observation  # the page still shows after a mistake


def test_impossible_screen_actions_and_actions_after_the_end_are_error_observations(envs):
    env = envs["screenshot"]
    env.reset(options={"task": row("click-button")})
    observation, *_ = env.step("Thought: there.\nAction: click(start_box='(500,-3)')")
    assert observation["text"].startswith("Error: (500, -3) is off the screen")
    parser = env.unwrapped.parser
    winning_call = parser.parse(env.unwrapped.golden_actions()[-1]).calls[0]
    observation, reward, terminated, _, info = env.step(parser.format_calls([winning_call, winning_call]))
    assert terminated and reward == 1.0
    assert "Error: the task has already ended" in observation["text"] and info["error_counts"]["tool_error"] == 2


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("action", HOSTILE_ACTIONS, ids=range(len(HOSTILE_ACTIONS)))
def test_hostile_actions_never_crash(envs, action, mode):
    env = envs[mode]
    env.reset(options={"task": row("email-inbox")})
    observation, reward, terminated, truncated, info = env.step(action)
    assert env.observation_space.contains(observation) and 0.0 <= reward <= 1.0 and not truncated
    assert terminated or (observation and info["messages"])
    assert set(info["error_counts"]) == set(agentfly_envs.ERROR_KINDS)


def test_world_score_is_miniwobs_time_decayed_reward(envs):
    env = envs["text"]
    tool = env.unwrapped.tools["click"]
    env.reset(options={"task": row("click-button") | {"time_limit_s": 2.0}})
    golden = env.unwrapped.golden_actions()
    time.sleep(0.5)
    *_, info = env.step(golden[-1])
    components = info["reward_components"]
    assert components["success"] == 1.0 and 0.0 < components["score"] < 0.9  # at least 0.5 s of 2 s passed
    assert components["score"] == pytest.approx(tool.session.browser.page.reward)


def test_a_timed_out_episode_fails(envs):
    env = envs["text"]
    env.reset(options={"task": row("click-button") | {"time_limit_s": 0.2}})
    time.sleep(0.4)
    observation, reward, terminated, _, info = env.step(
        '<tool_call>{"name": "press", "arguments": {"key": "Tab"}}</tool_call>'
    )
    assert terminated and reward == 0.0 and info["reward_components"]["success"] == 0.0
    assert "Error: the task has already ended" in observation and "[The task has failed (timed out).]" in observation


@pytest.mark.parametrize(
    ("mode", "driver_too", "cause"),
    # a dead chromedriver is a refused connection (MaxRetryError) or, caught mid-answer, a broken one (ProtocolError)
    [("text", True, "MaxRetryError|ProtocolError"), ("screenshot", False, "InvalidSessionIdException")],
    ids=["chromedriver_and_chromium", "chromium"],
)
def test_a_dead_browser_ends_the_episode_as_an_infrastructure_failure(mode, driver_too, cause):
    kwargs = {"obs": "screenshot", "parser": "gui"} if mode == "screenshot" else {}
    env = gym.make("agentfly/MiniWoB-ClickButton", **kwargs)
    env.reset(options={"task": row("click-button")})
    winning = env.unwrapped.golden_actions()[-1]
    driver = env.unwrapped.tools["click"].session.browser.pids[0]
    for pid in descendants(driver) if driver_too else descendants(driver) - {driver}:
        os.kill(pid, signal.SIGKILL)
    observation, reward, terminated, truncated, info = env.step(winning)
    text = observation if mode == "text" else observation["text"]
    assert re.fullmatch(rf"Error: the browser stopped working \(({cause})\); this episode is over", text), text
    assert (reward, terminated, truncated) == (0.0, False, True) and info["reward_components"] == {}
    assert info["infra_failure"] == f"tool click: {text.removeprefix('Error: ')}"
    assert not any(info["error_counts"].values())
    if mode == "screenshot":  # the screen of a dead browser is black
        assert env.observation_space.contains(observation) and not observation["image"].any()
    env.reset(options={"task": row("click-button")})  # a new browser
    assert env.step(env.unwrapped.golden_actions()[-1])[1:3] == (1.0, True)
    env.close()


@pytest.mark.parametrize("env_id", MINIWOB_IDS)
def test_every_task_has_an_id_and_a_solver(env_id):
    from agentfly_envs.worlds.miniwob_solvers import SOLVERS

    spec = gym.spec(env_id)
    assert spec.kwargs["game"] in SOLVERS and spec.kwargs["tools"] == ("click", "type", "press", "scroll")


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("import sys; sys.modules['miniwob'] = None", "MiniWoB needs the web extra: pip install 'agentfly-rl[web]'"),
        ("import os; os.environ['PATH'] = ''", "apt-get install chromium chromium-driver"),
    ],
)
def test_missing_extra_or_chromium_says_what_to_install(setup, message):
    setup += "; import os; os.environ.pop('MINIWOB_CHROME_BINARY', None); os.environ.pop('MINIWOB_CHROMEDRIVER', None)"
    printed = world_error_in_fresh_process(setup, "agentfly/MiniWoB-ClickButton")
    assert message in printed and len(printed.splitlines()) == 1


def test_bad_configurations_raise_early():
    with pytest.raises(ValueError, match="obs must be one of"):
        gym.make("agentfly/MiniWoB-ClickButton", obs="pixels")
    with pytest.raises(ValueError, match="needs a world with a screen"):
        gym.make("agentfly/Arith-Calc", obs="screenshot")
    with pytest.raises(agentfly_envs.TaskFormatError, match="unknown MiniWoB task 'click-everything'"):
        gym.make("agentfly/MiniWoB-ClickButton", game="click-everything")
    with pytest.raises(ValueError, match="play different worlds"):
        gym.make("agentfly/MiniWoB-ClickButton", tools=("act", "click"))


def test_docs_web_example_runs_as_written():
    text = (REPO_ROOT / "docs" / "envs.md").read_text()
    block = next(b for b in re.findall(r"```python\n(.*?)```", text, re.DOTALL) if "agentfly/MiniWoB-EnterText" in b)
    namespace: dict = {}
    exec(compile(block, "<docs/envs.md: web pages>", "exec"), namespace)
    assert (namespace["reward"], namespace["terminated"]) == (1.0, True)
    assert namespace["observation"]["text"].startswith("Clicked at (20, 136).")
