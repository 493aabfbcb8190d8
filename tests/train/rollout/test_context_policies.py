"""Context policies (``agent.context.policy``) and step-wise training (``agent.context.step_wise``): each turn trains
as its own row in exactly the context it was sampled in, token for token, on the test tokenizer and on real
tokenizers (``../shared/tools/fetch-tokenizers``; skipped where they were not fetched), and each policy's contexts
hold what it says: a window of the last turns, old observations masked, or a summary the policy wrote."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import gymnasium as gym
import pytest

import agentfly_envs  # noqa: F401  (registers the envs)
from agentfly_train.config import ConfigError, ContextConfig
from agentfly_train.context_policies import SUMMARY_HEADER, context_policy
from agentfly_train.generation import Generation, SamplingParams
from agentfly_train.rollout import ChatCodec, RolloutBudgets, run_rollouts, training_rows, trajectory_record
from agentfly_train.rollout.stream import BatchedRequests, EpisodeStream, run_to_end
from tests.helpers.runs import quickstart_config

TURNS, WINDOW = 7, 3
TOKENIZERS = Path.home() / ".cache" / "agentfly-tokenizers"
FAMILIES = {  # family: (env parser, agent.template)
    "qwen3": ("tool_calls", None),
    "llama3_1": ("react", "llama3_1"),
    "gemma3": ("react", None),
    "gptoss": ("tool_calls", "gptoss"),
}
SCREENSHOTS = ["agent.env=agentfly/MiniWoB-ClickCheckboxes", "agent.agent_type=gui",
               "agent.env_kwargs={obs: screenshot}", "actor_rollout_ref.model.path=agentfly:tiny-vl"]  # fmt: skip
POLICIES = ["full", "window", "mask_observations", "summarize"]


class CallingPolicy:
    """Plays the same tool call every turn and, to a summary request (its prompt holds the summary instruction),
    a numbered summary; keeps every request's prompt and the tokens it answered with."""

    def __init__(self, codec: ChatCodec, turn: list[int]) -> None:
        self.codec, self.turn = codec, turn
        self.turns: list[tuple[list[int], list[int]]] = []
        self.summaries: list[tuple[list[int], str]] = []

    def generate(self, prompts, max_new_tokens, params):
        out = []
        for prompt, budget in zip(prompts, max_new_tokens, strict=True):
            if "You are summarising" in self.codec.tokenizer.decode(prompt):
                text = f"summary {len(self.summaries) + 1}: the agent multiplied again"
                self.summaries.append((list(prompt), text))
                tokens = [*self.codec.encode(text), self.codec.eos_token_id][:budget]
            else:
                tokens = self.turn[:budget]
                self.turns.append((list(prompt), tokens))
            out.append(Generation(tokens, [-0.5] * len(tokens), True))
        return out


def _budgets(policy: str) -> RolloutBudgets:
    context = context_policy(ContextConfig(policy=policy, window=WINDOW, summary_tokens=64))
    return RolloutBudgets(TURNS, max_tokens_per_turn=256, response_length=16384, context=context, step_wise=True)


def _play(codec: ChatCodec, env: gym.Env, task, policy: str, streamed: bool = False):
    """One episode of :data:`TURNS` calls under ``policy``, turn-synchronously or through the episode stream."""
    player = CallingPolicy(codec, codec.turn_ids(env.unwrapped.golden_actions()[0]))
    with ThreadPoolExecutor(1) as executor:
        if streamed:
            stream = EpisodeStream(BatchedRequests(player), codec, _budgets(policy), executor)
            [trajectory] = run_to_end(stream, [env], [task], SamplingParams(), keys=[0])
        else:
            [trajectory] = run_rollouts([env], [task], player, codec, _budgets(policy), SamplingParams(), executor)
    return trajectory, player


def _check(codec: ChatCodec, trajectory, player: CallingPolicy, policy: str) -> None:
    """The rows trained are the requests sampled, token for token, and each context is the policy's."""
    assert trajectory.num_turns == TURNS and trajectory.finish_reason == "max_turns"
    rows = training_rows([trajectory], TURNS)
    assert list(zip(rows["prompt_ids"], rows["completion_ids"], strict=True)) == player.turns
    assert rows["env_mask"] == [[1] * len(turn) for _, turn in player.turns]
    done, spans = trajectory.completion_ids, trajectory.turn_spans
    prompt = trajectory.prompt_ids
    for t, (context, _) in enumerate(player.turns):
        first = max(0, t - WINDOW) if policy != "full" else 0
        recent = done[spans[first].start : spans[t].start] if t else []  # the last turns, as sampled and answered
        older = max(0, t - WINDOW)
        if policy in ("full", "window"):
            assert context == [*prompt, *recent]
        elif policy == "mask_observations":
            assert context[: len(prompt)] == prompt and context[len(context) - len(recent) :] == recent
            text = codec.tokenizer.decode(context)
            assert text.count("[observation omitted]") == older
            assert text.count(codec.tokenizer.decode(done[spans[0].start : spans[0].end])) == t  # every call stays
        else:
            head = context[: len(context) - len(recent)]
            assert context[len(head) :] == recent
            if older:  # the opening messages, the task followed by the summary written for this turn (the last)
                *before, task = trajectory.messages[: next(n for n, m in enumerate(trajectory.messages)
                                                         if m["role"] == "assistant")]  # fmt: skip
                summary = f"{task['content']}\n\n{SUMMARY_HEADER}\n{player.summaries[older - 1][1]}"
                assert head == codec.prompt_ids([*before, {**task, "content": summary}])
            else:
                assert head == prompt
    if policy == "summarize":
        assert [text for _, text in player.summaries] == trajectory.history.summaries
        assert len(player.summaries) == TURNS - 1 - WINDOW  # one each time a turn leaves the window
        assert "summary 1:" in codec.tokenizer.decode(player.summaries[1][0])  # the earlier summary is resummarised
        assert trajectory_record(trajectory)["context_summaries"] == trajectory.history.summaries
    else:
        assert not player.summaries
    if policy in ("window", "summarize"):  # a constant context once the window is full (the same call each turn)
        sizes = [len(context) for context, _ in player.turns]
        assert sizes[-1] == sizes[-2] < len(prompt) + len(done[: spans[-1].start])


