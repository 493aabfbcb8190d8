"""Per-turn rewards: the env pays a named turn reward at each step, the rollout keeps each turn's reward (the
episode's reward is their sum), the saved samples show them, and the trainer's token rewards put each on its turn."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import gymnasium as gym
import pytest
import torch

from agentfly_envs import TURN_REWARDS, UnknownNameError
from agentfly_train.algorithms import Turns, compute_advantage
from agentfly_train.generation import SamplingParams
from agentfly_train.rollout import ChatCodec, RolloutBudgets, context_key, run_rollouts, turn_table
from agentfly_train.samples import write_samples
from tests.helpers.runs import quickstart_config
from tests.helpers.scripted import ScriptedPolicy, golden_scripts

BAD_TURN = '<tool_call>{not json</tool_call>\n<tool_call>{"name": "nope", "arguments": {}}</tool_call>'


@pytest.fixture(scope="module")
def setup(tiny_tokenizer):
    envs = [gym.make("agentfly/Arith-Calc", level="easy", max_turns=4, turn_reward="tool_error_penalty")]
    _, info = envs[0].reset(options={"index": 0})
    codec = ChatCodec(tiny_tokenizer, info["tools"])
    tasks = [envs[0].unwrapped.tasks.row(0)]
    with ThreadPoolExecutor(2) as executor:
        yield envs, codec, tasks, executor


def test_each_step_pays_its_turn_reward_and_a_failing_one_pays_zero_with_a_reason():
    env = gym.make("agentfly/Arith-Calc", turn_reward="tool_error_penalty")
    env.reset(options={"index": 0})
    _, reward, _, _, info = env.step(BAD_TURN)
    assert reward == pytest.approx(-0.2) and info["turn_reward"] == pytest.approx(-0.2)
    answer = env.unwrapped.answer_action(str(env.unwrapped._episode.ground_truth))
    _, reward, terminated, _, info = env.step(answer)
    assert terminated and reward == 1.0 and info["turn_reward"] == 0.0
    TURN_REWARDS.add("test_broken_turn_reward", lambda turn: 1 / 0)
    try:
        env = gym.make("agentfly/Arith-Calc", turn_reward="test_broken_turn_reward")
        env.reset(options={"index": 0})
        _, reward, _, _, info = env.step(BAD_TURN)
        assert reward == 0.0 and info["turn_reward"] == 0.0
        assert info["turn_reward_error"] == (
            "turn reward 'test_broken_turn_reward' raised ZeroDivisionError: division by zero"
        )
    finally:
        TURN_REWARDS._entries.pop("test_broken_turn_reward")
    with pytest.raises(UnknownNameError, match="tool_error_penalty"):
        gym.make("agentfly/Arith-Calc", turn_reward="tool_error")


def test_turn_rewards_reach_the_trajectory_the_samples_and_the_token_rewards(setup, tmp_path):
    envs, codec, tasks, executor = setup
    prompt, golden = next(iter(golden_scripts(envs, codec, tasks).items()))
    policy = ScriptedPolicy(codec, {prompt: [BAD_TURN, *golden]})
    budgets = RolloutBudgets(max_turns=4, max_tokens_per_turn=64, response_length=2048)
    (trajectory,) = run_rollouts(envs, tasks, policy, codec, budgets, SamplingParams(), executor)
    assert trajectory.turn_rewards == pytest.approx([-0.2] + [0.0] * (len(golden) - 1) + [1.0])
    assert trajectory.reward == pytest.approx(0.8) and trajectory.correct  # correct by the outcome, not the sum
    (record,) = write_samples(tmp_path / "samples.jsonl", [trajectory])
    assert json.loads((tmp_path / "samples.jsonl").read_text())["turn_rewards"] == record["turn_rewards"]
    assert record["turn_rewards"] == trajectory.turn_rewards

    table = turn_table([trajectory], 4)
    assert table.taken == [[True] * trajectory.num_turns + [False] * (4 - trajectory.num_turns)]
    assert table.anchors[0][0] == context_key(trajectory.prompt_ids)
    turns = Turns(*(torch.tensor(column) for column in (table.tokens, table.rewards, table.anchors, table.taken)))
    mask = torch.tensor([trajectory.env_mask])
    rewards = turns.token_rewards(mask)[0]
    ends = [span.end - 1 for span in trajectory.turn_spans]  # each turn's last sampled token
    assert rewards[ends].tolist() == pytest.approx(trajectory.turn_rewards)
    assert torch.count_nonzero(rewards) == 2 and rewards.sum().item() == pytest.approx(trajectory.reward)
    # the loss sees them: REINFORCE++'s return-to-go (γ = 1) of the first turn counts its own penalty, the last's not
    _, returns = compute_advantage("reinforce_plus_plus", rewards[None], mask, gamma=1.0)
    first, last = trajectory.turn_spans[0], trajectory.turn_spans[-1]
    assert returns[0, first.start].item() == pytest.approx(0.8) and returns[0, last.start].item() == pytest.approx(1.0)


def test_the_budgets_add_the_truncation_reward_to_the_last_turns(setup):
    envs, codec, tasks, executor = setup
    prompt = next(iter(golden_scripts(envs, codec, tasks)))
    budgets = RolloutBudgets(max_turns=2, max_tokens_per_turn=64, response_length=2048, truncation_reward=-1.0)
    policy = ScriptedPolicy(codec, {prompt: [BAD_TURN, BAD_TURN]})
    (trajectory,) = run_rollouts(envs, tasks, policy, codec, budgets, SamplingParams(), executor)
    assert trajectory.finish_reason == "max_turns" and not trajectory.correct
    assert trajectory.turn_rewards == pytest.approx([-0.2, -1.2]) and trajectory.reward == pytest.approx(-1.4)


def test_agent_turn_reward_name_reaches_the_env_and_an_unknown_one_is_a_config_error():
    from agentfly_train.config import ConfigError, check_fields
    from agentfly_train.data import env_kwargs

    config = quickstart_config(["agent.turn_reward_name=tool_error_penalty"])
    assert env_kwargs(config)["turn_reward"] == "tool_error_penalty"
    assert "turn_reward" not in env_kwargs(quickstart_config())
    with pytest.raises(ConfigError, match=r"agent\.turn_reward_name.*tool_error_penalty"):
        check_fields(quickstart_config(["agent.turn_reward_name=tool_errors"]))


def test_a_world_that_pays_its_progress_each_step_is_correct_by_its_success_not_its_last_increment(tiny_tokenizer):
    """The maze pays each move its progress, so a golden episode's last step pays 1/n; success (what the accuracy
    metric counts) comes from the world's ``success`` component, and a walk cut short by the turn budget is no
    success although it was paid its progress."""
    envs = [gym.make("agentfly/Maze-Nav", num_tasks=2) for _ in range(2)]
    _, info = envs[0].reset(options={"index": 0})
    codec = ChatCodec(tiny_tokenizer, info["tools"])
    tasks = [envs[0].unwrapped.tasks.row(i) for i in range(2)]
    scripts = golden_scripts(envs, codec, tasks)
    with ThreadPoolExecutor(2) as executor:
        budgets = RolloutBudgets(max_turns=24, max_tokens_per_turn=64, response_length=4096)
        walked = run_rollouts(envs, tasks, ScriptedPolicy(codec, scripts), codec, budgets, SamplingParams(), executor)
        short = RolloutBudgets(max_turns=3, max_tokens_per_turn=64, response_length=4096)
        cut = run_rollouts(envs, tasks, ScriptedPolicy(codec, scripts), codec, short, SamplingParams(), executor)
    for trajectory in walked:
        assert trajectory.finish_reason == "stop" and trajectory.num_turns >= 10
        assert trajectory.turn_rewards[-1] == pytest.approx(1 / trajectory.num_turns)
        assert trajectory.reward == pytest.approx(1.0) and trajectory.correct
    for trajectory in cut:
        assert trajectory.finish_reason == "max_turns" and 0 < trajectory.reward < 1 and not trajectory.correct
