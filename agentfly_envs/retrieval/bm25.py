"""BM25 retrieval with `bm25s <https://github.com/xhluca/bm25s>`_, over a corpus file or a task's own paragraphs.

- ``bm25``: an index over a corpus file, built once per env: JSONL (or a JSON list) of
  ``{"title", "text"}`` rows, or Search-R1's ``{"id", "contents"}`` rows (``contents`` is the quoted
  title, a newline, then the text).
- ``context``: an index over the paragraphs in the row's ``context`` field, built per episode
  (HotpotQA's distractor setting: ``{"title": [...], "sentences": [[...], ...]}``, or the original
  ``[[title, [sentence, ...]], ...]``), so the env needs no external service.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from agentfly_envs.errors import TaskFormatError
from agentfly_envs.retrieval.base import RETRIEVERS, Passage, Retriever, RetrieverError


class BM25Index:
    """An in-memory BM25 index (English stopwords removed, lower-cased, no stemming).

    Example:
        >>> index = BM25Index([Passage("Paris", "Capital of France."), Passage("Rome", "Capital of Italy.")])
        >>> [passage.title for passage in index.search("capital of Italy", 1)]
        ['Rome']
    """

    def __init__(self, passages: Sequence[Passage]) -> None:
        import bm25s  # lazy: keeps `import agentfly_envs` light

        if not passages:
            raise ValueError("a BM25 index needs at least one passage")
        self.passages = list(passages)
        self._bm25s = bm25s
        self._model = bm25s.BM25()
        corpus = [f"{passage.title}\n{passage.text}" for passage in self.passages]
        self._model.index(bm25s.tokenize(corpus, stopwords="en", show_progress=False), show_progress=False)

    def search(self, query: str, top_k: int) -> list[Passage]:
        """The passages that share words with ``query``, best first, at most ``top_k``."""
        tokens = self._bm25s.tokenize([query], stopwords="en", return_ids=False, show_progress=False)
        if not tokens[0]:
            return []
        k = min(top_k, len(self.passages))
        indices, scores = self._model.retrieve(tokens, k=k, show_progress=False)
        return [
            Passage(self.passages[index].title, self.passages[index].text, float(score))
            for index, score in zip(indices[0], scores[0], strict=True)
            if score > 0
        ]


def read_corpus(path: str | os.PathLike) -> list[Passage]:
    """Reads a corpus file: JSONL or a JSON list of ``{"title", "text"}`` or ``{"contents"}`` rows.

    Raises:
        TaskFormatError: a row has neither shape.
    """
    with open(path, encoding="utf-8") as file:
        text = file.read()
    rows = (
        json.loads(text)
        if text.lstrip().startswith("[")
        else [json.loads(line) for line in text.splitlines() if line.strip()]
    )
    return [_passage(row, position) for position, row in enumerate(rows)]


def _passage(row: Any, position: int) -> Passage:
    if isinstance(row, Mapping) and isinstance(row.get("text"), str):
        return Passage(str(row.get("title", "")), row["text"])
    if isinstance(row, Mapping) and isinstance(row.get("contents"), str):
        title, _, text = row["contents"].partition("\n")
        return Passage(title.strip().strip('"'), text.strip())
    raise TaskFormatError(f"corpus row {position} needs 'title' and 'text', or 'contents'; got {str(row)[:200]}")


def context_passages(row: Mapping[str, Any]) -> list[Passage]:
    """The paragraphs in a row's ``context`` field (HotpotQA distractor format, Hub or original layout).

    Raises:
        TaskFormatError: the row has no usable ``context``.

    Example:
        >>> context_passages({"context": {"title": ["A"], "sentences": [["One. ", "Two."]]}})
        [Passage(title='A', text='One. Two.', score=None)]
    """
    context = row.get("context")
    if isinstance(context, Mapping) and isinstance(context.get("title"), Sequence):
        pairs = list(zip(context["title"], context.get("sentences", ()), strict=False))
    elif isinstance(context, Sequence) and not isinstance(context, str):
        pairs = [tuple(item) for item in context if isinstance(item, Sequence) and len(item) == 2]
    else:
        pairs = []
    passages = [Passage(str(title), "".join(map(str, sentences)).strip()) for title, sentences in pairs]
    if not passages:
        raise TaskFormatError(
            "the 'context' search backend indexes the paragraphs in the row's 'context' field (HotpotQA's "
            f"distractor format), and this row has none (fields: {sorted(row)}); use a corpus instead: "
            "tool_options={'search': {'backend': 'bm25', 'corpus_file': ...}} or {'backend': 'http', 'url': ...}"
        )
    return passages


@RETRIEVERS.register("bm25")
class CorpusBM25Retriever(Retriever):
    """BM25 over a corpus file, indexed once.

    Args:
        corpus_file: The corpus (see :func:`read_corpus`).
    """

    def __init__(self, corpus_file: str | os.PathLike) -> None:
        self.index = BM25Index(read_corpus(corpus_file))

    def search(self, query: str, top_k: int) -> list[Passage]:
        return self.index.search(query, top_k)


@RETRIEVERS.register("context")
class ContextBM25Retriever(Retriever):
    """BM25 over the current task's own ``context`` paragraphs, indexed at the start of each episode."""

    def __init__(self) -> None:
        self.index: BM25Index | None = None

    def begin_episode(self, row: Mapping[str, Any]) -> None:
        self.index = BM25Index(context_passages(row))

    def search(self, query: str, top_k: int) -> list[Passage]:
        if self.index is None:
            raise RetrieverError(
                "there is nothing to search yet: the task's documents are indexed when an episode starts"
            )
        return self.index.search(query, top_k)
