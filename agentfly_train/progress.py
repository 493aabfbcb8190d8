"""Console progress bars of a run's phases: the warm start, RL, validation (quiet under ``--no-progress``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from transformers import TrainerCallback


def console_bar(total: int, label: str, initial: int = 0, leave: bool = True) -> Any:
    """A console progress bar (tqdm) of ``total`` steps named ``label``; ``leave=False`` erases it when closed."""
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc=label, dynamic_ncols=True, leave=leave)


def show_latest(bar: Any, logs: Mapping[str, Any], shown: Mapping[str, str]) -> None:
    """Shows beside ``bar`` the values of ``logs`` named in ``shown`` (log key -> short name), three decimals."""
    values = {short: f"{logs[key]:.3f}" for key, short in shown.items() if logs.get(key) is not None}
    if values:
        bar.set_postfix(values, refresh=True)


class StepBar(TrainerCallback):
    """Advances ``bar`` (:func:`console_bar`) by a Trainer's optimiser steps and shows its latest ``shown`` log
    values (:func:`show_latest`), on the main process; whoever made the bar closes it (it may span trainers)."""

    def __init__(self, bar: Any, shown: Mapping[str, str]) -> None:
        self.bar = bar
        self.shown = shown

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.is_world_process_zero:
            self.bar.update(1)

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if state.is_world_process_zero and logs:
            show_latest(self.bar, logs, self.shown)
