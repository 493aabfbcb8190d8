"""The LLM judge's settings (``agent.reward_name=judge|rubric|group_rank``, ``reward.judge.*``): each mistake is one
line naming the key, before anything loads; an unreachable judge stops the run's start-up with one line."""

from __future__ import annotations

import pytest

from agentfly_train.build import judge_rewards
from agentfly_train.config import QUICKSTART, ConfigError, load_config
from tests.helpers.processes import free_port


def _config(*overrides: str):
    return load_config(list(overrides), [QUICKSTART])


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["agent.reward_name=judge"],
            "agent.reward_name=judge needs reward.judge.url, an OpenAI-compatible base URL",
        ),
        (
            [
                "agent.reward_name=judge",
                "reward.judge.url=http://x/v1",
                "reward.judge.template='Grade {answer} of {q}'",
            ],
            "reward.judge.template names the unknown field {q}; a template may name {task}, {answer}, {trajectory}, "
            "{reference}",
        ),
        (
            ["agent.reward_name=group_rank", "reward.judge.url=http://x/v1", "reward.judge.template='{trajectory}'"],
            "reward.judge.template names the unknown field {trajectory}; a template may name {task}, {reference}, "
            "{answers}, {count}",
        ),
        (
            ["agent.reward_name=judge", "reward.judge.url=http://x/v1", "reward.judge.template='Grade {answer'"],
            "reward.judge.template is not a format string",
        ),
        (["agent.reward_name=rubric", "reward.judge.url=http://x/v1"], "reward_name=rubric needs reward.judge.rubric"),
        (
            ["agent.reward_name=rubric", "reward.judge.url=http://x/v1", "reward.judge.rubric=[{name: ok}]"],
            "reward.judge.rubric[0] (ok) has no description",
        ),
        (
            [
                "agent.reward_name=rubric",
                "reward.judge.url=http://x/v1",
                "reward.judge.rubric=[{name: a, description: b, weight: 0}]",
            ],
            "reward.judge.rubric[0] (a) needs a weight > 0, got 0",
        ),
        (
            [
                "agent.reward_name=rubric",
                "reward.judge.url=http://x/v1",
                "reward.judge.rubric=[{name: a, description: b}, {name: a, description: c}]",
            ],
            "reward.judge.rubric names a criterion twice: ['a']",
        ),
        (
            ["agent.reward_name=rubric", "reward.judge.url=http://x/v1", "reward.judge.rubric=[{name: a b, text: c}]"],
            "reward.judge.rubric[0] has unknown keys ['text']",
        ),
        (
            ["agent.reward_name=rubric", "reward.judge.url=http://x/v1", "reward.judge.rubric=helpfull"],
            "reward.judge.rubric='helpfull' is neither a registered rubric (helpful_correct) nor a .yaml file",
        ),
        (
            ["agent.reward_name=judge", "reward.judge.url=http://x/v1", "reward.judge.rubric=helpful_correct"],
            "reward.judge.rubric is read by reward_name=rubric only, not judge",
        ),
        (
            ["agent.reward_name=judge", "reward.judge.url=http://x/v1", "reward.judge.max_tokens=64"],
            "reward.judge.max_tokens=64 leaves the judge no room to reason; give it at least 104",
        ),
        (
            ["agent.reward_name=judge", "reward.judge.url=rollout"],
            "reward.judge.url=rollout judges with the run's own vLLM server: set actor_rollout_ref.rollout.mode=server",
        ),
        (
            ["agent.reward_name=judge", "reward.judge.url=http://x/v1", "reward.judge.timeout_s=0"],
            "reward.judge.timeout_s",
        ),
        (
            ["agent.reward_name=judge", "reward.judge.url=http://x/v1", "reward.judge.server_args=[--enforce-eager]"],
            "reward.judge.server_args sets the judge server the run starts (reward.judge.url=reference); "
            "reward.judge.url=http://x/v1 names a server started by you",
        ),
    ],
)
def test_a_bad_judge_setting_is_one_line_naming_the_key(overrides, message):
    with pytest.raises(ConfigError) as raised:
        _config(*overrides)
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_a_rubric_file_is_read(tmp_path):
    rubric = tmp_path / "rubric.yaml"
    rubric.write_text(
        "- {name: correct, description: Right answer., weight: 3}\n- {name: kind, description: Polite.}\n"
    )
    config = _config("agent.reward_name=rubric", "reward.judge.url=http://x/v1", f"reward.judge.rubric={rubric}")
    from agentfly_train.config.judge import judge_of

    judge = judge_of(config)
    assert [(c.name, c.weight) for c in judge.criteria] == [("correct", 3.0), ("kind", 1.0)]
    assert '"scores":\\{"correct":(10|9|8|7|6|5|4|3|2|1|0),"kind":(10|' in judge.pattern
    rubric.write_text("- [not, a, mapping]\n")
    with pytest.raises(ConfigError, match=r"reward.judge.rubric\[0\] must be a mapping"):
        _config("agent.reward_name=rubric", "reward.judge.url=http://x/v1", f"reward.judge.rubric={rubric}")


