"""The TRL dataset of a run: tasks stored as JSON, prompts rendered only for the rows read."""

from __future__ import annotations

from agentfly_train.data import trl_dataset


def test_prompts_are_rendered_for_the_rows_read_and_only_those(capfd):
    rows = [{"question": f"What is {i} times 3?", "answer": str(3 * i), "extra": i} for i in range(10_000)]
    rendered: list[dict] = []

    def render(row: dict) -> str:
        rendered.append(row)
        return f"<user>{row['question']}</user>"

    dataset = trl_dataset(rows, render)
    assert rendered == [] and len(dataset) == 10_000
    assert "hashed" not in capfd.readouterr().err  # datasets fingerprints the transform without pickling the renderer
    batch = dataset[[7, 4242]]
    assert batch["prompt"] == ["<user>What is 7 times 3?</user>", "<user>What is 4242 times 3?</user>"]
    assert rendered == [rows[7], rows[4242]]  # the JSON round trip keeps every field
    assert dataset[5]["prompt"] == "<user>What is 5 times 3?</user>" and len(rendered) == 3
