"""``python -m agentfly_train [train] [--config FILE ...] [key=value ...]`` trains; ``... eval ...`` evaluates.

With no arguments it runs the embedded quickstart (the packaged preset ``quickstart``, also
``--config quickstart``): a tiny local model on ``agentfly/Arith-Calc`` (SFT warm start on golden
demonstrations, then multi-turn GRPO), on CPU, with no network, and prints validation accuracy before and
after RL. With arguments, the defaults are those of AgentFly's training guide. Under
``accelerate launch -m agentfly_train`` the same command trains on every process of the launch; with
``trainer.launcher=ray`` (or ``RAY_ADDRESS`` set) it starts ``trainer.nnodes x trainer.n_gpus_per_node`` Ray
Train workers on the cluster, each such a process.
``--dry-run`` resolves the configuration, builds the env and the tokenizer (not the model), prints what a run
would do, and exits.

``python -m agentfly_train eval [--config FILE] actor_rollout_ref.model.path=DIR [agent.env=ID ...]``
runs the validation rows through the env with the model and prints a summary (accuracy, mean reward, pass@k);
the trajectories go to ``<trainer.default_local_dir>/eval.jsonl`` (``--samples N`` also prints N as JSON). A model
in a run directory (``RUN_DIR/final``, ``RUN_DIR/checkpoint-K``) is evaluated on that run's env, data, template and
budgets (its ``config.json``), with the config files and overrides on top, and writes ``RUN_DIR/eval.jsonl``.

``python -m agentfly_train report RUN_DIR [--out FILE]`` writes the run's self-contained HTML report (curves and
episode browser; default ``RUN_DIR/report.html``) and prints its path; it works while the run is going.

``python -m agentfly_train list KIND [agent.imports=[...]]`` lists what the configuration can name: ``envs``,
``tools``, ``rewards``, ``parsers``, ``estimators``, ``backends``, ``launchers``, ``templates``, or every ``keys``
with its default and a line of help (:mod:`agentfly_train.catalog`); with ``agent.imports``, the user's own too.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import shlex
import sys
from collections.abc import Sequence

from agentfly_train.checkpoints import CheckpointDiskFullError
from agentfly_train.config.errors import ConfigError
from agentfly_train.config.loading import QUICKSTART, load_config
from agentfly_train.config.schema import TrainConfig

COMMANDS = ("train", "eval", "report", "list")


def _parser() -> argparse.ArgumentParser:
    from agentfly_train.catalog import LISTINGS

    parser = argparse.ArgumentParser(
        prog="python -m agentfly_train",
        description="Train (default) or evaluate (`eval`) an agent on an agentfly env; `report RUN_DIR` writes a "
        f"run's HTML report; `list {{{','.join(LISTINGS)}}}` lists what the configuration can name.",
        epilog="Overrides are Hydra-style dotted keys, e.g. agent.env=agentfly/GSM8K-Calc data.train_batch_size=16; "
        "`python -m agentfly_train list keys` prints every key with its default. User code (tools, rewards, "
        "parsers, envs, estimators, backends) loads with agent.imports=[my_module,my_file.py] and "
        "custom_reward_function.path=FILE.py custom_reward_function.name=FUNCTION.",
    )
    parser.add_argument("--config", action="append", default=[], help="YAML config file(s), merged in order")
    parser.add_argument(
        "--samples", type=int, default=0, help="eval: print the first N trajectories as JSON (all are in eval.jsonl)"
    )
    parser.add_argument("--no-progress", action="store_true", help="no console progress bar")
    parser.add_argument(
        "--dry-run", action="store_true", help="print the resolved run (env, batches, token budgets) and exit"
    )
    parser.add_argument("--out", help="report: the HTML file to write (default RUN_DIR/report.html)")
    parser.add_argument(
        "overrides",
        nargs="*",
        help="key=value overrides; start with `eval` to evaluate, `report RUN_DIR` for a report, `list KIND` to list",
    )
    return parser


def _interrupted(config: TrainConfig, argv: Sequence[str], step: int | None) -> str:
    """The line printed on Ctrl-C: where the run stopped and the command that carries on from there."""
    from agentfly_train.checkpoints import newest_complete

    command = shlex.join(["python", "-m", "agentfly_train", *argv])
    trainer = config.trainer
    if trainer.resume_mode == "resume_path":
        then = f"to resume from {trainer.resume_from_path} again"
    else:
        checkpoint, _ = (
            newest_complete(trainer.default_local_dir, check_contents=False)
            if trainer.resume_mode == "auto"
            else (None, [])
        )
        then = f"to resume from {checkpoint.name}" if checkpoint is not None else "to start over"
    return f"interrupted{f' at step {step}' if step is not None else ''}; rerun `{command}` {then}"


def _train(config: TrainConfig, show_progress: bool, argv: Sequence[str]) -> int:
    from agentfly_train.generation import BackendError
    from agentfly_train.launchers import LaunchError, launcher_for
    from agentfly_train.rollout import InfrastructureFailureRate

    try:
        result = launcher_for(config).launch(config, show_progress)
    except KeyboardInterrupt as interrupt:  # checkpoints are written atomically: nothing is left half-saved
        if os.environ.get("RANK", "0") == "0":  # under a multi-process launch, one line from the first process
            print(_interrupted(config, argv, getattr(interrupt, "step", None)), file=sys.stderr)
        return 130
    except OSError as error:
        if error.errno != errno.ENOSPC:
            raise
        where = f" while writing {error.filename}" if error.filename else ""
        message = (
            str(error)
            if isinstance(error, CheckpointDiskFullError)
            else f"no space left on device{where}; free space and rerun the same command to resume"
        )
        print(f"error: {message}", file=sys.stderr)
        return 1
    except BackendError as error:
        print(
            f"error: {error}; the run directory keeps the last checkpoint: rerun the same command "
            "(trainer.resume_mode=auto) to resume",
            file=sys.stderr,
        )
        return 1
    except LaunchError as error:  # the message says how to resume
        print(f"error: {error}", file=sys.stderr)
        return 1
    except InfrastructureFailureRate as error:
        print(
            f"error: {error}; the run directory keeps the last checkpoint: mend the failing part and rerun the same "
            "command (trainer.resume_mode=auto) to resume",
            file=sys.stderr,
        )
        return 1
    before, after = result.val_before, result.val_after
    print(f"run directory: {result.run_dir} ({result.steps} steps)")
    if result.sft_loss is not None:
        print(f"SFT warm start: mean loss {result.sft_loss:.3f}")
    if before:
        print(f"validation before RL: accuracy {before['val/accuracy']:.3f}, reward {before['val/reward/mean']:.3f}")
    if after:
        print(f"validation after RL:  accuracy {after['val/accuracy']:.3f}, reward {after['val/reward/mean']:.3f}")
    return 0


def _eval(overrides: list[str], config_files: list[str], samples: int) -> None:
    from agentfly_train.evaluate import eval_config, evaluate

    config, run_config = eval_config(overrides, config_files)
    if run_config:
        print(f"eval: on the settings of the run in {run_config} (env, data, template, budgets); overrides on top")
    stats, records, path = evaluate(config)
    for record in records[:samples]:
        print(json.dumps(record, indent=2))
    print(
        f"{config.env_id}: accuracy {stats['accuracy']:.3f}, mean reward {stats['reward/mean']:.3f} "
        f"over {len(records)} episodes; trajectories in {path}"
    )
    k, level = config.eval.k, round(config.eval.confidence * 100)
    print(
        f"pass@{k} {stats['pass@k']:.3f} [{level}% CI {stats['pass@k_ci'][0]:.3f}, {stats['pass@k_ci'][1]:.3f}], "
        f"mean@{k} {stats['mean@k']:.3f} [{stats['mean@k_ci'][0]:.3f}, {stats['mean@k_ci'][1]:.3f}] "
        f"over {len(records) // config.eval.samples} tasks x {config.eval.samples} samples; per task in "
        f"{path.parent / 'eval_pass_at_k.json'}"
    )


def _report(arguments: list[str], out: str | None) -> int:
    from agentfly_train.report import build_report

    if len(arguments) != 1:
        print("usage: python -m agentfly_train report RUN_DIR [--out FILE]", file=sys.stderr)
        return 2
    try:
        path = build_report(arguments[0], out)
    except (FileNotFoundError, OSError) as error:
        print(f"report error: {error}", file=sys.stderr)
        return 2
    print(path)
    return 0


def _list(arguments: list[str]) -> int:
    from agentfly_envs.errors import ToolDefinitionError
    from agentfly_train.catalog import LISTINGS, listing
    from agentfly_train.config.loading import load_user_code

    kind, overrides = (arguments[0], arguments[1:]) if arguments else (None, [])
    if kind not in LISTINGS:
        print(f"usage: python -m agentfly_train list {{{','.join(LISTINGS)}}} [agent.imports=[...]]", file=sys.stderr)
        return 2
    load_user_code(load_config(overrides, check=False))
    try:
        print(listing(kind))
    except ToolDefinitionError as error:  # a user tool that cannot describe itself
        raise ConfigError(f"agent.imports: {error}") from None
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; returns the exit status (2 for a configuration or usage error)."""
    args = _parser().parse_intermixed_args(argv)
    command = "train"
    overrides = list(args.overrides)
    if overrides and overrides[0] in COMMANDS:
        command = overrides.pop(0)
    if command == "report":
        return _report(overrides, args.out)
    config_files = args.config or ([] if overrides else [QUICKSTART])
    try:
        if command == "list":
            return _list(overrides)
        if command == "eval" and not args.dry_run:
            _eval(overrides, config_files, args.samples)
            return 0
        config = load_config(overrides, config_files)
        if args.dry_run:
            from agentfly_train.dry_run import describe

            print(describe(config))
        else:
            return _train(config, not args.no_progress, sys.argv[1:] if argv is None else argv)
    except ConfigError as error:
        print(f"config error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
