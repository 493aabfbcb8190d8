"""HotpotQA (Yang et al., 2018): multi-hop questions whose answer needs facts from several paragraphs.

Rows in the Hub's ``distractor`` layout: ``question``, ``answer``, ``supporting_facts``
(``{"title": [...], "sent_id": [...]}``: the paragraphs the answer rests on) and ``context``
(``{"title": [...], "sentences": [[...], ...]}``: those paragraphs among distractors, which the
``search`` tool's ``context`` backend indexes). The original JSON layout (lists of pairs) works too.
The golden solution searches for each supporting paragraph's title, then answers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentfly_envs.tasks.base import TASKS, GoldenSolution, Row
from agentfly_envs.tasks.files import DataFiles, LoadedTasks

OFFLINE_HINT = (
    "To run offline, pass data_files= a JSON list, JSONL or parquet file of HotpotQA rows ('question', "
    "'answer', and 'context' paragraphs for the default search backend), e.g. "
    "gymnasium.make('agentfly/HotpotQA-Search', data_files='data/hotpotqa_sample.jsonl')."
)


def supporting_titles(row: Mapping[str, Any]) -> list[str]:
    """The titles of the paragraphs a row's answer rests on, each once, in order.

    Example:
        >>> supporting_titles({"supporting_facts": {"title": ["B", "A", "B"], "sent_id": [0, 1, 2]}})
        ['B', 'A']
    """
    facts = row.get("supporting_facts") or {}
    if isinstance(facts, Mapping):
        titles = facts.get("title", [])
    else:  # the original layout: [[title, sentence index], ...]
        titles = [fact[0] for fact in facts if isinstance(fact, Sequence) and fact]
    return list(dict.fromkeys(str(title) for title in titles))


@TASKS.register("hotpotqa")
class HotpotQATasks(LoadedTasks):
    """HotpotQA questions, from the Hub by default or from local files.

    Args:
        data_files: Local data instead of the Hub (JSON list, JSONL or parquet; or ``{split: files}``).
        split: Split to use (``train`` or ``validation`` on the Hub).
        path: Hub dataset id.
        name: Hub dataset config: ``distractor`` (with ``context`` paragraphs) or ``fullwiki``.
    """

    required_fields = ("question", "answer")

    def __init__(
        self,
        data_files: DataFiles | None = None,
        split: str = "validation",
        path: str = "hotpotqa/hotpot_qa",
        name: str | None = "distractor",
    ) -> None:
        self.load(path, name, split, data_files, self.required_fields, OFFLINE_HINT)

    def system_prompt(self, answer_by_tool: bool, tools: Sequence[str]) -> str:
        finish = (
            "When you know the answer, call the answer tool with it."
            if answer_by_tool
            else "When you know the answer, reply without calling a tool and write it as \\boxed{answer}."
        )
        return (
            "Answer the question. It needs facts from more than one document: search for them one at a time "
            f"with the search tool, and use what you find. The answer is a short phrase, a name or yes/no. {finish}"
        )

    def user_prompt(self, row: Row) -> str:
        return row["question"].strip()

    def ground_truth(self, row: Row) -> list[str]:
        return [row["answer"]]

    def golden(self, row: Row) -> GoldenSolution:
        return GoldenSolution(answer=row["answer"], queries=tuple(supporting_titles(row)))
