"""Building a run's parts (agentfly_train/build.py): the env is checked against the env contract when it is built."""

from __future__ import annotations

import gymnasium as gym
import pytest

import agentfly_envs  # noqa: F401  (registers the env ids)
from agentfly_envs.parsers import get_parser
from agentfly_envs.spaces import TextSpace
from agentfly_train.config import ConfigError, load_config
from agentfly_train.data import make_env

ENV_ID = "test/NoAnswerAction"


class Rows:
    def __len__(self) -> int:
        return 4

    def row(self, index: int) -> dict:
        return {"question": str(index)}

    def validate(self, row) -> None:
        pass

    def golden(self, row) -> None:
        return None


class NoAnswerAction(gym.Env):
    """An env of another library that has every member of the env contract but ``answer_action``."""

    truncation_reward = 0.0
    reward_fn = None

    def __init__(self, parser: str = "hermes", **_) -> None:
        self.tasks, self.parser = Rows(), get_parser(parser)
        self.observation_space = self.action_space = TextSpace(16)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return "", {"messages": [], "tools": []}

    def step(self, action):
        return "", 1.0, True, False, {"messages": []}

    def golden_actions(self) -> list[str]:
        return ["4"]


if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=NoAnswerAction)


def test_the_built_env_is_checked_against_the_env_contract():
    config = load_config([f"agent.env={ENV_ID}"], ["quickstart"], check=False)
    with pytest.raises(ConfigError) as raised:
        make_env(config)
    assert str(raised.value) == (
        f"agent.env={ENV_ID}: env {ENV_ID} (NoAnswerAction) lacks what agentfly_train needs beyond Gymnasium's API: "
        "answer_action; see agentfly_envs.contract.TrainableEnv (docs/extending.md, 'The env contract')"
    )
    assert make_env(load_config([], ["quickstart"], check=False)).spec.id == "agentfly/Arith-Calc"
