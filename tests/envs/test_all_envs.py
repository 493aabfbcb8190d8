"""Contract checks run on every registered environment id."""

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env
from gymnasium.wrappers import RecordEpisodeStatistics, TimeLimit

import agentfly_envs
from agentfly_envs import ENVIRONMENTS
from tests.conftest import OFFLINE_KWARGS
from tests.envs.hostile import HOSTILE_ACTIONS

ENV_IDS = sorted(ENVIRONMENTS)


@pytest.fixture
def make_kwargs():
    """Kwargs that let each id run offline."""
    return OFFLINE_KWARGS


def test_every_id_runs_offline_on_sample_data():
    assert set(OFFLINE_KWARGS) | {"agentfly/Arith-Calc"} == set(ENV_IDS)


def test_every_id_is_registered_with_gymnasium():
    for env_id in ENV_IDS:
        assert gym.spec(env_id).entry_point == "agentfly_envs.core:ToolEnv"
    assert gym.register_envs(agentfly_envs) is None


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_check_env_passes(env_id, make_kwargs):
    env = gym.make(env_id, **make_kwargs.get(env_id, {}))
    check_env(env.unwrapped)
    env.close()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_same_seed_same_episode(env_id, make_kwargs):
    def play(seed):
        env = gym.make(env_id, **make_kwargs.get(env_id, {}))
        observation, info = env.reset(seed=seed)
        transcript = [observation, info["task"]]
        for action in env.unwrapped.golden_actions():
            observation, reward, *_ = env.step(action)
            transcript += [observation, reward]
        return transcript

    assert play(11) == play(11)


def golden_replay(env: gym.Env, index: int) -> tuple[list, list[tuple[str, float, bool]]]:
    """Task ``index``'s golden actions and what one env returns for each: (observation, reward, terminated)."""
    env.reset(options={"index": index})
    actions = env.unwrapped.golden_actions()
    return actions, [tuple(env.step(action)[:3]) for action in actions]


@pytest.mark.parametrize("env_id", ENV_IDS)
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_vector_envs_step_text_and_autoreset(env_id, mode, make_kwargs):
    kwargs = make_kwargs.get(env_id, {})
    planner = gym.make(env_id, **kwargs)
    envs = gym.make_vec(env_id, num_envs=2, vectorization_mode=mode, **kwargs)
    observations, infos = envs.reset(seed=5)
    assert len(observations) == 2 and all(isinstance(o, str) and o for o in observations)
    tasks = planner.unwrapped.tasks
    assert observations[0] == tasks.user_prompt(tasks.row(int(infos["task_index"][0])))
    replays = [golden_replay(planner, int(infos["task_index"][i])) for i in range(2)]
    finished, reset_again = [False, False], [False, False]
    for step in range(max(len(plan) for plan, _ in replays) + 1):
        actions = [plan[step] if step < len(plan) else "" for plan, _ in replays]
        observations, rewards, terminated, _, infos = envs.step(actions)
        for i, (plan, expected) in enumerate(replays):
            if step < len(plan):  # the same text, reward and ending as in a single env
                assert (observations[i], rewards[i], terminated[i]) == expected[step]
                assert terminated[i] == (step == len(plan) - 1)
                finished[i] = finished[i] or (terminated[i] and rewards[i] == 1.0)
            elif step == len(plan):  # next-step autoreset: the action is ignored, a new task starts
                assert infos["_task_index"][i] and not terminated[i] and rewards[i] == 0.0
                assert observations[i] == tasks.user_prompt(tasks.row(int(infos["task_index"][i])))
                reset_again[i] = True
    assert all(finished) and all(reset_again)
    envs.close()
    planner.close()


@pytest.fixture(scope="module")
def env_for_each_id():
    envs = {env_id: gym.make(env_id, max_turns=2, **OFFLINE_KWARGS.get(env_id, {})) for env_id in ENV_IDS}
    yield envs
    for env in envs.values():
        env.close()


@pytest.mark.parametrize("action", HOSTILE_ACTIONS, ids=range(len(HOSTILE_ACTIONS)))
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_hostile_actions_never_crash_any_env(env_for_each_id, env_id, action):
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
