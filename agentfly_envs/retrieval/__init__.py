"""Retrievers behind the ``search`` tool: one interface, several backends (registry :data:`RETRIEVERS`).

- ``context``: BM25 over the current task's own paragraphs (HotpotQA's distractor setting).
- ``bm25``: BM25 over a corpus file.
- ``http``: a retrieval service with the Search-R1 ``/retrieve`` API.
"""

from agentfly_envs.retrieval.base import (
    RETRIEVERS,
    Passage,
    Retriever,
    RetrieverError,
    RetrieverUnavailableError,
    get_retriever,
)
from agentfly_envs.retrieval.bm25 import BM25Index, ContextBM25Retriever, CorpusBM25Retriever, context_passages
from agentfly_envs.retrieval.http import HTTPRetriever

__all__ = [
    "RETRIEVERS",
    "BM25Index",
    "ContextBM25Retriever",
    "CorpusBM25Retriever",
    "HTTPRetriever",
    "Passage",
    "Retriever",
    "RetrieverError",
    "RetrieverUnavailableError",
    "context_passages",
    "get_retriever",
]
