"""agentfly_envs: Gymnasium environments for tool-using LLM agents.

Importing the package registers its environments with Gymnasium::

    import gymnasium as gym
    import agentfly_envs  # or: gym.register_envs(agentfly_envs)

    env = gym.make("agentfly/Arith-Calc")
    observation, info = env.reset(seed=0)

``gym.make("agentfly_envs:agentfly/GSM8K-Calc")`` imports the package itself. This package never
imports torch; heavy libraries (transformers for tool schemas, datasets, math-verify) load lazily.
"""

from agentfly_envs.contract import TaskRows, TrainableEnv, check_env_contract, env_contract
from agentfly_envs.core import ERROR_KINDS, ToolEnv
from agentfly_envs.demonstrations import Demonstrator
from agentfly_envs.errors import (
    AgentflyError,
    DataUnavailableError,
    DuplicateRegistrationError,
    EnvContractError,
    EpisodeFinishedError,
    InfrastructureError,
    TaskFormatError,
    UnknownNameError,
    WorldUnavailableError,
)
from agentfly_envs.parsers import PARSERS, GuiParser, Parser, ParseResult, ToolCall, get_parser
from agentfly_envs.registration import ENVIRONMENTS, register_envs
from agentfly_envs.rewards import REWARDS, RewardResult, get_reward
from agentfly_envs.spaces import TextSpace
from agentfly_envs.tasks import TASKS, GoldenSolution, TaskSource, get_task_source
from agentfly_envs.tools import TOOLS, Tool, ToolError, get_tool, register_tool
from agentfly_envs.turn_rewards import TURN_REWARDS, TurnStep, get_turn_reward

__version__ = "0.1.0"

register_envs()

__all__ = [
    "ENVIRONMENTS",
    "ERROR_KINDS",
    "PARSERS",
    "REWARDS",
    "TASKS",
    "TOOLS",
    "TURN_REWARDS",
    "AgentflyError",
    "DataUnavailableError",
    "Demonstrator",
    "DuplicateRegistrationError",
    "EnvContractError",
    "EpisodeFinishedError",
    "GoldenSolution",
    "GuiParser",
    "InfrastructureError",
    "ParseResult",
    "Parser",
    "RewardResult",
    "TaskFormatError",
    "TaskRows",
    "TaskSource",
    "TextSpace",
    "Tool",
    "ToolCall",
    "ToolEnv",
    "ToolError",
    "TrainableEnv",
    "TurnStep",
    "UnknownNameError",
    "WorldUnavailableError",
    "check_env_contract",
    "env_contract",
    "get_parser",
    "get_reward",
    "get_task_source",
    "get_tool",
    "get_turn_reward",
    "register_envs",
    "register_tool",
]
