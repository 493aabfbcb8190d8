"""Claiming a run directory for a run: a lock held while the run lives, and the check that the directory holds no
other run (a resumed run may change only :data:`RESUMABLE_KEYS`), or its deletion with ``trainer.overwrite``."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import socket
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

from agentfly_train.config.errors import ConfigError
from agentfly_train.config.loading import config_keys
from agentfly_train.config.schema import TrainerConfig
from agentfly_train.run_dir import LOCK_FILE, METRICS_FILE, RESULT_FILE, RUN_CONFIG_FILE, RUN_MODEL_DIR

RESUMABLE_KEYS = frozenset(
    {
        # how long it trains
        "trainer.total_training_steps",
        "trainer.total_epochs",
        # how it starts
        "trainer.resume_mode",
        "trainer.resume_from_path",
        "trainer.overwrite",
        "trainer.default_local_dir",
        # what it logs, validates and saves, and how often
        "trainer.logger",
        "trainer.log_val_generations",
        "trainer.log_train_generations",
        "trainer.test_freq",
        "trainer.val_before_train",
        "trainer.save_freq",
        "trainer.max_ckpt_to_keep",
        # how it is launched, and where its vLLM server is
        "trainer.launcher",
        "trainer.cpus_per_worker",
        "actor_rollout_ref.rollout.server_host",
        "actor_rollout_ref.rollout.server_port",
        "actor_rollout_ref.rollout.server_timeout",
    }
)
"""The configuration keys whose values a resumed run may change from those of the run in its directory (its
``config.json``); a difference in any other key makes a different run."""
_MISSING = object()


class RunDirBusyError(Exception):
    """Another process holds a run directory's lock; the message names it, e.g.
    ``pid 123 on host h since 2025-01-02 14:02:11``."""


class RunLock:
    """The lock on a run directory (:func:`lock_run_dir`), held until :meth:`release` (also on leaving a ``with``
    block) or the process's end: the kernel drops it when the process exits or is killed.

    Args:
        file: The open lock file; ``None`` holds nothing (the other processes of a launch).
    """

    def __init__(self, file: IO[str] | None) -> None:
        self._file = file

    def release(self) -> None:
        """Unlocks the directory and closes the file; a second call does nothing. The unlock also frees a lock
        that a child process still holds through the file it inherited."""
        if self._file is not None:
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *_: object) -> None:
        self.release()


def lock_run_dir(run_dir: Path) -> RunLock:
    """Locks the existing directory ``run_dir`` for this process, without waiting: an exclusive ``fcntl.flock`` on
    :data:`LOCK_FILE`, into which it writes this process's pid, host and start time.

    Raises:
        RunDirBusyError: another process (or another lock of this one) holds it; nothing is written.
    """
    file = (run_dir / LOCK_FILE).open("a+")  # not "w": that would erase the holder's details before the lock
    try:
        fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        file.seek(0)
        holder = _holder(file.read())
        file.close()
        raise RunDirBusyError(holder) from None
    file.truncate(0)
    holder = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.strftime("%Y-%m-%d %H:%M:%S")}
    file.write(json.dumps(holder))
    file.flush()
    return RunLock(file)


def _holder(text: str) -> str:
    """The holder a lock file names, in words."""
    try:
        holder = json.loads(text)
        return f"pid {holder['pid']} on host {holder['host']} since {holder['since']}"
    except (ValueError, TypeError, KeyError):  # written in the instant after the lock was taken
        return "a process that has not yet written its pid"


def run_files(run_dir: Path) -> list[str]:
    """The files and directories of a training run in ``run_dir`` (its configuration, result, metrics and
    models), sorted, directories with a trailing ``/``; none for a new directory."""
    names = {RUN_CONFIG_FILE, RESULT_FILE, METRICS_FILE}
    found = [path for path in run_dir.iterdir() if path.name in names or RUN_MODEL_DIR.fullmatch(path.name)]
    return sorted(path.name + ("/" if path.is_dir() else "") for path in found)


def saved_config(run_dir: Path) -> dict[str, Any]:
    """The configuration the run in ``run_dir`` wrote (its ``config.json``); empty where there is none or it is not
    a JSON object."""
    try:
        saved = json.loads((run_dir / RUN_CONFIG_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return saved if isinstance(saved, dict) else {}


def config_differences(saved: dict[str, Any], config: dict[str, Any], keys: Iterable[str]) -> list[str]:
    """The dotted ``keys`` whose values differ between a run's saved configuration and ``config`` (both as JSON
    holds them), in order; the keys of :data:`RESUMABLE_KEYS`, and keys that ``saved`` lacks (written before they
    existed), do not count."""
    differing = []
    for key in keys:
        before = _value(saved, key)
        if key not in RESUMABLE_KEYS and before is not _MISSING and before != _value(config, key):
            differing.append(key)
    return differing


def _value(tree: dict[str, Any], key: str) -> Any:
    """The value at dotted ``key`` in nested dicts; ``_MISSING`` where there is none."""
    value: Any = tree
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return _MISSING
        value = value[part]
    return value


def clear_run_dir(run_dir: Path) -> None:
    """Deletes everything in ``run_dir`` but its :data:`LOCK_FILE`."""
    for path in run_dir.iterdir():
        if path.name == LOCK_FILE:
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


def claim_run_dir(trainer: TrainerConfig, resolved: dict[str, Any]) -> RunLock:
    """Makes ``trainer.default_local_dir`` this run's, on the launch's main process: creates and locks it
    (:func:`lock_run_dir`), then checks that it holds no other run, or empties it with ``trainer.overwrite``
    (:func:`_take_over`). The launch's other processes touch nothing and get an unheld lock.

    Args:
        trainer: The run's ``trainer.*`` section.
        resolved: The run's whole configuration, as its ``config.json`` holds it (tuples as lists).

    Raises:
        ConfigError: another run holds the lock, or the directory holds another run (one line each).
    """
    if os.environ.get("RANK", "0") != "0":  # set by accelerate launch (torchrun) and Ray Train; PartialState is later
        return RunLock(None)
    run_dir = Path(trainer.default_local_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    try:
        lock = lock_run_dir(run_dir)
    except RunDirBusyError as holder:
        raise ConfigError(
            f"trainer.default_local_dir={run_dir} is in use by another run ({holder}): wait for it, or choose "
            "another trainer.default_local_dir"
        ) from None
    try:
        _take_over(trainer, resolved, run_dir)
    except BaseException:
        lock.release()
        raise
    return lock


def _take_over(trainer: TrainerConfig, resolved: dict[str, Any], run_dir: Path) -> None:
    """Lets this run into ``run_dir``, which it has locked: a directory without a run's files, or one whose run this
    run resumes (the same configuration ``resolved``, :func:`config_differences`), is taken as it is; with
    ``trainer.overwrite`` the run there is deleted (:func:`clear_run_dir`).

    Raises:
        ConfigError: the directory holds a different run, or any run's files with ``trainer.resume_mode=disable``,
            and ``trainer.overwrite`` is off; or overwriting would delete the working directory or the checkpoint
            ``trainer.resume_from_path`` names.
    """
    found = run_files(run_dir)
    if not found:
        return
    if trainer.overwrite:
        _check_deletable(trainer, run_dir)
        clear_run_dir(run_dir)
        print(f"note: trainer.overwrite=true: deleted the previous run in {run_dir} ({_few(found)})", file=sys.stderr)
        return
    if trainer.resume_mode == "disable":
        raise ConfigError(
            f"trainer.default_local_dir={run_dir} holds a run ({_few(found)}), and trainer.resume_mode=disable "
            "would start another among its files: resume it with trainer.resume_mode=auto, choose another "
            "trainer.default_local_dir, or set trainer.overwrite=true to delete it first"
        )
    differing = config_differences(saved_config(run_dir), resolved, config_keys())
    if differing:
        raise ConfigError(
            f"trainer.default_local_dir={run_dir} holds a different run (its config.json differs in "
            f"{_few(differing)}): choose another trainer.default_local_dir (or trainer.experiment_name), or set "
            "trainer.overwrite=true to delete that run first"
        )


def _check_deletable(trainer: TrainerConfig, run_dir: Path) -> None:
    """Raises ``ConfigError`` where emptying ``run_dir`` would delete the working directory's files or the
    checkpoint the run is to resume from."""
    root = run_dir.resolve()
    if Path.cwd().resolve().is_relative_to(root):
        raise ConfigError(
            f"trainer.overwrite=true would delete everything in trainer.default_local_dir={run_dir}, which holds the "
            "working directory: give the run a directory of its own"
        )
    resume = trainer.resume_from_path if trainer.resume_mode == "resume_path" else None
    if resume is not None and Path(resume).resolve().is_relative_to(root):
        raise ConfigError(
            f"trainer.overwrite=true would delete trainer.resume_from_path={resume}, which is in "
            f"trainer.default_local_dir={run_dir}: copy the checkpoint elsewhere first, or drop trainer.overwrite"
        )


def _few(names: list[str], most: int = 5) -> str:
    """``names`` joined with commas, the first ``most`` of them and how many more."""
    more = f" and {len(names) - most} more" if len(names) > most else ""
    return ", ".join(names[:most]) + more
