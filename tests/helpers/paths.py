"""The repository's root and the sample data files the tests run offline on."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

GSM8K_SAMPLE = REPO_ROOT / "data" / "gsm8k_sample.jsonl"
MBPP_SAMPLE = REPO_ROOT / "data" / "mbpp_sample.jsonl"
HUMANEVAL_SAMPLE = REPO_ROOT / "data" / "humaneval_sample.jsonl"
HOTPOTQA_SAMPLE = REPO_ROOT / "data" / "hotpotqa_sample.jsonl"
OFFLINE_KWARGS = {
    "agentfly/GSM8K-Calc": {"data_files": str(GSM8K_SAMPLE)},
    "agentfly/Math-Python": {"data_files": str(GSM8K_SAMPLE)},
    "agentfly/Code-Tests": {"data_files": str(MBPP_SAMPLE)},
    "agentfly/HotpotQA-Search": {"data_files": str(HOTPOTQA_SAMPLE)},
    "agentfly/Files": {"data_files": str(REPO_ROOT / "data" / "guide" / "math_train.json")},
}
"""``gym.make`` kwargs that let each registered id run offline, on the project's sample data."""
