"""The verl agent loop (agentfly_envs/adapters/verl.py) under verl's own classes on CPU: its dataset, collate
function and ``AgentLoopWorker``; only the model's text is scripted (docs/other-libraries.md, "verl's agent loop")."""

from __future__ import annotations

import asyncio
import itertools
import json
import re
from pathlib import Path

import gymnasium as gym
import pytest

import agentfly_envs  # noqa: F401  (registers the env ids)
from tests.helpers.paths import REPO_ROOT

pytest.importorskip("verl.experimental.agent_loop", reason="needs verl 0.9 (installed by .ci/run)")
from omegaconf import OmegaConf
from verl import DataProto
from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn
from verl.workers.rollout.replica import TokenOutput

DOC = (REPO_ROOT / "docs" / "other-libraries.md").read_text()
SECTION = DOC[DOC.index("## verl's agent loop") : DOC.index("## Serving an env")]
LOGPROB = -0.5
"""What the scripted server says each sampled token's log-probability is."""


def block(language: str) -> str:
    """The section's first fenced block in ``language`` (``""``: a bare fence)."""
    return next(text for lang, text in re.findall(r"^```(\w*)\n(.*?)^```$", SECTION, re.S | re.M) if lang == language)


class ScriptedServer:
    """verl's LLM server as the loop sees it (``generate``: prompt ids in, sampled ids out), sampling given turns:
    each trajectory's turns are picked by the task's question in its prompt."""

    def __init__(self, tokenizer, turns_by_question: dict[str, list[str]]) -> None:
        self.tokenizer, self.turns_by_question = tokenizer, turns_by_question
        self.calls: dict[str, list[tuple[list[int], list[int]]]] = {}  # question -> (prompt ids, sampled ids)

    async def generate(self, request_id: str, prompt_ids: list[int], sampling_params: dict, **_) -> TokenOutput:
        prompt = self.tokenizer.decode(prompt_ids)
        ((question, turns),) = [(q, turns) for q, turns in self.turns_by_question.items() if q in prompt]
        calls = self.calls.setdefault(question, [])
        text = turns[len(calls)] + self.tokenizer.eos_token
        sampled = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        calls.append((list(prompt_ids), sampled))
        return TokenOutput(token_ids=sampled, log_probs=[LOGPROB] * len(sampled))


@pytest.fixture(scope="module")
def verl_setup(tmp_path_factory, gsm8k_sample):
    """The documented agent-loop file and dataset rows (data files pointed at the test's sample), verl's
    generated trainer config with the documented lines, and a tiny checkpoint as the model."""
    from agentfly_train.tiny_model import build_tiny_checkpoint

    directory = tmp_path_factory.mktemp("verl")
    loops = directory / "agentfly_agent_loops.yaml"
    loops.write_text(block("yaml").replace("data/gsm8k/train.jsonl", str(gsm8k_sample)))
    code = block("python").replace("data/gsm8k/train.jsonl", str(gsm8k_sample))
    exec(code.replace("agentfly_gsm8k.parquet", str(directory / "agentfly_gsm8k.parquet")), {})
    import verl

    config = OmegaConf.load(Path(verl.__file__).parent / "trainer/config/_generated_ppo_trainer.yaml")
    overrides = [line.replace("agentfly_agent_loops.yaml", str(loops)) for line in block("").split()]
    overrides = [
        line.replace("agentfly_gsm8k.parquet", str(directory / "agentfly_gsm8k.parquet")) for line in overrides
    ]
    config.merge_with_dotlist(
        [
            *overrides,
            f"actor_rollout_ref.model.path={build_tiny_checkpoint(directory / 'model')}",
            "actor_rollout_ref.rollout.name=vllm",
            "actor_rollout_ref.rollout.prompt_length=768",
            "actor_rollout_ref.rollout.response_length=512",
            "data.max_prompt_length=768",
        ]
    )
    return config


