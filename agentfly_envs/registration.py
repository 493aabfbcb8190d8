"""The table of agentfly environment ids, registered with Gymnasium when ``agentfly_envs`` is imported.

This module is the only caller of ``gymnasium.register``. Every id is a :class:`~agentfly_envs.core.ToolEnv`
with different kwargs; any kwarg can be overridden in ``gymnasium.make(id, **kwargs)``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from agentfly_envs.worlds.miniwob import TASKS as MINIWOB_TASKS
from agentfly_envs.worlds.text_arena import GAMES as TEXTARENA_GAMES

ENTRY_POINT = "agentfly_envs.core:ToolEnv"

TWX_GAMES: dict[str, str] = {
    "Coin": "coin",
    "Cooking": "cookingworld",
    "Commonsense": "twc",
    "MapReader": "mapreader",
    "Sorting": "sorting",
    "Arithmetic": "arithmetic",
    "PeckingOrder": "peckingorder",
    "SimonSays": "simonsays",
}
"""``agentfly/TWX-<name>`` -> the TextWorldExpress game it plays."""

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
    "agentfly/Math-Python": {
        "task": "gsm8k",
        "tools": ("python_executor",),
        "parser": "hermes",
        "reward": "math_reward_string_equal",
        "max_turns": 8,
    },
    "agentfly/Code-Tests": {
        "task": "code_tests",
        "tools": ("python_executor",),
        "parser": "hermes",
        "reward": "code_reward",
        "max_turns": 8,
    },
    "agentfly/HotpotQA-Search": {
        "task": "hotpotqa",
        "tools": ("search", "answer"),
        "parser": "hermes",
        "reward": "qa_f1_reward",
        "max_turns": 8,
    },
    "agentfly/Files": {
        "task": "files",
        "tools": ("calculator",),
        "parser": "hermes",
        "reward": "math_reward_string_equal",
        "max_turns": 8,
    },
    **{
        f"agentfly/TWX-{name}": {
            "task": "textworld_express",
            "game": game,
            "tools": ("act",),
            "parser": "hermes",
            "reward": "world_success",
            "max_turns": 50,
        }
        for name, game in TWX_GAMES.items()
    },
    "agentfly/ScienceWorld": {
        "task": "scienceworld",
        "tools": ("act",),
        "parser": "hermes",
        "reward": "world_success",
        "max_turns": 50,
    },
    **{
        f"agentfly/TextArena-{name}": {
            "task": "textarena",
            "game": game,
            "tools": ("act",),
            "parser": "hermes",
            "reward": "world_success",
            "max_turns": 50,
        }
        for name, game in TEXTARENA_GAMES.items()
    },
    "agentfly/Maze-Nav": {
        "task": "maze",
        "tools": ("act",),
        "parser": "hermes",
        "reward": "world_success",
        "progress_reward": True,
        "max_turns": 24,
    },
    **{
        f"agentfly/MiniWoB-{name}": {
            "task": "miniwob",
            "game": game,
            "tools": ("click", "type", "press", "scroll"),
            "parser": "hermes",
            "reward": "world_success",
            "max_turns": 10,
        }
        for name, game in MINIWOB_TASKS.items()
    },
}
"""Environment id -> default ``ToolEnv`` kwargs.

- ``agentfly/GSM8K-Calc``: GSM8K word problems with a calculator; Qwen/Hermes tool calls; exact
  numeric answer. Loads ``openai/gsm8k`` (config ``main``) from the Hub unless ``data_files=`` is given.
- ``agentfly/Arith-Calc``: generated multi-step arithmetic word problems (``level=`` "easy",
  "medium", "hard"); needs no data, so it is the embedded default for offline runs.
- ``agentfly/Math-Python``: math word problems (GSM8K, or any question/answer file) solved with
  the sandboxed ``python_executor``; ``reward="math_equal"`` for symbolic answers.
- ``agentfly/Code-Tests``: write a function that passes unit tests (MBPP from the Hub, or MBPP- or
  HumanEval-style files); run code with ``python_executor``; answer with a code block, scored by
  ``code_reward`` (the fraction of tests passed in the sandbox).
- ``agentfly/HotpotQA-Search``: multi-hop questions with ``search`` (default: BM25 over the row's own
  paragraphs; ``tool_options={"search": {...}}`` for a corpus file or an HTTP retriever) and
  ``answer``; scored by ``qa_f1_reward`` (token F1, with exact match as a component).
