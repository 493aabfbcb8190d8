"""Agentfly envs in verl's multi-turn agent loop (verl >= 0.9, ``verl.experimental.agent_loop``).

verl runs one :class:`~verl.experimental.agent_loop.AgentLoopBase` per trajectory, picked by the dataset row's
``agent_name`` from its agent-loop registry; the loop samples turns from verl's LLM server
(``server_manager.generate``, token ids in and out) and returns an ``AgentLoopOutput``. :class:`AgentflyAgentLoop` is
such a loop that plays an agentfly env: the env renders the opening (system prompt, task, tool schemas), parses each
sampled turn, runs its tools and scores the answer; the loop only turns text into tokens with verl's own
continuous-token builder. Its output holds the prompt ids, the response ids (sampled turns and the env's messages),
the response mask (1 on sampled tokens only), the sampled log-probabilities when verl asks for them, and the env's
reward as ``reward_score`` (verl then puts it on the last response token, ``rm_scores``, and needs no reward
function). Tools are the env's, not verl's ``BaseTool``\\ s: the env parses the turn in its own format (hermes, ReAct,
code...) and counts the agent's mistakes, which verl's tool parser would not see.

A verl user lists the loop in an agent-loop config file (``actor_rollout_ref.rollout.agent.agent_loop_config_path``)::

    - name: agentfly
      _target_: agentfly_envs.adapters.verl.AgentflyAgentLoop
      env_id: agentfly/GSM8K-Calc
      env_kwargs: {data_files: gsm8k/train.jsonl}

and gives it rows naming a task of that env (:func:`dataset_rows` writes them: ``agent_name``, the opening as
``prompt``, ``extra_info.index``). Envs are kept between trajectories (one per trajectory running at a time).

This module imports verl (and so torch); ``agentfly_envs`` itself never imports it.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from typing import Any
from uuid import uuid4

import gymnasium as gym

from agentfly_envs.contract import truncation_reward
from agentfly_envs.errors import InfrastructureError, one_line

try:
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register
    from verl.utils.profiler import simple_timer
except ImportError as error:
    raise ImportError("the verl adapter needs verl >= 0.9 (pip install verl)") from error

AGENT_NAME = "agentfly"
"""The name the loop is registered under in verl's agent-loop registry (a dataset row's ``agent_name``)."""

_IDLE_ENVS: dict[str, list[gym.Env]] = {}
"""Envs between trajectories, by their ``(env_id, env_kwargs)`` as JSON."""


@register(AGENT_NAME)
class AgentflyAgentLoop(AgentLoopBase):
    """A verl agent loop playing one episode of an agentfly env (see the module docstring).

    Args:
        env_id: A registered Gymnasium id (``agentfly/...``, or ``agentfly/Remote`` for a served env).
        env_kwargs: ``gymnasium.make`` keyword arguments.
        *args, **kwargs: What verl passes every agent loop (its config, the LLM server, the tokenizer...).
    """

    def __init__(
        self, *args: Any, env_id: str, env_kwargs: Mapping[str, Any] | None = None, retries: int = 2, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.env_id = env_id
        self.retries = retries
        self.env_kwargs = (
            OmegaConf.to_container(env_kwargs) if OmegaConf.is_config(env_kwargs) else dict(env_kwargs or {})
        )
        self.response_length: int = self.rollout_config.response_length

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        """Plays the episode of the row's task: ``extra_info["index"]`` (a row of the env's tasks) or
        ``extra_info["task"]`` (a task row, or its JSON).

        Returns:
            verl's ``AgentLoopOutput``: ``prompt_ids`` (the rendered opening), ``response_ids`` (at most
            ``rollout.response_length`` tokens: sampled turns and the env's messages), ``response_mask`` (1 = sampled),
            ``response_logprobs`` (when the server returns them), ``reward_score`` (the env's reward; its truncation
            reward when the response budget ends the episode, a turn cut by it going unscored), ``num_turns``, and in
            ``extra_fields`` the env's ``reward_components``, ``error_counts``, ``finish_reason`` (``stop``,
            ``max_turns`` or ``length``) and ``failed_attempts`` (the infrastructure failures of earlier attempts).
            An episode whose every attempt met an infrastructure failure also has ``infra_failure`` (the last) and
            an all-zero ``response_mask``.
        """
        options = _reset_options(kwargs.get("extra_info"))
        key = json.dumps([self.env_id, self.env_kwargs], sort_keys=True, default=str)
        idle = _IDLE_ENVS.setdefault(key, [])
        failed: list[str] = []
        while True:
            env = idle.pop() if idle else gym.make(self.env_id, **self.env_kwargs)
            try:
                output = await self._play(env, options, sampling_params)
            except InfrastructureError as error:  # its reset failed
                output = await self._unplayed(kwargs.get("raw_prompt") or [])
                output.extra_fields["infra_failure"] = f"reset: {one_line(error)}"
            failure = output.extra_fields.get("infra_failure")
            if failure is None:
                idle.append(env)
            else:
                _discard(env)
            if failure is None or len(failed) >= self.retries:
                break
            failed.append(failure)
        output.extra_fields["failed_attempts"] = failed
        if failure is not None:
            output.response_mask = [0] * len(output.response_mask)
        return output

    async def _unplayed(self, messages: list[dict[str, Any]]) -> AgentLoopOutput:
        """The output of an episode whose reset failed: the row's prompt, no response."""
        prompt_ids = await self.ct_build_initial_tokens(messages) if messages else []
        return AgentLoopOutput(
            prompt_ids=prompt_ids, response_ids=[], response_mask=[], reward_score=0.0, num_turns=1,
            extra_fields={"reward_components": {}, "error_counts": {}, "finish_reason": "length"},
        )  # fmt: skip

    async def _play(self, env: gym.Env, options: dict[str, Any], sampling_params: dict[str, Any]) -> AgentLoopOutput:
        _, info = await self.loop.run_in_executor(None, lambda: env.reset(options=options))
        messages = list(info["messages"])
        tools = _template_tools(env, info["tools"])
        metrics: dict[str, Any] = {}
        token_ids = await self.ct_build_initial_tokens(messages, tools=tools)
        response_mask: list[int] = []
        logprobs: list[float] = []  # of the response tokens (0 on the env's), when the server returns them
        request_id = uuid4().hex
        reward, finish, step_info, turns = truncation_reward(env), "length", {}, 0
        while len(response_mask) < self.response_length:
            with simple_timer("generate_sequences", metrics):
                output = await self.server_manager.generate(
                    request_id=request_id, prompt_ids=token_ids, sampling_params=sampling_params
                )
            merged, response_mask, sampled_logprobs = await self.ct_merge_assistant_token(
                token_ids,
                output.token_ids,
                response_mask,
                logprobs if logprobs or output.log_probs else None,
                output.log_probs or None,
            )
            logprobs = sampled_logprobs or []
            token_ids, turns = merged.token_ids, turns + 1
            if len(response_mask) > self.response_length:  # a turn cut by the budget ends the episode unscored
                break
            text = self.tokenizer.decode(output.token_ids, skip_special_tokens=True)
            with simple_timer("tool_calls", metrics):
                _, step_reward, terminated, truncated, step_info = await self.loop.run_in_executor(None, env.step, text)
            if terminated or truncated:
                reward, finish = float(step_reward), "stop" if terminated else "max_turns"
                break
            before = [*messages, {"role": "assistant", "content": text}]
            messages = [*before, *step_info["messages"]]
            merged, response_mask, sampled_logprobs = await self.ct_merge_context_msg(
                before, messages, token_ids, response_mask, logprobs or None, tools=tools
            )
            logprobs = sampled_logprobs or []
            token_ids = merged.token_ids
        prompt_length = len(token_ids) - len(response_mask)
        return AgentLoopOutput(
            prompt_ids=token_ids[:prompt_length],
            response_ids=token_ids[prompt_length:][: self.response_length],
            response_mask=response_mask[: self.response_length],
            response_logprobs=logprobs[: self.response_length] if logprobs else None,
            reward_score=reward,
            num_turns=1 + 2 * turns,
            metrics=metrics,
            extra_fields={
                "reward_components": dict(step_info.get("reward_components", {})),
                "error_counts": dict(step_info.get("error_counts", {})),
                "finish_reason": finish,
                **({"infra_failure": step_info["infra_failure"]} if "infra_failure" in step_info else {}),
            },
        )


