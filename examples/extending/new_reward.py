"""A new reward: ``fn(response, ground_truth) -> RewardResult``, registered by name."""

from __future__ import annotations

from agentfly_envs import REWARDS, RewardResult
from agentfly_envs.rewards import GroundTruth, extract_final_answer, normalize_number


@REWARDS.register("within_one_percent")
def within_one_percent(response: str, ground_truth: GroundTruth) -> RewardResult:
    """1.0 when the response's final answer is within 1 % of a reference number, else 0.0.

    Components: ``relative_error`` (to the closest reference; 1.0 when there is no number to compare).
    """
    references = [ground_truth] if isinstance(ground_truth, str) else list(ground_truth)
    answer = extract_final_answer(response)
    try:
        value = float(normalize_number(answer or ""))
        error = min(abs(value - float(r)) / max(abs(float(r)), 1e-12) for r in references)
    except ValueError:  # no number in the answer or the reference
        error = 1.0
    return RewardResult(float(error <= 0.01), {"relative_error": error})
