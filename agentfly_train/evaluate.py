"""Evaluation: a model and an env id in, accuracy, mean reward, pass@k and mean@k, and trajectories out."""

from __future__ import annotations

import json
import math
import random
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from agentfly_train.config.errors import ConfigError
from agentfly_train.config.loading import load_config
from agentfly_train.config.schema import TrainConfig
from agentfly_train.run_dir import EVAL_FILE, KSCORES_FILE, RUN_CONFIG_FILE, RUN_MODEL_DIR

RUN_SETTINGS = (
    "agent",
    "custom_reward_function",
    "data",
    "actor_rollout_ref.rollout.response_length",
    "actor_rollout_ref.rollout.val_temperature",
    "actor_rollout_ref.rollout.top_p",
    "actor_rollout_ref.rollout.top_k",
    "actor_rollout_ref.model.trust_remote_code",
)
"""The keys of a run's saved configuration that an eval of one of its models starts from: what the run's validation
episodes were (env and its kwargs, tools, reward, format, chat template, data, turn and token budgets, sampling)."""
NOT_FROM_RUN = ("model_name_or_path", "backend")
"""Keys of ``agent`` left at their defaults: the model is the one named on the command line, and the generation
backend is ``actor_rollout_ref.rollout.name`` as eval is configured (``hf`` unless set)."""


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimate of pass@k from ``n`` samples of which ``c`` are correct (Chen et al., 2021):
    ``1 - C(n - c, k) / C(n, k)``, the chance that k samples drawn without replacement include a correct one.

    Example:
        >>> pass_at_k(4, 1, 1), pass_at_k(4, 1, 2), pass_at_k(4, 3, 2), pass_at_k(4, 0, 4)
        (0.25, 0.5, 1.0, 0.0)
    """
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


BOOTSTRAP_RESAMPLES = 2000
"""Resamples of a percentile-bootstrap interval (seeded: the same outcomes give the same interval)."""


def bootstrap_interval(
    items: Sequence[Any], statistic: Callable[[Sequence[Any]], float], confidence: float
) -> list[float]:
    """The percentile-bootstrap confidence interval of ``statistic(items)``: ``items`` resampled with replacement
    :data:`BOOTSTRAP_RESAMPLES` times (seed 0), the interval the central ``confidence`` share of the resampled
    statistics spans. It stays within the statistic's range (pass@k within [0, 1]), where a normal approximation
    over few tasks does not.

    Example:
        >>> bootstrap_interval([0.0, 1.0, 1.0, 0.0], statistics.fmean, 0.95)
        [0.0, 1.0]
    """
    rng = random.Random(0)
    stats = sorted(statistic(rng.choices(items, k=len(items))) for _ in range(BOOTSTRAP_RESAMPLES))
    tail = (1 - confidence) / 2
    return [stats[int(tail * (len(stats) - 1))], stats[math.ceil((1 - tail) * (len(stats) - 1))]]


def k_scores(outcomes: Sequence[Sequence[tuple[bool, float]]], k: int, confidence: float = 0.95) -> dict[str, Any]:
    """pass@k and mean@k per task and over tasks, each with its :func:`bootstrap_interval` (per task over its
    samples, overall over tasks).

    Args:
        outcomes: Per task, its n samples as ``(correct, reward)`` (n >= k).
        k: The k of pass@k and mean@k.
        confidence: The level of the intervals.

    Returns:
        ``{"k", "confidence", "tasks": [{"task", "n", "correct", "pass@k", "pass@k_ci", "mean@k", "mean@k_ci"}],
        "overall": {"pass@k", "pass@k_ci", "mean@k", "mean@k_ci", "tasks"}}``; mean@k (the expected mean reward of
        k samples) is the mean of all n, which is its unbiased estimate; the overall figures are means over tasks.
    """

    def task_pass(samples: Sequence[tuple[bool, float]]) -> float:
        return pass_at_k(len(samples), sum(correct for correct, _ in samples), k)

    def task_mean(samples: Sequence[tuple[bool, float]]) -> float:
        return statistics.fmean(reward for _, reward in samples)

    tasks = [
        {
            "task": index,
            "n": len(samples),
            "correct": sum(correct for correct, _ in samples),
            "pass@k": task_pass(samples),
            "pass@k_ci": bootstrap_interval(samples, task_pass, confidence),
            "mean@k": task_mean(samples),
            "mean@k_ci": bootstrap_interval(samples, task_mean, confidence),
        }
        for index, samples in enumerate(outcomes)
    ]
    overall: dict[str, Any] = {"tasks": len(tasks)}
    for name in ("pass@k", "mean@k"):
        values = [task[name] for task in tasks]
        overall[name] = statistics.fmean(values)
        overall[f"{name}_ci"] = bootstrap_interval(values, statistics.fmean, confidence)
    return {"k": k, "confidence": confidence, "tasks": tasks, "overall": overall}


def run_settings(model_path: str) -> tuple[str, dict[str, Any]] | None:
    """The saved settings of the run a model belongs to, for :func:`load_config`'s ``base``.

    Args:
        model_path: The model to evaluate; ``<run dir>/final`` or ``<run dir>/checkpoint-K`` of a run whose run
            directory holds its configuration (``config.json``).

    Returns:
        ``(path of the run's config.json, settings)``: the :data:`RUN_SETTINGS` keys of the run, and the run
        directory as ``trainer.default_local_dir`` (so ``eval.jsonl`` goes there); ``None`` for a model outside a
        run directory.

    Raises:
        ConfigError: the run's ``config.json`` is not a JSON object.
    """
    model_dir = Path(model_path).expanduser()
    path = model_dir.parent / RUN_CONFIG_FILE
    if not (RUN_MODEL_DIR.fullmatch(model_dir.name) and path.is_file()):
        return None
    try:
        saved = json.loads(path.read_text())
        if not isinstance(saved, dict):
            raise ValueError(f"a JSON {type(saved).__name__}, not an object")
    except (OSError, ValueError) as error:  # ValueError: also bad JSON or bytes that are not UTF-8
        raise ConfigError(
            f"cannot read the run's settings in {path} ({error}): it should be the JSON object the run wrote; "
            "restore it, or evaluate a copy of the model kept outside the run directory"
        ) from None
    settings: dict[str, Any] = {"trainer": {"default_local_dir": str(model_dir.parent)}}
    for key in RUN_SETTINGS:
        *parents, name = key.split(".")
        source, target = saved, settings
        for part in parents:
            source, target = source.get(part, {}), target.setdefault(part, {})
        if name in source:
            target[name] = source[name]
    settings["agent"] = {key: value for key, value in settings.get("agent", {}).items() if key not in NOT_FROM_RUN}
    return str(path), settings


def eval_config(overrides: Sequence[str], config_files: Sequence[str | Path]) -> tuple[TrainConfig, str | None]:
    """The configuration of ``python -m agentfly_train eval``: ``config_files`` and ``overrides`` on the settings
    of the run the model comes from (:func:`run_settings`), or on the defaults for a model outside a run.

    Returns:
        ``(configuration, path of the run's config.json or None)``.

    Raises:
        ConfigError: a bad key or value; for one from the run's settings (e.g. written by another version), the
            message names the file.
    """
    draft = load_config(overrides, config_files, check=False)
    found = run_settings(draft.model_path) if draft.model_path else None
    if found is None:
        return load_config(overrides, config_files), None
    try:
        return load_config(overrides, config_files, base=found), found[0]
    except ConfigError as error:
        raise ConfigError(
            f"{error}; eval starts from the run's settings in {found[0]}: set the key on the command line, or "
            "remove it from that file"
        ) from None


def evaluate(config: TrainConfig) -> tuple[dict[str, float], list[dict[str, Any]], Path]:
    """Runs the validation rows (``data.val_files`` or the env's task source with ``data.val_env_kwargs``)
    through the env with the configured model, sampling at ``actor_rollout_ref.rollout.val_temperature`` on the
    generation backend of ``actor_rollout_ref.rollout.name`` (given the model's weights if it keeps its own).

    Returns:
        ``(statistics, trajectory records, path of eval.jsonl)``; statistics as in
        :func:`~agentfly_train.rollout.summarize` (``accuracy``, ``reward/mean``, ...) plus ``pass@k``,
        ``mean@k`` and their intervals ``pass@k_ci``, ``mean@k_ci`` (:func:`k_scores` over ``eval.n`` samples of each
        task, also written with the per-task figures to :data:`KSCORES_FILE` beside ``eval.jsonl``).
    """
    from agentfly_envs.contract import env_contract
    from agentfly_train.build import agent_rollout
    from agentfly_train.data import env_kwargs, has_validation, make_env, val_rows
    from agentfly_train.devices import training_device
    from agentfly_train.generation.base import GENERATION_BACKENDS, Policy, backend_of, build_backend
    from agentfly_train.judge_server import serve_reference, stopped_on_error
    from agentfly_train.models import load_policy, make_codec
    from agentfly_train.quiet import no_progress_bars
    from agentfly_train.samples import write_samples
    from agentfly_train.sharding import engine_weights

    no_progress_bars()
    if not has_validation(config):
        raise ConfigError("nothing to evaluate: set data.val_files (or agent.env to an env with its own tasks)")
    kwargs = env_kwargs(config, validation=True)
    env = make_env(config, validation=True)
    rows = val_rows(config, env)
    backend_of(config).preflight(config)
    model, tokenizer = load_policy(config)
    device = training_device(config.trainer.device)
    model.to(device)
    codec = make_codec(config, tokenizer, env, rows[0])
    codec.stop_generation(model)
    truncation_reward = env_contract(env).truncation_reward
    env.close()
    backend = build_backend(config, Policy.plain(model, tokenizer, codec.images))
    if backend.has_own_weights:
        backend.load_weights(engine_weights(model))
    samples = config.eval.samples
    async_episodes = GENERATION_BACKENDS.async_episodes(config.actor_rollout_ref.rollout, config.agent.backend)
    judge_server = serve_reference(config, model, tokenizer, device)
    with stopped_on_error(judge_server):
        agent = agent_rollout(config, codec, kwargs, async_episodes, truncation_reward, judge_server)
    try:
        stats, trajectories = agent.evaluate(
            backend, [row for row in rows for _ in range(samples)], config.data.val_batch_size
        )
    finally:
        agent.close()
        backend.close()
    path = Path(config.trainer.default_local_dir) / EVAL_FILE
    records = write_samples(path, trajectories)
    outcomes = [
        [(t.correct, t.reward) for t in trajectories[start : start + samples]]
        for start in range(0, len(trajectories), samples)
    ]
    scores = {"env": config.env_id, **k_scores(outcomes, config.eval.k, config.eval.confidence)}
    (path.parent / KSCORES_FILE).write_text(json.dumps(scores, indent=1))
    stats.update({f"{name}": value for name, value in scores["overall"].items() if name != "tasks"})
    return stats, records, path
