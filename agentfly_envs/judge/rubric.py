"""Rubrics: criteria with weights, each scored by the judge; the reward is their weighted mean.

A rubric is given as a list of criteria (``{name, description, weight}``; ``weight`` defaults to 1), the path of a
YAML file holding such a list, or the name of a rubric in :data:`RUBRICS`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentfly_envs.judge.prompts import JudgeConfigError
from agentfly_envs.registry import Registry

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


@dataclass(frozen=True)
class Criterion:
    """One criterion of a rubric.

    Attributes:
        name: An identifier (letters, digits, ``_``), its reward component's name.
        description: What the judge checks.
        weight: Its share of the reward, relative to the others' (> 0).
    """

    name: str
    description: str
    weight: float = 1.0


RubricSpec = str | Sequence[Mapping[str, Any]]
RUBRICS: Registry[tuple[Criterion, ...]] = Registry("rubric", where="agentfly_envs/judge/rubric.py")
"""Named rubrics (``reward.judge.rubric: <name>``)."""
RUBRICS.register("helpful_correct")(
    (
        Criterion("correct", "The answer agrees with the reference answer, or is right where there is none.", 2.0),
        Criterion("complete", "The answer addresses every part of the task."),
        Criterion("concise", "The answer is clear and says nothing irrelevant."),
    )
)


def load_rubric(spec: RubricSpec, key: str = "reward.judge.rubric") -> tuple[Criterion, ...]:
    """The criteria ``spec`` gives: a list of ``{name, description, weight}`` mappings, a YAML file of one, or a
    registered rubric's name.

    Raises:
        JudgeConfigError: a malformed rubric (one line naming ``key``).

    Example:
        >>> load_rubric([{"name": "correct", "description": "Right answer.", "weight": 3}, {"name": "polite",
        ...              "description": "Kind words."}])
        (Criterion(name='correct', description='Right answer.', weight=3.0), Criterion(name='polite', \
description='Kind words.', weight=1.0))
        >>> load_rubric([{"name": "correct", "weight": -1}])
        Traceback (most recent call last):
        ...
        agentfly_envs.judge.prompts.JudgeConfigError: reward.judge.rubric[0] (correct) has no description
    """
    if isinstance(spec, str):
        if spec in RUBRICS:
            return RUBRICS.get(spec)
        spec = _read_yaml(spec, key)
    if not isinstance(spec, Sequence) or isinstance(spec, str) or not spec:
        raise JudgeConfigError(f"{key} must be a non-empty list of {{name, description, weight}}, got {spec!r:.80}")
    criteria = tuple(_criterion(item, f"{key}[{n}]") for n, item in enumerate(spec))
    names = [criterion.name for criterion in criteria]
    if len(set(names)) < len(names):
        raise JudgeConfigError(f"{key} names a criterion twice: {sorted({n for n in names if names.count(n) > 1})}")
    return criteria


def _read_yaml(path: str, key: str) -> Any:
    if not path.endswith((".yaml", ".yml")):
        raise JudgeConfigError(f"{key}={path!r} is neither a registered rubric ({', '.join(RUBRICS)}) nor a .yaml file")
    import yaml

    try:
        return yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as error:
        raise JudgeConfigError(f"{key}={path!r} cannot be read: {' '.join(str(error).split())[:200]}") from None


def _criterion(item: Any, key: str) -> Criterion:
    if not isinstance(item, Mapping):
        raise JudgeConfigError(f"{key} must be a mapping {{name, description, weight}}, got {item!r:.80}")
    unknown = set(item) - {"name", "description", "weight"}
    if unknown:
        raise JudgeConfigError(f"{key} has unknown keys {sorted(unknown)}; a criterion has name, description, weight")
    name, description, weight = item.get("name"), item.get("description"), item.get("weight", 1.0)
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise JudgeConfigError(f"{key} needs a name of letters, digits and _ (at most 64), got {name!r:.80}")
    if not isinstance(description, str) or not description.strip():
        raise JudgeConfigError(f"{key} ({name}) has no description")
    if isinstance(weight, bool) or not isinstance(weight, int | float) or not math.isfinite(weight) or weight <= 0:
        raise JudgeConfigError(f"{key} ({name}) needs a weight > 0, got {weight!r:.80}")
    return Criterion(name, description.strip(), float(weight))


def rubric_text(criteria: Sequence[Criterion]) -> str:
    """The rubric as the judge reads it, appended to the prompt: one ``- name: description`` line per criterion."""
    return "Rubric:\n" + "\n".join(f"- {criterion.name}: {criterion.description}" for criterion in criteria)
