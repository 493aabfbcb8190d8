"""The env contract: what ``agentfly_train`` needs from an env beyond Gymnasium's API.

Gymnasium's ``reset``/``step`` play the episodes. A trainer also reads an env's task rows (to train and validate on),
its parser (the format the chat template must speak), its demonstrations (the SFT warm start plays them, and the chat
codec is checked on one), the reward of an episode cut short, and its reward function (the dry run names it).
:class:`TrainableEnv` writes these down as one typed Protocol. :func:`env_contract` reads its members through
Gymnasium's ``env.get_wrapper_attr(name)``, so through any wrappers, from the outermost one that has the member, at
the moment it is read (a pool may replace the env inside its wrapper). :func:`check_env_contract` is called once
where the trainer builds its env, and raises one line naming every member that is missing.

Every :class:`~agentfly_envs.core.ToolEnv` has them, and so have the envs of other libraries agentfly registers
(``agentfly/Remote``, ``agentfly/Verifiers``), whose tasks have no golden solutions and whose demonstrations raise
:class:`~agentfly_envs.errors.AgentflyError`.

Example:
    >>> import gymnasium as gym
    >>> env = gym.make("agentfly/Arith-Calc")  # wrapped by gym.make
    >>> check_env_contract(env)
    >>> env_contract(env).parser.name, env_contract(env).truncation_reward
    ('hermes', 0.0)
    >>> check_env_contract(gym.make("CartPole-v1"))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    agentfly_envs.errors.EnvContractError: env CartPole-v1 (CartPoleEnv) lacks what agentfly_train needs beyond \
Gymnasium's API: tasks, parser, truncation_reward, reward_fn, golden_actions, answer_action; ...
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol, cast

import gymnasium as gym

from agentfly_envs.errors import EnvContractError
from agentfly_envs.parsers import Parser

if TYPE_CHECKING:
    from agentfly_envs.parsers import Action
    from agentfly_envs.rewards import RewardFunction
    from agentfly_envs.tasks import GoldenSolution, Row


class TaskRows(Protocol):
    """An env's tasks, as the trainer reads them (a :class:`~agentfly_envs.tasks.TaskSource` is one)."""

    def __len__(self) -> int:
        """Tasks addressable by index."""
        ...

    def row(self, index: int) -> Row:
        """Task ``index`` (0-based) as a new dict: what ``reset(options={"task": row})`` takes."""
        ...

    def validate(self, row: Mapping[str, Any]) -> None:
        """Checks a row of the run's data files.

        Raises:
            TaskFormatError: the row cannot be a task of this env (naming the field).
        """
        ...

    def golden(self, row: Row) -> GoldenSolution | None:
        """The task's reference solution (the warm start's guesses are other tasks' answers), or ``None``."""
        ...


class TrainableEnv(Protocol):
    """What ``agentfly_train`` needs from an env beyond Gymnasium's API (its attributes and methods, on the env or on
    a wrapper around it; read them with :func:`env_contract`)."""

    tasks: TaskRows
    """The tasks a run trains and validates on when it has no data files, and the check of the rows of those it has."""
    parser: Parser
    """The format of the assistant's turns: the chat template is chosen and checked for it."""
    truncation_reward: float
    """The reward of an episode cut short: by the turn budget, the token budget, or a lost env host."""
    reward_fn: RewardFunction | None
    """The env's reward function, or ``None`` where the env scores with rewards of its own (another library's)."""

    def golden_actions(self) -> list[Action]:
        """The assistant turns that solve the current episode's task, to ``step`` one by one: the SFT warm start plays
        them, and the chat codec is checked on such an episode.

        Raises:
            AgentflyError: the env has no golden solution of this task.
        """
        ...

    def answer_action(self, answer: str) -> Action:
        """The assistant turn that answers ``answer`` at once, in the env's format (the warm start's guesses).

        Raises:
            AgentflyError: the env takes no such turn (an env whose tasks have no golden answers is never asked).
        """
        ...


CONTRACT_MEMBERS: tuple[str, ...] = (
    "tasks",
    "parser",
    "truncation_reward",
    "reward_fn",
    "golden_actions",
    "answer_action",
)
"""The members of :class:`TrainableEnv`, in the order a missing one is named."""
TASK_MEMBERS: tuple[str, ...] = ("__len__", "row", "validate", "golden")
"""The members of :class:`TaskRows`."""


