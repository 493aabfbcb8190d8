"""The evaluation command: a model and an env id in, accuracy and trajectories out."""

from __future__ import annotations

import json

from agentfly_train.__main__ import main


def test_eval_command_writes_one_trajectory_per_validation_row(tmp_path, capsys):
    status = main(
        [
            "eval",
            "--config",
            "quickstart",
            "data.val_size=3",
            "actor_rollout_ref.model.tiny_hidden_size=32",
            "agent.max_tokens_per_turn=8",
            f"trainer.default_local_dir={tmp_path}",
            "--samples",
            "1",
        ]
    )
    assert status == 0
    records = [json.loads(line) for line in (tmp_path / "eval.jsonl").read_text().splitlines()]
    assert len(records) == 3
    assert all(r["messages"][0]["role"] == "system" and r["messages"][-1]["role"] == "assistant" for r in records)
    assert "agentfly/Arith-Calc: accuracy" in capsys.readouterr().out