@pytest.fixture(scope="module")
def arith(tiny_tokenizer):
    env = gym.make("agentfly/Arith-Calc", level="single", max_turns=TURNS + 1)
    _, info = env.reset(options={"index": 0})
    yield ChatCodec(tiny_tokenizer, info["tools"]), env, env.unwrapped.tasks.row(0)
    env.close()


@pytest.mark.parametrize("policy", POLICIES)
def test_each_turn_trains_in_the_context_it_was_sampled_in_on_the_test_tokenizer(arith, policy):
    codec, env, task = arith
    trajectory, player = _play(codec, env, task, policy)
    _check(codec, trajectory, player, policy)


def test_the_episode_stream_samples_and_summarises_as_the_turn_synchronous_loop(arith):
    codec, env, task = arith
    synchronous, sync_player = _play(codec, env, task, "summarize")
    streamed, player = _play(codec, env, task, "summarize", streamed=True)
    assert (streamed.completion_ids, streamed.history.summaries) == (synchronous.completion_ids,
                                                                     synchronous.history.summaries)  # fmt: skip
    assert player.turns == sync_player.turns and player.summaries == sync_player.summaries


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request):
    from transformers import AutoTokenizer

    from agentfly_train.chat_templates.choice import choose_codec
    from agentfly_train.models import resolve_chat_template

    path = TOKENIZERS / f"{request.param}-tiny"
    if not (path / "tokenizer.json").exists():
        pytest.skip(f"no {request.param} tokenizer at {path}: run ../shared/tools/fetch-tokenizers")
    parser, template = FAMILIES[request.param]
    tokenizer = AutoTokenizer.from_pretrained(path)
    if template is not None:
        tokenizer.chat_template = resolve_chat_template(template)
    env = gym.make("agentfly/Arith-Calc", parser=parser, level="single", max_turns=TURNS + 1)
    _, info = env.reset(options={"index": 0})
    golden = env.unwrapped.golden_actions()
    steps = [(golden[0], env.step(golden[0])[4]["messages"]), (golden[1], [])]
    codec = choose_codec(tokenizer, info["tools"], env.unwrapped.parser, {}, info["messages"], steps)
    yield codec, env, info["task"]
    env.close()


@pytest.mark.slow
@pytest.mark.parametrize("policy", POLICIES)
def test_each_turn_trains_in_the_context_it_was_sampled_in_on_real_tokenizers(family, policy):
    codec, env, task = family
    trajectory, player = _play(codec, env, task, policy)
    _check(codec, trajectory, player, policy)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["agent.context.policy=windows"], "context policy 'windows' is not registered; did you mean 'window'"),
        (["agent.context.policy=window", "agent.context.window=0"], "agent.context.window must be > 0"),
        (["agent.context.summary_tokens=0"], "agent.context.summary_tokens must be > 0"),
        (
            ["agent.context.window=2"],
            "agent.context.window has no effect under agent.context.policy=full; the policies that read it: "
            "mask_observations, summarize, window",
        ),
        (
            ["agent.context.policy=window", "agent.context.placeholder=gone"],
            "agent.context.placeholder has no effect under agent.context.policy=window; the policies that read it: "
            "mask_observations",
        ),
        (["agent.context.policy=summarize"], "sft.* warm start's demonstrations have no policy to write"),
        (
            ["agent.context.policy=window", *SCREENSHOTS],
            "agent.context.policy=window rebuilds contexts from text turns, not screenshots",
        ),
        (
            ["agent.context.step_wise=true", "algorithm.adv_estimator=reinforce_plus_plus"],
            "agent.context.step_wise=true trains each turn as its own sample",
        ),
        (
            ["agent.context.policy=mask_observations", "algorithm.adv_estimator=gae"],
            "agent.context.policy=mask_observations trains each turn as its own sample",
        ),
    ],
)
def test_a_bad_context_setting_is_a_one_line_config_error(overrides, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("*", r"\*")) as error:
        quickstart_config(overrides)
    assert "\n" not in str(error.value)


def test_the_policies_train_turn_rows_and_full_trains_them_only_when_asked():
    config = quickstart_config(["sft.enable=false"])
    assert not config.agent.trains_turn_rows
    for overrides in (["agent.context.step_wise=true"], *([f"agent.context.policy={p}"] for p in POLICIES[1:])):
        agent = quickstart_config(["sft.enable=false", *overrides]).agent
        assert agent.trains_turn_rows and agent.turn_rows_setting == overrides[0]