def test_the_agent_loop_scores_a_golden_episode_1_and_a_wrong_answer_0(verl_setup, gsm8k_sample):
    config = verl_setup
    worker = AgentLoopWorker(config, llm_client=None)
    dataset = RLHFDataset(config.data.train_files, worker.tokenizer, config.data)
    batch = DataProto.from_single_dict(collate_fn([dataset[0], dataset[1]]))

    env = gym.make("agentfly/GSM8K-Calc", data_files=str(gsm8k_sample))
    turns, questions = [], []
    for index in (0, 1):
        _, info = env.reset(options={"index": index})
        questions.append(info["task"]["question"])
        turns.append([a if isinstance(a, str) else json.dumps(a) for a in env.unwrapped.golden_actions()])
    golden, wrong = turns[0], [*turns[1][:1], "The answer is \\boxed{123456}."]
    for actions, expected in ((golden, 1.0), (wrong, 0.0)):  # what the env itself gives these turns
        env.reset(options={"index": 0 if actions is golden else 1})
        assert [env.step(action)[1] for action in actions][-1] == expected
    worker.llm_client = server = ScriptedServer(worker.tokenizer, dict(zip(questions, (golden, wrong), strict=True)))

    output = asyncio.run(worker.generate_sequences(batch))

    assert output.batch["rm_scores"].sum(-1).tolist() == [1.0, 0.0]
    assert len(golden) > 1  # a multi-turn episode: tool output between sampled turns
    for row, question in enumerate(questions):
        calls = server.calls[question]
        responses, mask = output.batch["responses"][row], output.batch["response_mask"][row]
        sampled = [token for _, ids in calls for token in ids]
        assert responses[mask.bool()].tolist() == sampled  # the mask covers exactly the model's tokens
        assert 0 < len(sampled) < int(output.batch["attention_mask"][row, -responses.shape[0] :].sum())
        logprobs = output.batch["rollout_log_probs"][row]
        assert set(logprobs[mask.bool()].tolist()) == {LOGPROB}
        for (prompt, ids), (next_prompt, _) in itertools.pairwise(calls):  # token in, token out
            assert next_prompt[: len(prompt) + len(ids)] == prompt + ids
        prompt = output.batch["prompts"][row]
        assert prompt[prompt != worker.tokenizer.pad_token_id].tolist() == calls[0][0]
    tool_text = worker.tokenizer.decode(output.batch["responses"][0][output.batch["response_mask"][0] == 0])
    env.reset(options={"index": 0})
    assert env.step(golden[0])[0] in tool_text  # the env's tool output, masked out
    assert list(output.non_tensor_batch["finish_reason"]) == ["stop", "stop"]


def test_a_turn_cut_by_the_response_budget_ends_the_episode_unscored(verl_setup, gsm8k_sample):
    config = verl_setup.copy()
    config.actor_rollout_ref.rollout.response_length = 8
    worker = AgentLoopWorker(config, llm_client=None)
    dataset = RLHFDataset(config.data.train_files, worker.tokenizer, config.data)
    env = gym.make("agentfly/GSM8K-Calc", data_files=str(gsm8k_sample))
    _, info = env.reset(options={"index": 0})
    golden = [a if isinstance(a, str) else json.dumps(a) for a in env.unwrapped.golden_actions()]
    worker.llm_client = ScriptedServer(worker.tokenizer, {info["task"]["question"]: golden[-1:]})  # the answer

    output = asyncio.run(worker.generate_sequences(DataProto.from_single_dict(collate_fn([dataset[0]]))))

    assert output.batch["response_mask"].sum().item() == 8 and output.batch["rm_scores"].sum().item() == 0.0
    assert list(output.non_tensor_batch["finish_reason"]) == ["length"]


@pytest.mark.parametrize(("fails", "excluded"), [(1, False), (99, True)])
def test_an_infrastructure_failure_is_replayed_on_a_fresh_env_and_marked_when_every_attempt_fails(
    verl_setup, gsm8k_sample, tmp_path, monkeypatch, fails, excluded
):
    """A judge that fails (an InfrastructureError from the reward) makes the loop play the episode again on a fresh
    env; when every attempt fails, the output says so and none of its tokens is trained."""
    from agentfly_envs import InfrastructureError
    from agentfly_envs.rewards import REWARDS

    score, calls = REWARDS.get("math_reward_string_equal"), []

    def flaky_judge(response: str, ground_truth: object):
        calls.append(response)
        if len(calls) <= fails:
            raise InfrastructureError("the judge did not answer")
        return score(response, ground_truth)

    monkeypatch.setitem(REWARDS._entries, "flaky_judge", flaky_judge)
    monkeypatch.setattr("agentfly_envs.adapters.verl._IDLE_ENVS", {})  # no env kept from another case's judge
    loops = tmp_path / "loops.yaml"
    loops.write_text(
        "- name: agentfly\n  _target_: agentfly_envs.adapters.verl.AgentflyAgentLoop\n  env_id: agentfly/GSM8K-Calc\n"
        f"  env_kwargs: {{data_files: {gsm8k_sample}, reward: flaky_judge}}\n"
    )
    config = verl_setup.copy()
    config.actor_rollout_ref.rollout.agent.agent_loop_config_path = str(loops)
    worker = AgentLoopWorker(config, llm_client=None)
    dataset = RLHFDataset(config.data.train_files, worker.tokenizer, config.data)
    env = gym.make("agentfly/GSM8K-Calc", data_files=str(gsm8k_sample))
    _, info = env.reset(options={"index": 0})
    golden = [a if isinstance(a, str) else json.dumps(a) for a in env.unwrapped.golden_actions()]
    worker.llm_client = ScriptedServer(worker.tokenizer, {info["task"]["question"]: golden * 3})

    output = asyncio.run(worker.generate_sequences(DataProto.from_single_dict(collate_fn([dataset[0]]))))

    failure = "reward flaky_judge: the judge did not answer"
    assert len(calls) == (3 if excluded else 2)  # 2 retries by default
    assert list(output.non_tensor_batch["failed_attempts"]) == [[failure] * (2 if excluded else 1)]
    assert list(output.non_tensor_batch.get("infra_failure", [None])) == [failure if excluded else None]
    trained = output.batch["response_mask"].sum().item()
    assert (trained == 0) if excluded else (trained > 0 and output.batch["rm_scores"].sum().item() == 1.0)
