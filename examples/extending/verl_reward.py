"""A reward function written for verl (``custom_reward_function.path`` / ``.name``): its signature, not agentfly's."""

from __future__ import annotations

import re


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    """1.0 when the last number of the answer equals the reference, 0.1 for an answer with a number, else 0.0."""
    numbers = re.findall(r"-?\d+(?:\.\d+)?", solution_str.replace(",", ""))
    if not numbers:
        return {"score": 0.0, "has_number": 0.0}
    correct = float(numbers[-1]) == float(str(ground_truth).replace(",", ""))
    return {"score": 1.0 if correct else 0.1, "has_number": 1.0}
