"""``metrics.jsonl`` (:class:`MetricsFile`) after a run killed mid-write: resume reads past a cut or garbled line."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from agentfly_train.callbacks import MetricsFile

GOOD = [{"step": 1, "loss": 0.5}, {"step": 2, "loss": 0.25}, {"step": 3, "loss": 0.125}]


def _metrics_file(tmp_path: Path, lines: list[str]) -> MetricsFile:
    path = tmp_path / "metrics.jsonl"
    path.write_text("\n".join(lines))
    return MetricsFile(path)


def _warnings(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return capsys.readouterr().err.splitlines()


def test_a_cut_last_line_is_dropped_with_one_warning(tmp_path, capsys):
    metrics = _metrics_file(tmp_path, [*map(json.dumps, GOOD), '{"step": 4, "lo'])
    assert metrics.read() == GOOD
    assert _warnings(capsys) == [
        f"warning: {metrics.path} line 4 is not a JSON object (the last line: still being written, or the run was "
        "killed mid-write); skipped"
    ]


def test_a_garbled_or_stepless_line_elsewhere_is_skipped_with_one_warning_each(tmp_path, capsys):
    first, *rest = map(json.dumps, GOOD)
    metrics = _metrics_file(tmp_path, [first, "\x00\x00garbage", '{"loss": 1.0}', *rest])
    assert metrics.read() == GOOD
    assert _warnings(capsys) == [
        f"warning: {metrics.path} line 2 is not a JSON object; skipped",
        f"warning: {metrics.path} line 3 has no integer 'step'; skipped",
    ]


def test_resuming_after_a_cut_line_keeps_the_readable_records_in_a_valid_file(tmp_path, capsys):
    metrics = _metrics_file(tmp_path, [*map(json.dumps, GOOD), '{"step": 4, "lo'])
    metrics.truncate_after(2)
    metrics.append(3, {"loss": 0.0})
    assert [json.loads(line) for line in metrics.path.read_text().splitlines()] == [*GOOD[:2], {"step": 3, "loss": 0.0}]
    assert len(_warnings(capsys)) == 1
    assert [path.name for path in tmp_path.iterdir()] == ["metrics.jsonl"]


def test_a_rewrite_that_fails_leaves_the_file_as_it_was(tmp_path, monkeypatch):
    metrics = _metrics_file(tmp_path, list(map(json.dumps, GOOD)))
    before = metrics.path.read_text()

    def disk_full(descriptor: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space left"):
        metrics.truncate_after(1)
    assert metrics.path.read_text() == before


def test_the_update_time_is_the_step_less_the_rollout_which_holds_the_weight_sync(tmp_path):
    """A vLLM step's weight sync (inside the rollout's time) can outlast a tiny model's update: counted once, the
    update stays the step's remainder (it read -0.04 s when the sync was taken off twice)."""
    from types import SimpleNamespace

    from agentfly_train.callbacks import AgentCallback

    trainer = SimpleNamespace(args=SimpleNamespace(output_dir=str(tmp_path)))
    callback = AgentCallback(trainer, test_freq=0, val_before_train=False, show_progress=False)
    logs = {"step_time": 1.0, "timing/rollout_s": 0.8, "timing/weight_sync_s": 0.3, "timing/env_s": 0.1}
    callback.on_log(None, SimpleNamespace(is_world_process_zero=True, global_step=1), None, logs=logs)
    (record,) = callback.metrics.read()
    assert record["timing/update_s"] == pytest.approx(0.2)
