"""Saved episodes: the lines of ``train_samples/``, ``val_samples/`` and ``eval.jsonl``, with the screenshots their
messages hold written as PNG files beside them."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentfly_train.rollout import Trajectory, trajectory_record

if TYPE_CHECKING:
    from PIL.Image import Image

IMAGE_DIR = "images"
"""Where a sample file's screenshots go, in its directory (``train_samples/images/<digest>.png``)."""


def write_samples(
    path: Path,
    trajectories: Sequence[Trajectory],
    append: bool = False,
    turn_advantages: Sequence[Sequence[float | None]] | None = None,
) -> list[dict[str, Any]]:
    """Writes one :func:`~agentfly_train.rollout.trajectory_record` line per episode to ``path`` (appended to it with
    ``append``) and returns the records written. ``turn_advantages`` (training episodes: per episode, the advantage
    of each turn, ``None`` for a turn that trained no token) goes into each record as ``turn_advantages``, beside its
    ``turn_rewards``.

    An image part of a message is written ``{"type": "image", "size": [w, h], "file": "images/<digest>.png"}``, the
    file relative to ``path``'s directory and saved before the line that names it. Files are named by a digest of
    their pixels, so a screen that recurs (a task's first screen in each of its chains, or at every validation) is
    stored once.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    records = [_record(trajectory, path.parent) for trajectory in trajectories]
    if turn_advantages is not None:
        for record, advantages in zip(records, turn_advantages, strict=True):
            record["turn_advantages"] = list(advantages)
    with path.open("a" if append else "w") as file:
        file.writelines(json.dumps(record) + "\n" for record in records)
    return records


def _record(trajectory: Trajectory, directory: Path) -> dict[str, Any]:
    record = trajectory_record(trajectory)
    for message, saved in zip(trajectory.messages, record["messages"], strict=True):
        content = message.get("content")
        if isinstance(content, str | None):
            continue
        for part, saved_part in zip(content, saved["content"], strict=True):
            if part.get("type") == "image":
                saved_part["file"] = _save_png(part["image"], directory)
    return record


def _save_png(image: Image, directory: Path) -> str:
    """Saves ``image`` as ``IMAGE_DIR/<digest>.png`` in ``directory`` unless a file of the same pixels is there, and
    returns that relative name. The file is written beside its name and moved into place: no reader sees half."""
    digest = hashlib.sha256(f"{image.mode} {image.size} ".encode() + image.tobytes()).hexdigest()[:24]
    name = f"{IMAGE_DIR}/{digest}.png"
    target = directory / name
    if not target.is_file():
        target.parent.mkdir(exist_ok=True)
        partial = target.with_name(f".{digest}.{os.getpid()}.tmp")
        image.save(partial, format="PNG")
        partial.replace(target)
    return name
