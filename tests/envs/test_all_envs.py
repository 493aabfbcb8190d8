"""Contract checks run on every registered environment id."""

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env
from gymnasium.wrappers import RecordEpisodeStatistics, TimeLimit

import agentfly_envs
from agentfly_envs import ENVIRONMENTS
from tests.envs.hostile import HOSTILE_ACTIONS
from tests.helpers.paths import OFFLINE_KWARGS
from tests.helpers.skips import needs_scienceworld, needs_textarena, needs_textworld_express

TWX_IDS = sorted(env_id for env_id in ENVIRONMENTS if env_id.startswith("agentfly/TWX-"))
"""The TextWorldExpress worlds: they need the textworld-express package and Java, and no data."""
PUZZLE_IDS = sorted(env_id for env_id in ENVIRONMENTS if env_id.startswith("agentfly/TextArena-"))
"""The TextArena puzzles: they need the textarena package, and no data."""
SCIENCEWORLD_IDS = ["agentfly/ScienceWorld"]
"""ScienceWorld: it needs the scienceworld package and Java, and no data."""
WORLD_IDS = TWX_IDS + PUZZLE_IDS + SCIENCEWORLD_IDS + ["agentfly/Maze-Nav"]
MINIWOB_IDS = sorted(env_id for env_id in ENVIRONMENTS if env_id.startswith("agentfly/MiniWoB-"))
"""The MiniWoB web pages: each env starts a Chromium (seconds), so worlds/test_web.py runs these checks on two
shared browsers (one per observation mode) that play every page, instead of one browser per id and test here."""
NO_GOLDEN_IDS = {"agentfly/TextArena-2048"}
"""Ids without golden episodes (no solver): the tests that replay them are skipped."""
MARKS = {
    **dict.fromkeys(TWX_IDS, needs_textworld_express),
    **dict.fromkeys(PUZZLE_IDS, needs_textarena),
    **dict.fromkeys(SCIENCEWORLD_IDS, needs_scienceworld),
}
ENV_IDS = [
    pytest.param(env_id, marks=MARKS[env_id]) if env_id in MARKS else env_id
    for env_id in sorted(ENVIRONMENTS)
    if env_id not in MINIWOB_IDS
]
GOLDEN_IDS = [param for param in ENV_IDS if getattr(param, "values", (param,))[0] not in NO_GOLDEN_IDS]


@pytest.fixture
def make_kwargs():
    """Kwargs that let each id run offline."""
    return OFFLINE_KWARGS


def test_every_id_runs_offline_on_sample_data():
    assert set(OFFLINE_KWARGS) | {"agentfly/Arith-Calc", *WORLD_IDS, *MINIWOB_IDS} == set(ENVIRONMENTS)


def test_every_id_is_registered_with_gymnasium():
    for env_id in ENVIRONMENTS:
        assert gym.spec(env_id).entry_point == "agentfly_envs.core:ToolEnv"
    assert gym.register_envs(agentfly_envs) is None


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_check_env_passes(env_id, make_kwargs):
    env = gym.make(env_id, **make_kwargs.get(env_id, {}))
    check_env(env.unwrapped)
    env.close()


@pytest.mark.parametrize("env_id", GOLDEN_IDS)
def test_same_seed_same_episode(env_id, make_kwargs):
    def play(seed):
        env = gym.make(env_id, **make_kwargs.get(env_id, {}))
        observation, info = env.reset(seed=seed)
        transcript = [observation, info["task"]]
        for action in env.unwrapped.golden_actions():
            observation, reward, *_ = env.step(action)
            transcript += [observation, reward]
        env.close()
        return transcript

    assert play(11) == play(11)


def golden_replay(env: gym.Env, index: int) -> tuple[str, list, list[tuple[str, float, bool]]]:
    """Task ``index``'s first observation, golden actions and what one env returns for each: (observation,
    reward, terminated)."""
    observation, _ = env.reset(options={"index": index})
    actions = env.unwrapped.golden_actions()
    return observation, actions, [tuple(env.step(action)[:3]) for action in actions]