def env_contract(env: gym.Env) -> TrainableEnv:
    """The env's contract members (:class:`TrainableEnv`), each read through ``env.get_wrapper_attr`` when it is used.

    Args:
        env: A Gymnasium env, wrapped or not (``gymnasium.make``'s, a pool's).

    Returns:
        A view of ``env``: ``env_contract(env).parser`` is ``env.get_wrapper_attr("parser")``; a member the env
        lacks raises :class:`~agentfly_envs.errors.EnvContractError`, naming it.
    """
    return cast("TrainableEnv", _ContractView(env))


def check_env_contract(env: gym.Env) -> None:
    """Checks that ``env`` has every member of :class:`TrainableEnv` (and its ``tasks`` every one of
    :class:`TaskRows`), of the right kind.

    Args:
        env: A Gymnasium env, wrapped or not. A vector env is not one: check its sub-envs.

    Raises:
        EnvContractError: one line naming the env and every member it lacks.
    """
    if isinstance(env, gym.vector.VectorEnv):
        raise EnvContractError(
            f"{type(env).__name__} is a vector env: check each of its sub-envs, which the trainer steps one by one"
        )
    problems = []
    for name in CONTRACT_MEMBERS:
        try:
            value = env.get_wrapper_attr(name)
        except AttributeError:
            problems.append(name)
            continue
        problems += _problems(name, value)
    if problems:
        raise EnvContractError(
            f"env {_env_name(env)} lacks what agentfly_train needs beyond Gymnasium's API: {', '.join(problems)}; "
            "see agentfly_envs.contract.TrainableEnv (docs/extending.md, 'The env contract')"
        )


def truncation_reward(env: gym.Env) -> float:
    """The reward a host (an env pool, a server, verl's agent loop) gives an episode it cuts short: the env's
    ``truncation_reward``, read through its wrappers, or 0.0 for an env without one (any Gymnasium env can be
    hosted; a trainer's env was checked by :func:`check_env_contract`)."""
    try:
        return float(env.get_wrapper_attr("truncation_reward"))
    except AttributeError:
        return 0.0


class _ContractView:
    """The members of :class:`TrainableEnv` of an env, each read through ``env.get_wrapper_attr`` when asked for."""

    __slots__ = ("_env",)

    def __init__(self, env: gym.Env) -> None:
        self._env = env

    def __getattr__(self, name: str) -> Any:
        if name not in CONTRACT_MEMBERS:
            raise AttributeError(f"{name!r} is not a member of the env contract ({', '.join(CONTRACT_MEMBERS)})")
        try:
            return self._env.get_wrapper_attr(name)
        except AttributeError:
            raise EnvContractError(
                f"env {_env_name(self._env)} has no {name!r}, which agentfly_train needs: see "
                "agentfly_envs.contract.TrainableEnv (docs/extending.md, 'The env contract')"
            ) from None


def _problems(name: str, value: Any) -> list[str]:
    """What is wrong with the env's member ``name`` (nothing: ``[]``)."""
    if name == "tasks":
        return [f"tasks.{member}" for member in TASK_MEMBERS if not hasattr(value, member)]
    if name == "parser" and not isinstance(value, Parser):
        return [f"parser (a {type(value).__name__}, not an agentfly_envs Parser: get_parser(name) gives one)"]
    if name == "truncation_reward" and not isinstance(value, numbers.Real):
        return [f"truncation_reward (a number, not {value!r})"]
    if name == "reward_fn" and value is not None and not callable(value):
        return [f"reward_fn (a function or None, not {value!r})"]
    if name in ("golden_actions", "answer_action") and not callable(value):
        return [f"{name} (a method, not {value!r})"]
    return []


def _env_name(env: gym.Env) -> str:
    """``"ID (Class)"``: the env's registered id (else its class) and the class of the env inside its wrappers."""
    spec = getattr(env, "spec", None)
    return f"{spec.id if spec is not None else type(env).__name__} ({type(env.unwrapped).__name__})"
