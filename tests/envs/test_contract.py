"""The env contract (agentfly_envs/contract.py): what the trainer reads of an env, read through wrappers and checked
with one line naming what is missing."""

from __future__ import annotations

import gymnasium as gym
import pytest

import agentfly_envs  # noqa: F401  (registers the env ids)
from agentfly_envs import EnvContractError, ToolEnv, check_env_contract, env_contract
from agentfly_envs.contract import CONTRACT_MEMBERS, truncation_reward
from agentfly_envs.errors import AgentflyError
from agentfly_envs.parsers import get_parser
from agentfly_envs.spaces import TextSpace


class Rows:
    """Task rows with every member of ``TaskRows`` but ``golden``."""

    def __len__(self) -> int:
        return 2

    def row(self, index: int) -> dict:
        return {"question": str(index)}

    def validate(self, row) -> None:
        pass


class GoldenRows(Rows):
    def golden(self, row) -> None:
        return None


def _init(self) -> None:
    self.observation_space = self.action_space = TextSpace(16)


def _reset(self, *, seed=None, options=None):
    gym.Env.reset(self, seed=seed)
    return "", {"messages": [], "tools": []}


def _step(self, action):
    return "", 1.0, True, False, {"messages": []}


MEMBERS = {
    "tasks": GoldenRows(),
    "parser": get_parser("hermes"),
    "truncation_reward": -1.0,
    "reward_fn": None,
    "golden_actions": lambda self: ["4"],
    "answer_action": lambda self, answer: answer,
}
"""An env of another library: the contract's members, as class attributes."""


def env_class(name: str, **members) -> type[gym.Env]:
    """An env class with :data:`MEMBERS` updated by ``members`` (a member given as ``None`` is left out, but
    ``reward_fn``)."""
    chosen = {**MEMBERS, **members}
    chosen = {key: value for key, value in chosen.items() if value is not None or key == "reward_fn"}
    return type(name, (gym.Env,), {"__init__": _init, "reset": _reset, "step": _step, **chosen})


Minimal = env_class("Minimal")


def test_a_wrapped_tool_env_satisfies_the_contract():
    env = gym.wrappers.RecordEpisodeStatistics(gym.make("agentfly/Arith-Calc", truncation_reward=-0.5))
    check_env_contract(env)
    contract = env_contract(env)
    assert isinstance(env.unwrapped, ToolEnv) and contract.tasks is env.unwrapped.tasks
    assert (contract.parser.name, contract.truncation_reward) == ("hermes", -0.5)
    assert contract.reward_fn is env.unwrapped.reward_fn
    env.reset(options={"index": 0})
    assert contract.golden_actions() == env.unwrapped.golden_actions()
    assert contract.answer_action("42") == "The answer is \\boxed{42}."


def test_members_are_read_from_the_outermost_wrapper_that_has_them_when_used():
    class Penalised(gym.Wrapper):
        truncation_reward = -2.0

    inner = gym.make("agentfly/Arith-Calc")
    env = Penalised(inner)
    contract = env_contract(env)
    assert contract.truncation_reward == -2.0 == truncation_reward(env)
    inner.unwrapped.max_turns = 1  # read as the env is now
    inner.reset(options={"index": 0})
    assert len(contract.golden_actions()) == 1


@pytest.mark.parametrize("member", CONTRACT_MEMBERS)
def test_an_env_missing_a_member_fails_with_one_line_naming_it(member):
    lacking = {name: value for name, value in MEMBERS.items() if name != member}
    env = type(f"No_{member}", (gym.Env,), {"__init__": _init, "reset": _reset, "step": _step, **lacking})()
    with pytest.raises(EnvContractError) as raised:
        check_env_contract(env)
    message = str(raised.value)
    assert "\n" not in message and message.startswith(f"env No_{member} (No_{member}) lacks what agentfly_train needs")
    assert message.split("API: ", 1)[1].split(";")[0] == member
    assert isinstance(raised.value, AgentflyError)


def test_the_check_names_every_missing_member_and_what_is_wrong():
    with pytest.raises(
        EnvContractError, match=r"env CartPole-v1 \(CartPoleEnv\) .*API: " + ", ".join(CONTRACT_MEMBERS)
    ):
        check_env_contract(gym.make("CartPole-v1"))
    wrong = env_class("Wrong", tasks=Rows(), parser="hermes", truncation_reward="none", answer_action="4")
    with pytest.raises(EnvContractError) as raised:
        check_env_contract(wrong())
    assert str(raised.value).split("API: ", 1)[1].split("; see")[0] == (
        "tasks.golden, parser (a str, not an agentfly_envs Parser: get_parser(name) gives one), "
        "truncation_reward (a number, not 'none'), answer_action (a method, not '4')"
    )


def test_reading_a_missing_member_raises_naming_it():
    contract = env_contract(gym.make("CartPole-v1"))
    with pytest.raises(EnvContractError, match=r"env CartPole-v1 \(CartPoleEnv\) has no 'tasks', which agentfly_train"):
        contract.tasks  # noqa: B018
    with pytest.raises(AttributeError, match="not a member of the env contract"):
        contract.step  # noqa: B018
    assert truncation_reward(gym.make("CartPole-v1")) == 0.0  # a host's default for an env outside the contract


def test_an_env_of_another_library_satisfies_it_and_a_vector_env_is_refused():
    check_env_contract(gym.wrappers.PassiveEnvChecker(Minimal()))
    vector = gym.vector.SyncVectorEnv([Minimal])
    with pytest.raises(EnvContractError, match="is a vector env: check each of its sub-envs"):
        check_env_contract(vector)
    for env in vector.envs:
        check_env_contract(env)


def test_a_remote_env_satisfies_it():
    pytest.importorskip("openenv", reason='needs openenv-core (the "openenv" extra)')
    from agentfly_envs.remote import ServerThread, create_app

    with ServerThread(create_app("agentfly/Arith-Calc", {"level": "easy", "truncation_reward": -0.25})) as url:
        env = gym.make("agentfly/Remote", url=url)
        check_env_contract(env)
        contract = env_contract(env)
        assert (contract.truncation_reward, contract.parser.name, contract.reward_fn) == (-0.25, "hermes", None)
        assert contract.tasks.row(3) == {"index": 3} and contract.tasks.golden({"index": 3}) is None
        with pytest.raises(AgentflyError, match="does not share golden solutions"):
            contract.golden_actions()
        with pytest.raises(AgentflyError, match="does not share its answer format"):
            contract.answer_action("4")
        env.close()
