import gymnasium as gym
import pytest

import agentfly_envs  # noqa: F401
from agentfly_envs.retrieval import BM25Index, Passage, context_passages
from agentfly_envs.tasks import HotpotQATasks
from agentfly_envs.tools import CallStatus, get_tool
from agentfly_envs.tools.search import SearchTool
from tests.envs.golden import replay_golden_episodes
from tests.envs.retrieval.server import serve_retrieval
from tests.helpers.paths import HOTPOTQA_SAMPLE

ENV_ID = "agentfly/HotpotQA-Search"


def sample_passages() -> list[Passage]:
    """Every paragraph of the HotpotQA sample, as one corpus."""
    tasks = HotpotQATasks(data_files=str(HOTPOTQA_SAMPLE))
    return [passage for index in range(len(tasks)) for passage in context_passages(tasks.row(index))]


def test_search_returns_numbered_passages_with_titles():
    tool = get_tool("search").for_env(top_k=2)
    tool.begin_episode({"context": {"title": ["Paris", "Rome"], "sentences": [["Capital of France."], ["Rome."]]}})
    result = tool({"query": "capital of France"})
    assert (result.status, result.content) == (CallStatus.OK, "Doc 1 (Title: Paris) Capital of France.")
    assert get_tool("search").schema["function"]["parameters"]["required"] == ["query"]


def test_env_with_a_corpus_file_backend(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(f'{{"title": "{p.title}", "text": "{p.text}"}}' for p in sample_passages()))
    options = {"search": {"backend": "bm25", "corpus_file": str(corpus), "top_k": 2}}
    env = gym.make(ENV_ID, data_files=str(HOTPOTQA_SAMPLE), tool_options=options)
    assert len(replay_golden_episodes(env)) == 5
    env.close()


def test_env_with_an_http_retriever_and_with_it_down():
    with serve_retrieval(sample_passages()) as url:
        env = gym.make(
            ENV_ID, data_files=str(HOTPOTQA_SAMPLE), tool_options={"search": {"backend": "http", "url": url}}
        )
        assert len(replay_golden_episodes(env)) == 5
        env.reset(options={"index": 0})
        env.unwrapped.tools["search"].retriever.url = f"{url}/broken/retrieve"
        observation, *_, info = env.step('<tool_call>{"name": "search", "arguments": {"query": "Paris"}}</tool_call>')
        assert observation.startswith("Error: the search service at") and "answered HTTP 500" in observation
        assert info["infra_failure"] == f"tool search: {observation.removeprefix('Error: ')}"
    env.reset(options={"index": 0})  # the server is gone now
    observation, reward, terminated, truncated, info = env.step(
        '<tool_call>{"name": "search", "arguments": {"query": "Paris"}}</tool_call>'
    )
    assert observation.startswith("Error: the search service at") and "is unreachable" in observation
    assert info["infra_failure"].startswith("tool search: the search service at")
    assert info["error_counts"]["tool_error"] == 0 and (reward, terminated, truncated) == (0.0, False, True)
    env.close()


def test_a_retriever_object_can_be_shared():
    index = BM25Index(sample_passages())

    class Shared:  # any object with search() and begin_episode()
        def search(self, query, top_k):
            return index.search(query, top_k)

        def begin_episode(self, row):
            return None

    env = gym.make(ENV_ID, data_files=str(HOTPOTQA_SAMPLE), tool_options={"search": {"retriever": Shared()}})
    assert len(replay_golden_episodes(env)) == 5
    env.close()


def test_search_option_mistakes_raise_early():
    with pytest.raises(KeyError, match="did you mean 'bm25'"):
        gym.make(ENV_ID, data_files=str(HOTPOTQA_SAMPLE), tool_options={"search": {"backend": "bm26"}})
    with pytest.raises(TypeError, match="corpus_file"):
        gym.make(ENV_ID, data_files=str(HOTPOTQA_SAMPLE), tool_options={"search": {"backend": "bm25"}})
    with pytest.raises(ValueError, match="top_k must be >= 1"):
        SearchTool(top_k=0)