@pytest.mark.parametrize("env_id", GOLDEN_IDS)
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_vector_envs_step_text_and_autoreset(env_id, mode, make_kwargs):
    kwargs = make_kwargs.get(env_id, {})
    planner = gym.make(env_id, **kwargs)
    envs = gym.make_vec(env_id, num_envs=2, vectorization_mode=mode, **kwargs)
    observations, infos = envs.reset(seed=5)
    assert len(observations) == 2 and all(isinstance(o, str) and o for o in observations)
    replays = [golden_replay(planner, int(infos["task_index"][i])) for i in range(2)]
    assert list(observations) == [first for first, _, _ in replays]
    finished, reset_again, returns = [False, False], [False, False], [0.0, 0.0]
    for step in range(max(len(plan) for _, plan, _ in replays) + 1):
        actions = [plan[step] if step < len(plan) else "" for _, plan, _ in replays]
        observations, rewards, terminated, _, infos = envs.step(actions)
        for i, (_, plan, expected) in enumerate(replays):
            if step < len(plan):  # the same text, reward and ending as in a single env
                assert (observations[i], rewards[i], terminated[i]) == expected[step]
                assert terminated[i] == (step == len(plan) - 1)
                returns[i] += rewards[i]  # a world env that pays progress pays part of it on each step
                finished[i] = finished[i] or (terminated[i] and returns[i] == pytest.approx(1.0))
            elif step == len(plan):  # next-step autoreset: the action is ignored, a new task starts
                assert infos["_task_index"][i] and not terminated[i] and rewards[i] == 0.0
                assert observations[i] == planner.reset(options={"index": int(infos["task_index"][i])})[0]
                reset_again[i] = True
    assert all(finished) and all(reset_again)
    envs.close()
    planner.close()


@pytest.fixture(scope="module")
def env_for_each_id():
    envs = {}
    yield envs
    for env in envs.values():
        env.close()


@pytest.mark.parametrize("action", HOSTILE_ACTIONS, ids=range(len(HOSTILE_ACTIONS)))
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_hostile_actions_never_crash_any_env(env_for_each_id, env_id, action):
    if env_id not in env_for_each_id:  # made on first use, so a skipped id makes none
        env_for_each_id[env_id] = gym.make(env_id, max_turns=2, **OFFLINE_KWARGS.get(env_id, {}))
    env = env_for_each_id[env_id]
    env.reset(options={"index": 0})
    observation, reward, terminated, truncated, info = env.step(action)
    assert env.observation_space.contains(observation) and 0.0 <= reward <= 1.0 and not truncated
    assert terminated or (observation and info["messages"])  # a turn that goes on always gets an answer
    assert set(info["error_counts"]) == set(agentfly_envs.ERROR_KINDS)


def test_async_vector_env_carries_arbitrary_unicode():
    envs = gym.make_vec("agentfly/Arith-Calc", num_envs=2, vectorization_mode="async", parser="tool_calls")
    envs.reset(seed=0)
    weird = "ünïcödé ✓ 😀 中文"
    message = {"role": "assistant", "tool_calls": [{"function": {"name": weird, "arguments": {}}}]}
    observations, *_ = envs.step([message, message])
    assert all(weird in observation for observation in observations)
    envs.close()


def test_standard_wrappers():
    env = RecordEpisodeStatistics(TimeLimit(gym.make("agentfly/Arith-Calc", max_turns=50), max_episode_steps=3))
    env.reset(seed=0)
    for _ in range(3):
        _, _, terminated, truncated, info = env.step('<tool_call>{"name": "calculator", "arguments": {}}</tool_call>')
    assert truncated and not terminated
    assert info["episode"]["l"] == 3 and info["episode"]["r"] == 0.0
    env.reset(seed=0)
    *_, terminated, _, info = env.step(env.unwrapped.golden_actions()[-1])
    assert terminated and info["episode"]["l"] == 1 and info["episode"]["r"] == 1.0