def _discard(env: gym.Env) -> None:
    """Closes an env that met an infrastructure failure (it is not reused); a failure to close is not the caller's."""
    with contextlib.suppress(Exception):  # an env whose server or world died may fail to close
        env.close()


def dataset_rows(env_id: str, env_kwargs: Mapping[str, Any] | None = None, agent_name: str = AGENT_NAME) -> list[dict]:
    """One verl dataset row per task of the env (write them with ``pandas.DataFrame(rows).to_parquet(path)``).

    Each row has ``prompt`` (the env's opening messages: verl's dataset filters by their length and logs them),
    ``agent_name``, ``data_source`` (the env id), ``reward_model`` (an empty ground truth: the env scores) and
    ``extra_info = {"index": i}``, the task :class:`AgentflyAgentLoop` plays.
    """
    env = gym.make(env_id, **dict(env_kwargs or {}))
    rows = []
    for index in range(len(env.unwrapped.tasks)):
        _, info = env.reset(options={"index": index})
        rows.append(
            {
                "data_source": env_id,
                "agent_name": agent_name,
                "prompt": info["messages"],
                "reward_model": {"style": "rule", "ground_truth": ""},
                "extra_info": {"index": index},
            }
        )
    env.close()
    return rows


def _reset_options(extra_info: Mapping[str, Any] | None) -> dict[str, Any]:
    """The env's reset options for a row's ``extra_info``.

    Raises:
        ValueError: neither ``index`` nor ``task`` is given.
    """
    extra_info = dict(extra_info or {})
    if "task" in extra_info:
        task = extra_info["task"]
        return {"task": json.loads(task) if isinstance(task, str) else dict(task)}
    if "index" in extra_info:
        return {"index": int(extra_info["index"])}
    raise ValueError(
        "a row for the agentfly agent loop names its task in extra_info: {'index': i} or {'task': row} "
        "(agentfly_envs.adapters.verl.dataset_rows writes such rows)"
    )


def _template_tools(env: gym.Env, tools: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """The tool schemas for the chat template: those of a parser that leaves them to the template (hermes), else
    ``None`` (the env's system prompt already describes them)."""
    parser = getattr(env.unwrapped, "parser", None)
    return tools if tools and parser is not None and parser.instructions(tools) is None else None
