"""The table of agentfly environment ids, registered with Gymnasium when ``agentfly_envs`` is imported.

This module is the only caller of ``gymnasium.register``. Every id is a :class:`~agentfly_envs.core.ToolEnv`
with different kwargs; any kwarg can be overridden in ``gymnasium.make(id, **kwargs)``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

ENTRY_POINT = "agentfly_envs.core:ToolEnv"

ENVIRONMENTS: dict[str, dict[str, Any]] = {
    "agentfly/GSM8K-Calc": {
        "task": "gsm8k",
        "tools": ("calculator",),
        "parser": "hermes",
        "reward": "math_reward_string_equal",
        "max_turns": 8,
    },
    "agentfly/Arith-Calc": {
        "task": "arithmetic",
        "tools": ("calculator",),
        "parser": "hermes",
        "reward": "math_reward_string_equal",
        "max_turns": 8,
    },
}
"""Environment id -> default ``ToolEnv`` kwargs.

- ``agentfly/GSM8K-Calc``: GSM8K word problems with a calculator; Qwen/Hermes tool calls; exact
  numeric answer. Loads ``openai/gsm8k`` (config ``main``) from the Hub unless ``data_files=`` is given.
- ``agentfly/Arith-Calc``: generated multi-step arithmetic word problems (``level=`` "easy",
  "medium", "hard"); needs no data, so it is the embedded default for offline runs.
"""


def register_envs() -> None:
    """Registers every id in :data:`ENVIRONMENTS` (ids already registered are left alone)."""
    for env_id, kwargs in ENVIRONMENTS.items():
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=ENTRY_POINT, kwargs=kwargs)
