"""Retriever backends: BM25 over a corpus file or a row's paragraphs, and a real HTTP /retrieve server on 127.0.0.1."""

from __future__ import annotations

import json
import time

import pytest

from agentfly_envs import TaskFormatError
from agentfly_envs.retrieval import (
    BM25Index,
    ContextBM25Retriever,
    CorpusBM25Retriever,
    HTTPRetriever,
    Passage,
    RetrieverError,
    context_passages,
)
from tests.envs.retrieval.server import serve_retrieval
from tests.helpers.processes import free_port

CORPUS = [
    Passage("Paris", "Paris is the capital of France and stands on the Seine."),
    Passage("Berlin", "Berlin is the capital of Germany; the Spree flows through it."),
    Passage("Seine", "The Seine is a river in northern France."),
]


def test_bm25_ranks_by_shared_words_and_drops_non_matches():
    index = BM25Index(CORPUS)
    assert [p.title for p in index.search("capital of Germany", 3)] == ["Berlin", "Paris"]
    assert [p.title for p in index.search("Seine river", 1)] == ["Seine"]
    assert index.search("the of and", 3) == []  # only stopwords
    assert index.search("zeppelin", 3) == []  # no shared word
    assert all(p.score > 0 for p in index.search("capital", 5))


def test_corpus_file_in_both_layouts(tmp_path):
    plain = tmp_path / "plain.jsonl"
    plain.write_text("\n".join(json.dumps({"title": p.title, "text": p.text}) for p in CORPUS))
    search_r1 = tmp_path / "wiki.json"
    search_r1.write_text(
        json.dumps([{"id": str(i), "contents": f'"{p.title}"\n{p.text}'} for i, p in enumerate(CORPUS)])
    )
    for path in (plain, search_r1):
        assert CorpusBM25Retriever(path).search("river in France", 1)[0].title == "Seine"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"body": "no text field"}\n')
    with pytest.raises(TaskFormatError, match="corpus row 0 needs 'title' and 'text', or 'contents'"):
        CorpusBM25Retriever(bad)


def test_context_retriever_indexes_each_rows_own_paragraphs():
    retriever = ContextBM25Retriever()
    with pytest.raises(RetrieverError, match="nothing to search yet"):
        retriever.search("Paris", 1)
    hub = {
        "context": {"title": ["Paris", "Rome"], "sentences": [["Capital of France. ", "On the Seine."], ["In Italy."]]}
    }
    retriever.begin_episode(hub)
    assert [(p.title, p.text) for p in retriever.search("Seine", 3)] == [("Paris", "Capital of France. On the Seine.")]
    original = {"context": [["Oslo", ["Capital of Norway."]], ["Rome", ["In Italy."]]]}
    retriever.begin_episode(original)
    assert [p.title for p in retriever.search("Norway", 3)] == ["Oslo"]
    with pytest.raises(TaskFormatError, match="backend': 'bm25'"):
        context_passages({"question": "q"})


@pytest.fixture(scope="module")
def server_url():
    with serve_retrieval(CORPUS) as url:
        yield url


def test_http_retriever_against_a_real_server(server_url):
    retriever = HTTPRetriever(server_url, timeout_s=5)
    assert retriever.url == f"{server_url}/retrieve"
    passages = retriever.search("capital of Germany", 2)
    assert [p.title for p in passages] == ["Berlin", "Paris"] and passages[0].score > passages[1].score
    assert passages[0].text == CORPUS[1].text


@pytest.mark.parametrize(
    ("path", "fragment"),
    [
        ("/broken", "answered HTTP 500"),
        ("/garbage", "sent an unexpected answer"),
        ("/slow", "did not answer within 0.3 s"),
    ],
)
def test_http_retriever_failures_are_clear(server_url, path, fragment):
    start = time.monotonic()
    with pytest.raises(RetrieverError, match=fragment):
        HTTPRetriever(f"{server_url}{path}", timeout_s=0.3).search("Paris", 1)
    assert time.monotonic() - start < 1.4


def test_http_retriever_with_nothing_listening():
    port = free_port()  # nothing listens there
    with pytest.raises(RetrieverError, match=rf"127\.0\.0\.1:{port}/retrieve is unreachable \(.*refused"):
        HTTPRetriever(f"http://127.0.0.1:{port}", timeout_s=2).search("Paris", 1)
    with pytest.raises(ValueError, match="must start with http"):
        HTTPRetriever("127.0.0.1:8000")
