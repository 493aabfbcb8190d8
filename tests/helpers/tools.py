"""Tools the tests register beside the project's."""

from __future__ import annotations

import time

from agentfly_envs import Tool


def _nap(seconds: float) -> str:
    """Rest a while.

    Args:
        seconds: How long, in seconds.
    """
    time.sleep(seconds)
    return "rested"


NAP = Tool(_nap, name="nap")
"""A tool whose calls take as long as they ask (``{"seconds": 0.05}``: 50 ms)."""
