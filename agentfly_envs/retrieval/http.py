"""An HTTP retrieval service with the Search-R1 ``/retrieve`` API (e.g. a dense retriever on a GPU box).

Request: ``POST {url}/retrieve`` with ``{"queries": [query], "topk": k, "return_scores": true}``.
Answer: ``{"result": [[{"document": {...}, "score": s}, ...]]}`` (or the documents without the
``document``/``score`` wrapper), each document ``{"contents": "\\"Title\\"\\ntext"}`` or ``{"title", "text"}``.
The connection is direct (no proxy), with a timeout. Every failure (unreachable, too slow, any HTTP error, an answer
that cannot be read) is a :class:`RetrieverUnavailableError` that says what went wrong: an infrastructure failure,
never the agent's, since the ``search`` tool has already checked the query (an empty result is the agent's).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

from agentfly_envs.retrieval.base import RETRIEVERS, Passage, Retriever, RetrieverUnavailableError

MAX_RESPONSE_BYTES = 16 << 20
"""Largest answer read from the service, in bytes."""


@RETRIEVERS.register("http")
class HTTPRetriever(Retriever):
    """A Search-R1-style retrieval server.

    Args:
        url: The server, e.g. ``"http://127.0.0.1:8000"`` (``/retrieve`` is appended unless present).
        timeout_s: How long to wait for a connection and for the answer, in seconds.
    """

    def __init__(self, url: str, timeout_s: float = 10.0) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"the search service url must start with http:// or https://, got {url!r}")
        self.url = url if url.rstrip("/").endswith("/retrieve") else url.rstrip("/") + "/retrieve"
        self.timeout_s = timeout_s
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def search(self, query: str, top_k: int) -> list[Passage]:
        body = json.dumps({"queries": [query], "topk": top_k, "return_scores": True}).encode()
        request = urllib.request.Request(self.url, body, {"Content-Type": "application/json"}, method="POST")
        try:
            with self._opener.open(request, timeout=self.timeout_s) as response:
                payload = response.read(MAX_RESPONSE_BYTES + 1)
        except urllib.error.HTTPError as e:
            raise RetrieverUnavailableError(
                f"the search service at {self.url} answered HTTP {e.code} ({e.reason})"
            ) from None
        except urllib.error.URLError as e:
            if isinstance(e.reason, TimeoutError):
                raise RetrieverUnavailableError(self._timeout_message()) from None
            raise RetrieverUnavailableError(f"the search service at {self.url} is unreachable ({e.reason})") from None
        except TimeoutError:
            raise RetrieverUnavailableError(self._timeout_message()) from None
        except OSError as e:
            raise RetrieverUnavailableError(
                f"the connection to the search service at {self.url} failed ({e})"
            ) from None
        if len(payload) > MAX_RESPONSE_BYTES:
            raise RetrieverUnavailableError(
                f"the search service at {self.url} sent more than {MAX_RESPONSE_BYTES} bytes"
            )
        return [_passage(item) for item in _first_result(payload, self.url)][:top_k]

    def _timeout_message(self) -> str:
        return f"the search service at {self.url} did not answer within {self.timeout_s:g} s"


def _first_result(payload: bytes, url: str) -> list[Any]:
    try:
        result = json.loads(payload)["result"][0]
    except (ValueError, KeyError, IndexError, TypeError):
        raise RetrieverUnavailableError(
            f"the search service at {url} sent an unexpected answer (expected {{'result': [[...]]}}): {payload[:200]!r}"
        ) from None
    if not isinstance(result, list):
        raise RetrieverUnavailableError(f"the search service at {url} sent an unexpected answer: {payload[:200]!r}")
    return result


def _passage(item: Any) -> Passage:
    document = item.get("document", item) if isinstance(item, Mapping) else None
    score = item.get("score") if isinstance(item, Mapping) and "document" in item else None
    if isinstance(document, Mapping) and isinstance(document.get("contents"), str):
        title, _, text = document["contents"].partition("\n")
        return Passage(title.strip().strip('"'), text.strip(), _number(score))
    if isinstance(document, Mapping) and isinstance(document.get("text"), str):
        return Passage(str(document.get("title", "")), document["text"], _number(score))
    raise RetrieverUnavailableError(
        f"the search service sent a document without 'contents' or 'text': {str(item)[:200]}"
    )


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
