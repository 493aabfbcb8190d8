"""Reading a run directory for the report, tolerating what a killed, young or validation-less run leaves.

Every file is optional. A line that is not a JSON object (the last line of a run killed mid-write) is
skipped and named in :attr:`RunData.problems`; nothing here raises on the contents of a run directory.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from agentfly_train.run_dir import (
    KSCORES_FILE,
    METRICS_FILE,
    RESULT_FILE,
    RUN_CONFIG_FILE,
    SAMPLE_DIRS,
    STEP_FILE_PATTERN,
    parse_json,
    parse_jsonl,
)


@dataclass
class RunData:
    """What the report shows.

    Attributes:
        run_dir: The run directory.
        metrics: ``metrics.jsonl`` records (each has an int ``step``), in file order.
        samples: Split (``val``/``train``) -> step -> episode records (``trajectory_record`` lines).
        config: ``config.json``, if readable.
        result: ``result.json``, if readable.
        pass_at_k: ``eval_pass_at_k.json`` (what ``python -m agentfly_train eval`` writes: ``env``, ``k``,
            ``confidence``, ``overall`` and per-task ``tasks``), if present and well formed.
        images: The saved screenshots the episodes show, newest step first: name -> PNG file. An episode's image
            part names its file in ``file``, relative to the run directory once loaded
            (``train_samples/images/<digest>.png``; the sample line has it relative to its own directory).
        problems: One sentence per thing missing or unreadable.
    """

    run_dir: Path
    metrics: list[dict[str, Any]] = field(default_factory=list)
    samples: dict[str, dict[int, list[dict[str, Any]]]] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    result: dict[str, Any] = field(default_factory=dict)
    pass_at_k: dict[str, Any] = field(default_factory=dict)
    images: dict[str, Path] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def read_jsonl(path: Path, problems: list[str], key: str | None = None) -> list[dict[str, Any]]:
    """The JSON objects (with an integer ``key``, when given) of a JSON-lines file; other lines, or the file if it
    cannot be read, are skipped and reported in ``problems``."""
    try:
        text = path.read_text(errors="replace")
    except OSError as error:
        problems.append(f"{path.name}: cannot be read ({error.strerror})")
        return []
    return parse_jsonl(text, path, problems, key)


def _read_json(path: Path, problems: list[str]) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        value = parse_json(path.read_text(errors="replace"))
    except (OSError, json.JSONDecodeError):
        value = None
    if not isinstance(value, dict):
        problems.append(f"{path.name} is not a JSON object; ignored")
        return {}
    return value


def _metrics(run_dir: Path, problems: list[str]) -> list[dict[str, Any]]:
    path = run_dir / METRICS_FILE
    if not path.is_file():
        problems.append("no metrics.jsonl: the run has not logged a step yet (no curves)")
        return []
    records = read_jsonl(path, problems, key="step")
    if not records:
        problems.append("metrics.jsonl has no records yet (no curves)")
    return records


def _samples(run_dir: Path, split: str, problems: list[str]) -> dict[int, list[dict[str, Any]]]:
    directory = run_dir / SAMPLE_DIRS[split]
    steps: dict[int, list[dict[str, Any]]] = {}
    for path in sorted(directory.glob("step_*.jsonl")) if directory.is_dir() else []:
        match = STEP_FILE_PATTERN.fullmatch(path.name)
        if match:
            episodes = [r for r in read_jsonl(path, problems) if isinstance(r.get("messages", []), list)]
            steps[int(match.group(1))] = episodes
    return dict(sorted(steps.items()))


def _image_parts(episode: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The image parts of an episode's messages that name a file."""
    for message in episode.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        for part in content if isinstance(content, list) else []:
            if isinstance(part, dict) and isinstance(part.get("file"), str):
                yield part


def _images(run_dir: Path, samples: dict[str, dict[int, list[dict[str, Any]]]], problems: list[str]) -> dict[str, Path]:
    """The PNG files the episodes' image parts name, newest step first; each part's ``file`` is made relative to the
    run directory. A name outside its sample directory, not a PNG, or naming no file is dropped from its part."""
    images: dict[str, Path] = {}
    missing = 0
    for split, steps in samples.items():
        for step in sorted(steps, reverse=True):
            for part in (part for episode in steps[step] for part in _image_parts(episode)):
                name = PurePosixPath(part["file"])
                path = run_dir / SAMPLE_DIRS[split] / name
                if name.is_absolute() or ".." in name.parts or name.suffix != ".png" or not path.is_file():
                    del part["file"]
                    missing += 1
                    continue
                part["file"] = f"{SAMPLE_DIRS[split]}/{name}"
                images.setdefault(part["file"], path)
    if missing:
        problems.append(
            f"{missing} screenshots named by the saved episodes are missing or not PNG files in their sample "
            "directory; not shown"
        )
    return images


def _pass_at_k(run_dir: Path, problems: list[str]) -> dict[str, Any]:
    scores = _read_json(run_dir / KSCORES_FILE, problems)
    if not scores:
        return {}
    tasks, overall = scores.get("tasks"), scores.get("overall")
    if not (isinstance(tasks, list) and all(isinstance(t, dict) for t in tasks) and isinstance(overall, dict)):
        problems.append(f"{KSCORES_FILE} lacks its overall figures or its list of tasks; ignored")
        return {}
    return scores


def load_run(run_dir: str | Path) -> RunData:
    """Everything the report shows from ``run_dir`` (which must exist), with a sentence per missing piece."""
    run_dir = Path(run_dir)
    data = RunData(run_dir=run_dir)
    data.metrics = _metrics(run_dir, data.problems)
    data.config = _read_json(run_dir / RUN_CONFIG_FILE, data.problems)
    data.result = _read_json(run_dir / RESULT_FILE, data.problems)
    data.pass_at_k = _pass_at_k(run_dir, data.problems)
    data.samples = {split: _samples(run_dir, split, data.problems) for split in SAMPLE_DIRS}
    data.images = _images(run_dir, data.samples, data.problems)
    if not data.samples["val"]:
        data.problems.append(
            "no validation episodes (val_samples/): validation is off (data.val_size=0, trainer.test_freq=-1 "
            "without trainer.val_before_train) or trainer.log_val_generations=0"
        )
    if not data.samples["train"]:
        data.problems.append("no training episodes (train_samples/): set trainer.log_train_generations=N to save them")
    return data