- ``agentfly/Files``: the rows of ``data_files=`` (any JSON list, JSONL or parquet file), AgentFly's data format:
  ``question`` (or ``prompt``/``instruction``/``problem``) is the user turn, ``answer`` the reference; MBPP- and
  HumanEval-style rows are code tasks. Pick ``tools=``, ``parser=`` and ``reward=`` for the data; this is the
  env ``python -m agentfly_train`` builds when ``agent.env`` is not given.
- ``agentfly/TWX-<Game>``: a TextWorldExpress game (:data:`TWX_GAMES`) as an interactive world: the agent plays
  it with ``act`` commands; ``split=`` "train"/"dev"/"test" picks the seeds, ``params=`` the simulator's
  generation parameters; ``world_success`` scores 1 when the game is won (``reward="world_score"`` for partial
  credit). Needs ``pip install 'agentfly-rl[worlds]'`` and Java.
- ``agentfly/ScienceWorld``: the 30 ScienceWorld tasks (boil water, grow a plant, test conductivity, ...) as an
  interactive world played with ``act``; rows go round the tasks' variations of ``split=`` "train"/"dev"/"test",
  ``game=`` keeps one task (or a list), ``params=`` sets simplifications (e.g. ``"easy"``); scored like the TWX
  ids. Needs ``pip install 'agentfly-rl[scienceworld]'`` and Java.
- ``agentfly/TextArena-<Game>``: a TextArena single-player puzzle (:data:`TEXTARENA_GAMES`: TowerOfHanoi,
  FrozenLake, Mastermind, Sokoban, Minesweeper, 2048), played with ``act`` moves such as ``[up]``; ``split=``
  picks the seeds, ``game=`` another TextArena variant of the puzzle (e.g. ``"Sokoban-v0-medium"``); scored
  like the TWX ids. Needs ``pip install 'agentfly-rl[puzzles]'``.
- ``agentfly/Maze-Nav``: the long-horizon env: walk a generated maze of rooms (4 x 4 by default, ``params=
  "size=6,loops=0.2"``) from its start to its exit, 10 or more moves apart, one ``act`` direction per turn;
  generated from the seed (``split=`` picks the seeds), with a golden solver (a shortest path), nothing to install.
  Each step pays the progress it made (``progress_reward=True``: the increase of the share of the way to the exit
  covered); the return is ``world_success``'s, 1 when the exit is reached within ``max_turns`` (24), else 0.
- ``agentfly/MiniWoB-<Task>``: a MiniWoB++ web task (:data:`MINIWOB_TASKS`: ClickButton, ..., EmailInbox) in
  headless Chromium, played with ``click``, ``type``, ``press`` and ``scroll``; ``obs="text"`` (default) lists the
  page's elements with ids to act on, ``obs="screenshot"`` shows the screen as an image (actions by coordinates);
  ``world_success`` scores 1 when MiniWoB's raw reward is 1, ``reward="world_score"`` gives its time-decayed reward
  (``time_limit_s=`` sets the limit, 300 s by default). Needs ``pip install 'agentfly-rl[web]'`` and Chromium with
  chromedriver on ``PATH``.
"""


ADAPTER_ENVS: dict[str, str] = {
    "agentfly/Remote": "agentfly_envs.remote.client:HTTPEnv",
    "agentfly/Verifiers": "agentfly_envs.adapters.verifiers:VerifiersEnv",
}
"""Ids of envs that play other servers' and libraries' environments -> their entry points (no default kwargs):

- ``agentfly/Remote``: an env on a server speaking OpenEnv's protocol (``url=``; ours from
  ``python -m agentfly_envs serve``, or any OpenEnv env); ``agent.env=openenv:<url>`` in the trainer.
- ``agentfly/Verifiers``: a verifiers taskset (``taskset=<module>``); ``agent.env=verifiers:<module>``.
"""


def register_envs() -> None:
    """Registers every id in :data:`ENVIRONMENTS` and :data:`ADAPTER_ENVS` (ids already registered are left
    alone)."""
    for env_id, kwargs in ENVIRONMENTS.items():
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=ENTRY_POINT, kwargs=kwargs)
    for env_id, entry_point in ADAPTER_ENVS.items():
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=entry_point)
