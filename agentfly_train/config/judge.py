"""The LLM judge a configuration names (``agent.reward_name=judge|rubric|group_rank`` and ``reward.judge.*``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentfly_train.config.errors import ConfigError
from agentfly_train.config.schema import REFERENCE_JUDGE, SELF_JUDGE, TrainConfig

if TYPE_CHECKING:
    from agentfly_envs.judge import Judge


def judge_of(config: TrainConfig, reference_url: str | None = None) -> Judge | None:
    """The configured judge (not yet connected: :meth:`~agentfly_envs.judge.JudgeClient.check` does that), or
    ``None`` when the env's own reward scores the episodes. ``reference_url``: with ``reward.judge.url=reference``,
    the URL of the server the run started (:func:`~agentfly_train.judge_server.serve_reference`; ``None`` while the
    configuration is checked, before it starts).

    Raises:
        ConfigError: no ``reward.judge.url``; ``url=rollout`` without a vLLM server run; ``server_args`` for a
            server the run does not start; a template naming an unknown field; a malformed or missing rubric; a
            ``max_tokens`` too small for the JSON (one line each).
    """
    from agentfly_envs.judge import JudgeClient, JudgeConfigError, JudgeSettings, make_judge

    if not config.judged:
        return None
    judge, rollout = config.reward.judge, config.actor_rollout_ref.rollout
    name = config.agent.reward_name
    url = judge.url
    if url is None:
        raise ConfigError(
            f"agent.reward_name={name} needs reward.judge.url, an OpenAI-compatible base URL (a vLLM server: "
            f"http://host:port/v1), {SELF_JUDGE} for the run's own vLLM server, or {REFERENCE_JUDGE} for one the run "
            "starts on its reference policy"
        )
    if judge.server_args is not None and url != REFERENCE_JUDGE:
        raise ConfigError(
            f"reward.judge.server_args sets the judge server the run starts (reward.judge.url={REFERENCE_JUDGE}); "
            f"reward.judge.url={url} names a server started by you"
        )
    if url == SELF_JUDGE:
        if rollout.mode != "server":
            raise ConfigError(
                f"reward.judge.url={SELF_JUDGE} judges with the run's own vLLM server: set "
                "actor_rollout_ref.rollout.mode=server, or give the judge's URL"
            )
        url = f"http://{rollout.server_host}:{rollout.server_port}/v1"
    elif url == REFERENCE_JUDGE:
        url = reference_url or url
    settings = JudgeSettings(
        url, judge.model, judge.max_tokens, judge.temperature, judge.timeout_s, judge.retries, judge.max_concurrency,
        judge.cache_size,
    )  # fmt: skip
    try:
        return make_judge(name, JudgeClient(settings), judge.template, judge.rubric)
    except JudgeConfigError as error:
        raise ConfigError(str(error)) from None
