"""The retriever interface behind the ``search`` tool, and its registry of backends."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentfly_envs.errors import InfrastructureError
from agentfly_envs.registry import Registry


@dataclass(frozen=True)
class Passage:
    """One retrieved passage.

    Attributes:
        title: Its document's title ("" if none).
        text: The passage.
        score: The retriever's score, if it gives one (higher is better).
    """

    title: str
    text: str
    score: float | None = None


class RetrieverError(Exception):
    """A search failed in a way the agent should hear about (nothing indexed yet); the ``search`` tool shows it."""


class RetrieverUnavailableError(RetrieverError, InfrastructureError):
    """The retrieval service failed: unreachable, too slow, an HTTP error, or an answer that cannot be read. Not the
    agent's doing: the env ends the episode unscored."""


class Retriever(ABC):
    """Finds passages for a query. Backends are registered in :data:`RETRIEVERS` by name."""

    @abstractmethod
    def search(self, query: str, top_k: int) -> list[Passage]:
        """The best ``top_k`` passages for ``query``, best first (fewer if there are fewer).

        Raises:
            RetrieverError: the search could not be done; the message says why.
            RetrieverUnavailableError: the service behind the retriever failed.
        """

    def begin_episode(self, row: Mapping[str, Any]) -> None:  # noqa: B027  (an optional hook)
        """Called when an episode starts on ``row`` (a per-task index is built here)."""


RETRIEVERS: Registry[type[Retriever]] = Registry("retriever", where="agentfly_envs/retrieval/")


def get_retriever(name: str) -> type[Retriever]:
    """Returns the registered retriever class ``name``; raises ``UnknownNameError`` with close matches."""
    return RETRIEVERS.get(name)
