"""Every phase of a run shows progress on the console: the warm start, validation and RL each get a bar."""

from types import SimpleNamespace

import pytest

from agentfly_train.progress import StepBar, console_bar
from tests.helpers.runs import quickstart_config


def test_a_step_bar_advances_with_the_steps_and_shows_the_latest_logged_values(capfd):
    bar = console_bar(3, "warm start")
    callback, main = StepBar(bar, {"loss": "loss"}), SimpleNamespace(is_world_process_zero=True)
    for loss in (2.0, 1.23456):
        callback.on_step_end(None, main, None)
        callback.on_log(None, main, None, logs={"loss": loss, "learning_rate": 1e-3})
    callback.on_step_end(None, SimpleNamespace(is_world_process_zero=False), None)  # another process: no bar
    bar.close()
    assert bar.n == 2 and bar.postfix == "loss=1.235"
    assert "warm start:  67%" in capfd.readouterr().err


@pytest.mark.slow
def test_the_warm_start_validation_and_rl_each_show_a_bar(tmp_path, capfd):
    from agentfly_train.train import run

    overrides = ["sft.steps=6", "trainer.total_training_steps=1", "data.val_size=4"]
    run(quickstart_config([*overrides, f"trainer.default_local_dir={tmp_path}"]), show_progress=True)
    shown = capfd.readouterr().err.replace("\r", "\n")
    assert "warm start: 100%" in shown and "6/6" in shown and "loss=" in shown
    assert "validate: 100%" in shown and "4/4" in shown and "acc=" in shown
    assert "train: 100%" in shown and "1/1" in shown and "reward=" in shown