def test_an_unreachable_judge_stops_the_start_up_with_one_line():
    pytest.importorskip("openai", reason="the judge extra (openai) is not installed")
    url = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(ConfigError) as raised:
        judge_rewards(_config("agent.reward_name=judge", f"reward.judge.url={url}", "reward.judge.retries=0"))
    message = str(raised.value)
    assert message.startswith(f"reward.judge.url: the judge at {url} does not answer (APIConnectionError); start")
    assert "\n" not in message


def test_a_judge_reward_leaves_the_env_its_own_reward():
    from agentfly_train.data import env_kwargs

    config = _config("agent.reward_name=judge", "reward.judge.url=http://x/v1")
    assert config.judged and config.reward_name is None and "reward" not in env_kwargs(config)


def test_the_policy_judges_itself_on_the_runs_own_vllm_server():
    from agentfly_train.config.judge import judge_of

    config = _config(
        "agent.reward_name=group_rank", "reward.judge.url=rollout", "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.rollout.mode=server", "actor_rollout_ref.rollout.server_port=8123",
    )  # fmt: skip
    judge = judge_of(config)
    assert judge.kind == "group_rank" and judge.client.settings.url == "http://127.0.0.1:8123/v1"


def test_the_reference_judge_server_takes_the_devices_arguments_unless_given_its_own():
    from agentfly_train.config.judge import judge_of
    from agentfly_train.judge_server import server_args

    config = _config("agent.reward_name=judge", "reward.judge.url=reference")
    assert judge_of(config).client.settings.url == "reference"  # checked before the run starts its server
    assert judge_of(config, "http://127.0.0.1:9/v1").client.settings.url == "http://127.0.0.1:9/v1"
    assert server_args(config, "cpu")[:3] == ["--dtype", "float32", "--enforce-eager"]
    assert server_args(config, "cuda") == ["--gpu-memory-utilization", "0.2"]
    given = _config("agent.reward_name=judge", "reward.judge.url=reference", "reward.judge.server_args=[--seed,3]")
    assert server_args(given, "cuda") == ["--seed", "3"]


@pytest.mark.slow  # the server's vLLM import alone takes 20 s
def test_a_reference_judge_server_that_cannot_start_is_one_line_naming_its_log(tmp_path):
    pytest.importorskip("vllm", reason="vLLM is not installed")
    from agentfly_train.judge_server import start_judge_server

    log = tmp_path / "judge_server.log"
    with pytest.raises(ConfigError) as raised:
        start_judge_server(tmp_path / "no-model-here", log, ["--no-such-flag"])
    message = str(raised.value)
    assert message.startswith("reward.judge.url=reference: the judge's vLLM server exited (")
    assert f"its log {log} ends: " in message and "reward.judge.server_args" in message and "\n" not in message
    assert "--no-such-flag" in message  # vLLM's own word on what it refused


def test_a_server_the_run_launched_ends_when_the_run_is_killed(tmp_path):
    """What keeps a killed run's judge server from holding its GPU: the launched process gets SIGTERM when the
    process that launched it dies (here a child that launches ``http.server`` and is then SIGKILLed)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from agentfly_train.vllm_process import launch\n"
        f"server = launch('http.server', ['--bind', '127.0.0.1', '0'], Path({str(tmp_path / 'server.log')!r}))\n"
        "print(server.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    run = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    server = int(run.stdout.readline())
    time.sleep(0.5)
    os.kill(server, 0)  # running
    run.send_signal(signal.SIGKILL)
    run.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(server, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    os.killpg(server, signal.SIGKILL)
    raise AssertionError("the launched server outlived the process that launched it")
