"""``search``: finds passages with a retriever (see :mod:`agentfly_envs.retrieval`).

Each env gets its own copy, with its own retriever. ``google_search`` is the same tool under AgentFly's name.
Options, via the env's ``tool_options`` (keyed by the name the env uses)::

    {"search": {"backend": "context"}}                                  # the task's own paragraphs (default)
    {"search": {"backend": "bm25", "corpus_file": "wiki.jsonl"}}        # BM25 over a corpus file
    {"search": {"backend": "http", "url": "http://127.0.0.1:8000", "timeout_s": 5}}  # a /retrieve server
    {"search": {"retriever": my_retriever, "top_k": 5}}                 # any Retriever object

An empty or overlong query and a query that matches nothing are ``Error:`` observations counted as
``tool_error``. A retrieval service that fails (down, slow, garbled: :class:`RetrieverUnavailableError`) is not the
agent's doing: the env ends the episode unscored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentfly_envs.retrieval import Passage, Retriever, RetrieverError, RetrieverUnavailableError, get_retriever
from agentfly_envs.tools.base import TOOLS, Tool, ToolError

MAX_QUERY_CHARS = 1_000
"""Longest query accepted, in characters."""


class SearchTool(Tool):
    """The ``search`` tool over one retriever.

    Args:
        retriever: The retriever; ``None`` builds the ``context`` backend.
        top_k: Passages returned per search.
        name: The name the model calls it by (``google_search`` is AgentFly's).
    """

    def __init__(self, retriever: Retriever | None = None, top_k: int = 3, name: str = "search") -> None:
        super().__init__(self.search, name=name)
        if top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {top_k}")
        self.retriever = retriever if retriever is not None else get_retriever("context")()
        self.top_k = top_k

    def for_env(
        self, backend: str = "context", retriever: Retriever | None = None, top_k: int = 3, **backend_options: Any
    ) -> SearchTool:
        """A copy for one env.

        Args:
            backend: A registered retriever: ``"context"``, ``"bm25"`` or ``"http"``.
            retriever: A ready retriever to use instead of building ``backend``.
            top_k: Passages returned per search.
            **backend_options: The backend's own arguments (``corpus_file=``; ``url=``, ``timeout_s=``).
        """
        if retriever is None:
            retriever = get_retriever(backend)(**backend_options)
        elif backend_options:
            raise TypeError(f"pass either retriever= or backend options, not both (got {sorted(backend_options)})")
        return SearchTool(retriever, top_k, self.name)

    def begin_episode(self, row: Mapping[str, Any]) -> None:
        """Lets the retriever index the task's own documents, if it uses them."""
        self.retriever.begin_episode(row)

    def search(self, query: str) -> str:
        """Search for passages about a query and return the best matches.

        Args:
            query: What to look for: a name, a title or a short question.

        Returns:
            The best passages, one per line as "Doc 1 (Title: ...) text", or a line starting with "Error:".

        Raises:
            RetrieverUnavailableError: the retrieval service failed (an infrastructure failure).
        """
        query = query.strip()
        if not query:
            raise ToolError("the query is empty; search for a name, a title or a short question")
        if len(query) > MAX_QUERY_CHARS:
            raise ToolError(f"the query is {len(query)} characters long; keep it under {MAX_QUERY_CHARS}")
        try:
            passages = self.retriever.search(query, self.top_k)
        except RetrieverUnavailableError:  # not the agent's: the call ends as an infrastructure failure
            raise
        except RetrieverError as e:
            raise ToolError(str(e)) from None
        if not passages:
            raise ToolError(f"no passage matches {query[:200]!r}; try other words")
        return format_passages(passages)


def format_passages(passages: list[Passage]) -> str:
    """Passages as the model reads them, one per line.

    Example:
        >>> format_passages([Passage("Paris", "The capital of France.")])
        'Doc 1 (Title: Paris) The capital of France.'
    """
    return "\n".join(f"Doc {i} (Title: {p.title}) {p.text}" for i, p in enumerate(passages, start=1))


TOOLS.add("search", SearchTool())
TOOLS.add("google_search", SearchTool(name="google_search"))  # AgentFly's name for it
