"""The start-up episode: one golden episode of the run's env (or a probe call of its first tool), played before
training to check the chat template on it, each reset and step under the rollouts' timeout, so a tool or reward that
hangs, or an infrastructure failure, stops the run in one line instead of stalling it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, SupportsFloat

import gymnasium as gym

from agentfly_envs.errors import AgentflyError
from agentfly_envs.runtime import LocalEnvPool
from agentfly_train.config.errors import ConfigError

if TYPE_CHECKING:
    from agentfly_envs.contract import TrainableEnv


def play_startup_episode(
    env: gym.Env, contract: TrainableEnv, env_id: str, sample_task: dict[str, Any], timeout: float
) -> tuple[dict[str, Any], list[tuple[Any, list[dict[str, Any]]]]]:
    """The sample episode of :func:`~agentfly_train.models.make_codec`: ``env`` (of ``env_id``; ``contract``, its
    :func:`~agentfly_envs.contract.env_contract`) reset to ``sample_task`` and stepped through the task's golden
    actions (after a call of the first tool, :func:`_probe_call`, where they call none), each reset and step waited
    on for ``timeout`` seconds (``actor_rollout_ref.rollout.env_step_timeout``) as the rollouts' ``local`` runtime
    does (:class:`_StartupEnvPool`).

    Returns:
        The reset's info, and each step's ``(action, messages)`` (no messages for the step that ends the episode).

    Raises:
        ConfigError: a reset or step ran past the timeout, or a step met an infrastructure failure (one line).
    """
    timed = _StartupEnvPool(env_id, env, timeout).take(1)[0]
    _, info = timed.reset(options={"task": sample_task})
    parser = contract.parser
    try:
        actions = contract.golden_actions()
    except AgentflyError:
        actions = ["The answer is 42."]
    if not any(parser.parse(action).calls for action in actions):  # the check needs a call and its result
        actions = [*_probe_call(parser, info["tools"]), *actions]
    steps = []
    for action in actions:
        _, _, terminated, truncated, step_info = _startup_step(timed, action, timeout)
        steps.append((action, [] if terminated or truncated else step_info["messages"]))
        if terminated or truncated:
            break
    return info, steps


def _probe_call(parser: Any, tools: list[dict[str, Any]]) -> list[Any]:
    """A call of the first tool, with arguments of the types its schema asks for, in the parser's format."""
    from agentfly_envs.parsers import ToolCall

    if not tools:
        return []
    function = tools[0]["function"]
    values = {"integer": 1, "number": 1, "boolean": True, "array": [], "object": {}}
    properties = function.get("parameters", {}).get("properties", {})
    arguments = {name: values.get(spec.get("type"), "1") for name, spec in properties.items()}
    return [parser.format_calls([ToolCall(function["name"], arguments)])]


class _StartupEnvPool(LocalEnvPool):
    """A :class:`~agentfly_envs.runtime.LocalEnvPool` of one given env, the start-up episode's: each reset and step
    runs in a daemon thread of its own, abandoned past ``step_timeout`` (the rollouts' ``local`` runtime)."""

    def __init__(self, env_id: str, env: gym.Env, step_timeout: float) -> None:
        super().__init__(env_id, {}, step_timeout)
        self._env: gym.Env | None = env

    def make_env(self) -> gym.Env:
        """The given env; asked again, its reset ran past the timeout (a run has no second start-up env).

        Raises:
            ConfigError: the reset ran past the timeout.
        """
        env, self._env = self._env, None
        if env is None:
            raise _ran_past("reset", self.step_timeout, None)
        return env


def _startup_step(timed: gym.Env, action: Any, timeout: float) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
    """``timed.step(action)`` of the start-up episode (``timed``: its :class:`_StartupEnvPool` env).

    Raises:
        ConfigError: the step ran past ``timeout`` (naming the tool it was in), or met an infrastructure failure.
    """
    result = timed.step(action)
    info = result[4]
    if info.get("remote_failure") == "timeout":
        raise _ran_past("step", timeout, info["stuck_tool"])
    if "infra_failure" in info:
        raise ConfigError(
            f'the start-up episode met an infrastructure failure: "{info["infra_failure"]}"; the run checks its chat '
            "template on one working episode: fix it and run again"
        )
    return result


def _ran_past(call: str, timeout: float, tool: str | None) -> ConfigError:
    """The start-up episode's ``call`` (``reset`` or ``step``) ran past ``timeout`` seconds, in ``tool`` if known."""
    where = f" (in tool {tool!r})" if tool else ""
    return ConfigError(
        f"the start-up episode's {call} ran past actor_rollout_ref.rollout.env_step_timeout={timeout:g} s{where}; "
        "a tool or reward that hangs would stall every episode: fix it, or raise the timeout"
    )
