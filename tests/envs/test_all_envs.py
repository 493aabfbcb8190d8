"""Contract checks run on every registered environment id."""

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env
from gymnasium.wrappers import RecordEpisodeStatistics, TimeLimit

import agentfly_envs
from agentfly_envs import ENVIRONMENTS

ENV_IDS = sorted(ENVIRONMENTS)


@pytest.fixture
def make_kwargs(gsm8k_sample):
    """Kwargs that let each id run offline."""
    return {"agentfly/GSM8K-Calc": {"data_files": str(gsm8k_sample)}}


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


@pytest.mark.parametrize("env_id", ENV_IDS)
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_vector_envs_step_text_and_autoreset(env_id, mode, make_kwargs):
    kwargs = make_kwargs.get(env_id, {})
    planner = gym.make(env_id, **kwargs).unwrapped
    envs = gym.make_vec(env_id, num_envs=2, vectorization_mode=mode, **kwargs)
    observations, infos = envs.reset(seed=5)
    assert len(observations) == 2 and all(isinstance(o, str) and o for o in observations)
    rows = [planner.tasks.row(int(infos["task_index"][i])) for i in range(2)]
    plans = [planner.golden_actions(row) for row in rows]
    results = [planner.tasks.golden(row).results for row in rows]
    assert observations[0] == planner.tasks.user_prompt(planner.tasks.row(int(infos["task_index"][0])))
    finished, reset_again = [False, False], [False, False]
    for step in range(max(len(p) for p in plans) + 1):
        actions = [plan[step] if step < len(plan) else "" for plan in plans]
        observations, rewards, terminated, _, infos = envs.step(actions)
        for i in range(2):
            if step < len(plans[i]) - 1:
                assert not terminated[i]
                assert float(observations[i]) == float(results[i][step].replace(",", ""))
            elif step == len(plans[i]) - 1:
                assert terminated[i] and rewards[i] == 1.0
                finished[i] = True
            elif step == len(plans[i]):  # next-step autoreset: the action is ignored, a new task starts
                assert infos["_task_index"][i] and not terminated[i] and rewards[i] == 0.0
                assert observations[i] == planner.tasks.user_prompt(planner.tasks.row(int(infos["task_index"][i])))
                reset_again[i] = True
    assert all(finished) and all(reset_again)
    envs.close()


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
