"""What every runtime does when an env cannot answer: the step that ends its episode, and the failure counts.

A step that runs past the pool's ``step_timeout`` (any runtime), or finds its Ray actor dead, returns the
:func:`lost_episode` step: an ``Error:`` observation, the env's truncation reward, ``truncated=True``,
``info["remote_failure"]`` (one of :data:`FAILURE_KINDS`) and ``info["infra_failure"]`` (what happened, one line:
an infrastructure failure, as a :class:`~agentfly_envs.core.ToolEnv` reports one of its own). The pool counts it
(:class:`FailureCounts`) and the env's next ``reset`` starts on a fresh env; the stuck one is never used again.

A pool's ``check_health()``, called before a batch of episodes, finds dead hosts before an episode meets them: it
replaces a Ray actor that does not answer, and counts the servers of the envs (:func:`servers_down`) that do not.
"""

from __future__ import annotations

import http.client
import threading
import urllib.request
from collections import Counter
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import gymnasium as gym

FAILURE_KINDS = ("actor_died", "timeout")
"""Keys of a pool's ``pop_failures()``: the Ray actor hosting the env died, or a step ran past the timeout."""
SERVER_PING_TIMEOUT_S = 2.0
"""How long a server's ``health_url`` may take to answer a health check."""


class WorkerLost(Exception):
    """A call found its host dead or unreachable, ran past the step timeout, or was refused.

    Attributes:
        kind: One of :data:`FAILURE_KINDS`, or for an ``agentfly/Remote`` env ``server_lost`` (its server stopped
            answering) or ``refused`` (its server refused the turn).
        tool: The tool that was running when the step timed out, when known.
        detail: What the host said, for ``refused``.
    """

    def __init__(self, kind: str, tool: str | None = None, detail: str | None = None) -> None:
        super().__init__(kind)
        self.kind = kind
        self.tool = tool
        self.detail = detail


class FailureCounts:
    """Lost calls of one pool by kind, counted from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def add(self, kind: str) -> None:
        """Counts one lost call of ``kind``."""
        with self._lock:
            self._counts[kind] += 1

    def pop(self) -> dict[str, int]:
        """The counts since the last call, one per :data:`FAILURE_KINDS`."""
        with self._lock:
            counts = {kind: self._counts[kind] for kind in FAILURE_KINDS}
            self._counts.clear()
        return counts


def lost_episode(
    lost: WorkerLost, step_timeout: float, error_counts: Mapping[str, int], truncation_reward: float
) -> tuple[str, float, bool, bool, dict[str, Any]]:
    """The step that ends an episode lost to ``lost``: an ``Error:`` observation, truncated.

    Args:
        lost: What happened.
        step_timeout: The limit the step ran past, seconds.
        error_counts: The episode's ``info["error_counts"]`` so far.
        truncation_reward: The env's reward of a truncated episode.

    Returns:
        ``(observation, truncation_reward, False, True, info)`` with ``info["remote_failure"] = lost.kind``,
        ``info["infra_failure"]``: the observation without its ``Error: ``, and ``info["stuck_tool"]``: the tool that
        was running when the step timed out (``None`` when not known or not a timeout).

    Example:
        >>> lost_episode(WorkerLost("timeout", "python_executor"), 2.0, {}, 0.0)[0]
        "Error: the environment step timed out after 2 s (in tool 'python_executor'); the episode ends here."
    """
    if lost.kind == "timeout":
        where = f" (in tool {lost.tool!r})" if lost.tool else ""
        text = f"Error: the environment step timed out after {step_timeout:g} s{where}; the episode ends here."
    elif lost.kind == "server_lost":
        text = "Error: the environment server stopped answering; the episode ends here."
    elif lost.kind == "refused":
        text = f"Error: the environment server refused the turn: {lost.detail}; the episode ends here."
    else:
        text = "Error: the worker running this environment died; the episode ends here."
    info = {
        "messages": [{"role": "tool", "name": "error", "content": text}],
        "tool_calls": [],
        "parse_errors": [],
        "error_counts": dict(error_counts),
        "answer": None,
        "reward_components": {},
        "remote_failure": lost.kind,
        "infra_failure": text.removeprefix("Error: "),
        "stuck_tool": lost.tool,
    }
    return text, float(truncation_reward), False, True, info


def servers_down(envs: Iterable[gym.Env]) -> set[str]:
    """The ``health_url`` of every server ``envs`` play on that does not answer, each pinged once, concurrently.

    An env that plays on a server (``agentfly/Remote``) has a ``health_url`` attribute: a URL that answers ``GET``
    while the server is up. Envs without one are skipped.

    Args:
        envs: Envs, wrapped or not.

    Returns:
        The URLs that did not answer within :data:`SERVER_PING_TIMEOUT_S` seconds.
    """
    urls = {url for env in envs if (url := getattr(env.unwrapped, "health_url", None))}
    if not urls:
        return set()
    with ThreadPoolExecutor(max_workers=len(urls), thread_name_prefix="health") as threads:
        answers = dict(zip(urls, threads.map(_answers, urls), strict=True))
    return {url for url, answered in answers.items() if not answered}


def _answers(url: str) -> bool:
    """Whether ``GET url`` succeeds within :data:`SERVER_PING_TIMEOUT_S` seconds."""
    try:
        with urllib.request.urlopen(url, timeout=SERVER_PING_TIMEOUT_S):
            return True
    except (OSError, ValueError, http.client.HTTPException):
        return False
