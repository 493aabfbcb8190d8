"""A user's own code, loaded by name so that every process that builds envs can load it: modules or ``.py`` files
that register tools, rewards, parsers and envs when imported, and a reward function taken from a file (verl's
``custom_reward_function.path`` / ``.name``).

Example:
    >>> def compute_score(data_source, solution_str, ground_truth, extra_info=None):  # verl's signature
    ...     return {"score": float(solution_str.strip() == ground_truth), "length": len(solution_str)}
    >>> reward_from_function(compute_score)("42", "42")
    RewardResult(score=1.0, components={'length': 2.0})

    ``UserCode(reward_file="my_reward.py").load()`` registers such a function from a file, as ``compute_score``.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import numbers
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from agentfly_envs.errors import AgentflyError
from agentfly_envs.rewards import REWARDS, GroundTruth, RewardResult

_LOADED_REWARDS: dict[str, tuple[str, str]] = {}
"""Reward name -> (file, function) of the rewards registered from files in this process."""


class UserCodeError(AgentflyError, ImportError):
    """A user's module or file cannot be imported, or lacks the function named (one line: which, and why)."""


def import_user_module(spec: str) -> ModuleType:
    """Imports ``spec``: a path to a ``.py`` file (relative to the working directory) or a dotted module name on
    ``sys.path``. A file is imported once per process, as a module named after its resolved path.

    Raises:
        UserCodeError: no such file or module, or importing it raised (the error's type and message).
    """
    if spec.endswith(".py"):
        path = Path(spec).expanduser().resolve()
        if not path.is_file():
            raise UserCodeError(f"{spec!r}: no such file")
        name = f"agentfly_user_{path.stem}_{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"
        if name in sys.modules:
            return sys.modules[name]
        module_spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module  # before running it: dataclasses and pickling look their module up by name
        try:
            module_spec.loader.exec_module(module)
        except Exception as error:
            del sys.modules[name]
            raise UserCodeError(f"{spec!r}: importing it raised {_one_line(error)}") from None
        return module
    try:
        return importlib.import_module(spec)
    except Exception as error:  # ModuleNotFoundError, or the module's own failure
        raise UserCodeError(f"{spec!r}: cannot import it ({_one_line(error)})") from None


def load_function(spec: str) -> Callable[..., Any]:
    """The function ``spec`` names: ``module.name:function`` or ``path/to/file.py:function`` (e.g. an agent program,
    ``agent.program``).

    Raises:
        UserCodeError: no ``:``, the module or file cannot be imported, or it has no such function (one line).
    """
    module_name, colon, function = spec.rpartition(":")
    if not colon or not module_name or not function:
        raise UserCodeError(f"{spec!r}: name a function as <module or path/file.py>:<function>")
    fn = getattr(import_user_module(module_name), function, None)
    if not callable(fn):
        raise UserCodeError(f"{module_name!r} has no function {function!r}")
    return fn


def reward_from_function(fn: Callable[..., Any]) -> Callable[[str, GroundTruth], RewardResult]:
    """A reward with agentfly's signature (:data:`agentfly_envs.rewards.RewardFunction`) from a user's function.

    Two signatures are accepted: agentfly's ``fn(response, ground_truth)`` and verl's
    ``compute_score(data_source, solution_str, ground_truth, extra_info=None)`` (called with ``data_source=None``,
    the answer as ``solution_str`` and ``extra_info={}``). The function may return a :class:`RewardResult`, a
    number, or, as verl's, a dict with a ``"score"`` (its other numeric entries become the components).
    """
    verl_style = "solution_str" in inspect.signature(fn).parameters

    def reward(response: str, ground_truth: GroundTruth) -> RewardResult:
        if verl_style:
            value = fn(data_source=None, solution_str=response, ground_truth=ground_truth, extra_info={})
        else:
            value = fn(response, ground_truth)
        return _as_result(value)

    reward.__name__ = getattr(fn, "__name__", "reward")
    return reward


def _as_result(value: Any) -> Any:
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return RewardResult(float(value))
    if isinstance(value, Mapping) and "score" in value:
        components = {str(k): float(v) for k, v in value.items() if k != "score" and isinstance(v, numbers.Real)}
        return RewardResult(float(value["score"]), components)
    return value  # a RewardResult, or something checked_score reports as a failure


@dataclass(frozen=True)
class UserCode:
    """The user code of a run, loaded in every process that builds its envs (the trainer's, Ray env actors).

    Attributes:
        imports: Modules (dotted names) or ``.py`` files imported first; importing them registers their tools,
            rewards, parsers and env ids.
        reward_file: A ``.py`` file holding a reward function (``None``: none).
        reward_function: The function's name in ``reward_file``; the reward is registered under this name.
    """

    imports: tuple[str, ...] = ()
    reward_file: str | None = None
    reward_function: str = "compute_score"

    def load(self) -> None:
        """Imports :attr:`imports` and registers the reward of :attr:`reward_file`; loading again does nothing.

        Raises:
            UserCodeError: a module or file cannot be imported, or the file has no such function, or another
                reward already has its name.
        """
        self.load_imports()
        self.load_reward()

    def load_imports(self) -> None:
        """Imports :attr:`imports` (each once per process).

        Raises:
            UserCodeError: a module or file cannot be imported.
        """
        for spec in self.imports:
            import_user_module(spec)

    def load_reward(self) -> None:
        """Registers the reward of :attr:`reward_file` (once per process; nothing without a file).

        Raises:
            UserCodeError: the file cannot be imported, has no such function, or another reward has its name.
        """
        if self.reward_file is None:
            return
        source = (str(Path(self.reward_file).expanduser().resolve()), self.reward_function)
        if _LOADED_REWARDS.get(self.reward_function) == source:
            return
        module = import_user_module(self.reward_file)
        fn = getattr(module, self.reward_function, None)
        if not callable(fn):
            raise UserCodeError(f"{self.reward_file!r} has no function {self.reward_function!r}")
        if self.reward_function in REWARDS:
            raise UserCodeError(
                f"a reward named {self.reward_function!r} is already registered; rename the function in "
                f"{self.reward_file!r}"
            )
        REWARDS.add(self.reward_function, reward_from_function(fn))
        _LOADED_REWARDS[self.reward_function] = source


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}"[:300] if text else type(error).__name__
