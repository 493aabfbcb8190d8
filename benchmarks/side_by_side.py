"""Timing this checkout's ``agentfly_envs`` against the one of another git revision, in the same run.

The other revision's package is exported with ``git archive`` into a temporary folder; both sides run the same
benchmark code in subprocesses that differ only in ``PYTHONPATH`` (which package ``import agentfly_envs`` finds),
in interleaved rounds (A B, B A, A B, ...), so that the load of a shared machine falls on both alike.
"""

from __future__ import annotations

import io
import json
import os
import statistics
import subprocess
import sys
import tarfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "agentfly_envs"


def export_revision(revision: str, destination: Path) -> Path:
    """Writes ``agentfly_envs/`` as it is at ``revision`` of this repository into ``destination``.

    Returns:
        ``destination``, the folder to put on ``PYTHONPATH``.

    Raises:
        SystemExit: ``revision`` is not a revision of this repository, or git is missing (one line saying which).
    """
    try:
        archive = subprocess.run(
            ["git", "archive", "--format=tar", revision, PACKAGE], cwd=REPO_ROOT, capture_output=True, check=False
        )
    except FileNotFoundError:
        raise SystemExit("--baseline-rev needs git on PATH") from None
    if archive.returncode != 0:
        why = archive.stderr.decode(errors="replace").strip().splitlines()
        raise SystemExit(f"--baseline-rev {revision}: git archive failed: {why[-1] if why else archive.returncode}")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(destination, filter="data")
    return destination


def run_child(script: Path, package_root: Path, arguments: Sequence[str], timeout_s: float = 600) -> dict[str, Any]:
    """Runs ``python script *arguments`` with ``package_root`` first on ``PYTHONPATH``; returns the JSON object
    that the script's last line of output holds.

    Raises:
        RuntimeError: the script failed, or printed no JSON line (its output's end in the message).
    """
    path = os.pathsep.join(filter(None, [str(package_root), os.environ.get("PYTHONPATH")]))
    result = subprocess.run(
        [sys.executable, str(script), *arguments],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
        env={**os.environ, "PYTHONPATH": path},
    )
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        raise RuntimeError(f"{script.name} with {package_root} failed: {(result.stdout + result.stderr)[-2000:]}")
    return json.loads(lines[-1])


def interleaved(
    current: Callable[[int], dict[str, Any]], baseline: Callable[[int], dict[str, Any]], rounds: int
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """``rounds`` pairs ``(current(n), baseline(n))`` for rounds ``n = 0, 1, ...``, which side runs first
    alternating from round to round."""
    pairs = []
    for number in range(rounds):
        if number % 2:
            second = baseline(number)
            pairs.append((current(number), second))
        else:
            first = current(number)
            pairs.append((first, baseline(number)))
    return pairs


def ratio_summary(ratios: Sequence[float]) -> dict[str, float]:
    """Min, median and max of the per-round ratios (current / baseline)."""
    return {"min": min(ratios), "median": statistics.median(ratios), "max": max(ratios)}
