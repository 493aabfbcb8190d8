"""Which ``metrics.jsonl`` keys the report plots, grouped as one reads a run: outcome, optimisation,
episode shape, speed. Each chart is a list of series; a series is a key, or a key prefix that becomes one
series per key under it (e.g. the finish reasons)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Chart:
    """One plot.

    Attributes:
        title: Shown above the plot.
        series: ``(label, key)`` pairs; a key ending in ``/`` plots every key under it, labelled by the label and
            the rest of the key.
        help: What the chart tells about the agent, shown under the title.
        unit: The y axis title.
    """

    title: str
    series: tuple[tuple[str, str], ...]
    help: str
    unit: str = ""


GROUPS: tuple[tuple[str, tuple[Chart, ...]], ...] = (
    (
        "Reward and accuracy",
        (
            Chart("Reward", (("train", "reward/mean"), ("validation", "val/reward/mean")), "Mean episode reward."),
            Chart(
                "Accuracy",
                (("train", "accuracy"), ("validation", "val/accuracy")),
                "Episodes whose answer is correct; reward rising without accuracy: the reward is being gamed.",
                "fraction",
            ),
            Chart(
                "Judge's scores",
                (("train ", "reward/judge/"), ("validation ", "val/reward/judge/")),
                "An LLM judge's mean score and, with a rubric, each criterion's (agent.reward_name=judge, rubric).",
                "score",
            ),
            Chart(
                "Groups without signal",
                (("zero reward std", "frac_reward_zero_std"),),
                "Groups whose rollouts all got the same reward: GRPO learns nothing from them.",
                "fraction",
            ),
        ),
    ),
    (
        "Optimisation",
        (
            Chart("Policy loss", (("policy", "actor/pg_loss"), ("total", "loss")), "The clipped surrogate loss."),
            Chart(
                "KL",
                (
                    ("policy vs old (ppo_kl)", "actor/ppo_kl"),
                    ("KL loss vs reference", "actor/kl_loss"),
                    ("KL in reward", "actor/reward_kl_penalty"),
                ),
                "Drift of the policy; a spike often comes before a collapse.",
                "nats/token",
            ),
            Chart("Entropy", (("entropy", "actor/entropy"),), "Near zero: the policy stopped exploring.", "nats"),
            Chart(
                "Clip fraction",
                (("upper", "actor/pg_clipfrac"), ("lower", "actor/pg_clipfrac_lower")),
                "Tokens whose ratio was clipped; high: steps too large for the clip range.",
                "fraction",
            ),
            Chart("Gradient norm", (("policy", "grad_norm"), ("critic", "critic/grad_norm")), "Before clipping."),
            Chart("Critic loss", (("value loss", "critic/vf_loss"),), "PPO's value loss (gae only)."),
            Chart(
                "Explained variance",
                (("critic", "critic/vf_explained_var"),),
                "How much of the returns the critic predicts (1 is perfect, <= 0 useless).",
            ),
        ),
    ),
    (
        "Episode shape",
        (
            Chart("Turns", (("train", "episode/turns"), ("validation", "val/episode/turns")), "Assistant turns."),
            Chart(
                "Tool calls",
                (("train", "episode/tool_calls"), ("validation", "val/episode/tool_calls")),
                "Dropping to zero: the model stopped using its tools.",
                "per episode",
            ),
            Chart(
                "Response length",
                (
                    ("train, all tokens", "episode/response_length"),
                    ("train, sampled", "episode/sampled_tokens"),
                    ("validation, all tokens", "val/episode/response_length"),
                ),
                "Tokens after the prompt; sampled excludes tool outputs.",
                "tokens",
            ),
            Chart(
                "Finish reasons (train)",
                (("", "finish_reason/"),),
                "stop: answered; max_turns: ran out of turns (looping?); length: ran out of tokens.",
                "fraction",
            ),
            Chart(
                "Finish reasons (validation)",
                (("", "val/finish_reason/"),),
                "As above, on the validation tasks.",
                "fraction",
            ),
            Chart(
                "Tool error rate by kind (train)",
                (("all", "episode/tool_error_rate"), ("", "episode/tool_error_rate/")),
                "Errors per tool call; rising while reward is flat: the parser and the model disagree.",
                "per call",
            ),
            Chart(
                "Tool error rate by kind (validation)",
                (("all", "val/episode/tool_error_rate"), ("", "val/episode/tool_error_rate/")),
                "As above, on the validation tasks.",
                "per call",
            ),
        ),
    ),
    (
        "Speed",
        (
            Chart(
                "Step time",
                (
                    ("step", "step_time"),
                    ("rollout", "timing/rollout_s"),
                    ("env (inside rollout)", "timing/env_s"),
                    ("weight sync (inside rollout)", "timing/weight_sync_s"),
                    ("update", "timing/update_s"),
                    ("validation", "val/timing/s"),
                ),
                "Where a step's wall time goes.",
                "s",
            ),
            Chart(
                "Generation throughput",
                (("sampled tokens/s", "throughput/gen_tokens_per_s"),),
                "Sampled tokens per second of generation (rollout time minus env time).",
                "tokens/s",
            ),
            Chart(
                "Idle shares",
                (("generator", "timing/generator_idle_frac"), ("trainer", "timing/trainer_idle_frac")),
                "Share of each step's wall time the engine had no request, and the trainer waited for episodes.",
                "fraction",
            ),
            Chart(
                "Off-policy staleness",
                (
                    ("mean", "async/staleness_mean"),
                    ("max", "async/staleness_max"),
                    ("in flight at the take", "async/in_flight"),
                    ("dropped (total)", "async/dropped"),
                ),
                "async_training: policy versions between the trainer and the episodes it trains, episodes still in "
                "flight when it took them, and episodes dropped for staleness.",
            ),
        ),
    ),
)
"""The report's charts; a chart with no data in the run is listed as not logged."""


def _points(records: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    """``(steps, values)`` of ``key``: one point per step (the last finite value logged at it)."""
    by_step: dict[int, float] = {}
    for record in records:
        value = record.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and value == value:
            by_step[record["step"]] = float(value)
    steps = sorted(by_step)
    return steps, [by_step[step] for step in steps]


def _expand(series: tuple[tuple[str, str], ...], keys: set[str]) -> list[tuple[str, str, bool]]:
    """``(label, key, drop_if_all_zero)``: a prefix's keys, labelled by its label and the rest of each key, are dropped
    when they stay 0 (error kinds that never happened); a named key is kept."""
    expanded = []
    for label, key in series:
        if key.endswith("/"):
            expanded += [(label + name[len(key) :], name, True) for name in sorted(keys) if name.startswith(key)]
        else:
            expanded.append((label, key, False))
    return expanded


def chart_data(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The charts of :data:`GROUPS` for ``metrics.jsonl`` records.

    Returns:
        Per group ``{"title", "charts": [{"title", "help", "unit", "series": [{"name", "key", "x", "y"}]}],
        "missing": [chart titles with no data]}``; x is the step.
    """
    keys = {key for record in records for key in record}
    groups = []
    for title, charts in GROUPS:
        shown, missing = [], []
        for chart in charts:
            series = []
            for label, key, drop_if_all_zero in _expand(chart.series, keys):
                x, y = _points(records, key)
                if x and not (drop_if_all_zero and not any(y)):
                    series.append({"name": label, "key": key, "x": x, "y": y})
            if series:
                shown.append({"title": chart.title, "help": chart.help, "unit": chart.unit, "series": series})
            else:
                missing.append(chart.title)
        groups.append({"title": title, "charts": shown, "missing": missing})
    return groups
