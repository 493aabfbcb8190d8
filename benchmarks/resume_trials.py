"""Resume after a crash: training runs killed with SIGKILL at random moments, then rerun with the same command.

Each trial trains the tiny policy (``agentfly:tiny``, no SFT warm start) for ``--steps`` steps with a checkpoint after
every step (``trainer.save_freq=1``) in a fresh run directory, as a subprocess ``python -m agentfly_train`` in a
process group of its own. At a random moment the whole group is killed with SIGKILL, as a machine crash would end
it, and the same command is run again until it exits 0; each rerun is killed too with probability ``--kill-again``
(a kill during the resume). The trial then checks that the last run exited 0, that its ``result.json`` counts
``--steps`` steps and names as the checkpoint it resumed from the newest complete one on disk when it started, that
``metrics.jsonl`` logs each training step 1..N exactly once, that every checkpoint's manifest checks
(``checkpoint_problem``) with ``checkpoint-N`` the newest, that ``final/`` holds the model and that no ``.tmp`` file
or directory is left. Trials alternate between the ``--schedules`` (``sync``: rollout, then update; ``async``: the
off-policy schedule, ``async_training.enable=true``, whose checkpoints also hold the prompts not yet trained).

One uninterrupted run per schedule is timed first (and checked like a trial): D its duration, C its time to its first
checkpoint, S its longest save (from its ``checkpoint-K.tmp`` appearing to its rename). A kill moment is uniform over
[0, D] after an attempt starts (``--window run``); over [0, D - C] after the attempt publishes its first checkpoint
(``--window after-checkpoint``: every kill finds a checkpoint on disk); or over [0, S] after the attempt starts
writing one of its checkpoints, drawn uniformly among those it has to write (``--window save``: kills land during a save
or just after it). Each kill is classed by what it left on disk:

- ``start-up``: the attempt had logged no step yet (imports, building the model, resuming, then its first step);
- ``mid-step``: it had logged a step, and no save was under way;
- ``during a save``: the attempt had made a ``checkpoint-K.tmp`` staging directory, and it was still there;
- ``finishing``: ``checkpoint-N`` was complete (validation, ``final/``, ``result.json``, the report);
- ``exited first``: the run ended before the moment came (no kill).

A failed trial's directory is kept and printed; the script exits 1 if any trial failed.

    python benchmarks/resume_trials.py --json benchmarks/results/resume_trials.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from agentfly_train.checkpoints import (
    STAGING_SUFFIX,
    checkpoint_problem,
    checkpoint_step,
    newest_complete,
    numbered_checkpoints,
)
from agentfly_train.run_dir import FINAL_DIR, METRICS_FILE, RESULT_FILE, parse_jsonl

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))  # the repository root: the small run the resume tests use
from tests.helpers.runs import SMALL_RUN, quickstart_command  # noqa: E402

SCHEDULES = {"sync": (), "async": ("async_training.enable=true",)}
"""The rollout schedules a trial may run, by name: their overrides."""
WINDOWS = ("run", "after-checkpoint", "save")
"""Where kill moments are drawn (``--window``; see the module's docstring)."""
PHASES = ("start-up", "mid-step", "during a save", "finishing", "exited first")
"""What a kill can find on disk, in the order a run reaches them (see the module's docstring)."""
POLL_S = 0.005
"""How often an attempt's process and run directory are looked at (the kill moment's resolution)."""
REAP_S = 5.0
"""How long after a kill the process group may take to disappear before the next attempt starts anyway."""


@dataclass(frozen=True)
class Kill:
    """When to kill an attempt: ``seconds`` after it starts (``kind`` ``run``), after it publishes its first
    checkpoint (``after-checkpoint``), or after it starts writing ``checkpoint-<step>`` (``save``)."""

    kind: str
    seconds: float
    step: int = 0


@dataclass(frozen=True)
class Window:
    """Where kill moments are drawn: over ``seconds`` after the start of a window of ``kind`` (:data:`WINDOWS`)."""

    kind: str
    seconds: float

    def kill(self, fraction: float, steps: int, checkpoint_before: int) -> Kill:
        """The kill at ``fraction`` (in [0, 1)) of this window, for an attempt of a ``steps``-step run that finds
        ``checkpoint_before`` the newest checkpoint: for ``save``, ``fraction`` picks one of its saves, then the
        moment within it."""
        if self.kind != "save":
            return Kill(self.kind, fraction * self.seconds)
        save, within = divmod(fraction * max(steps - checkpoint_before, 1), 1)
        return Kill(self.kind, within * self.seconds, checkpoint_before + 1 + int(save))


@dataclass
class Reference:
    """An uninterrupted run of one schedule: its duration, its time to its first checkpoint and its longest save, in
    seconds, and what is wrong with what it left (:func:`run_problems`)."""

    schedule: str
    seconds: float
    first_checkpoint_s: float
    save_s: float
    problems: list[str]

    def window(self, kind: str) -> Window:
        """The kill window of ``kind`` (:data:`WINDOWS`) these timings give (see the module's docstring)."""
        lengths = {"run": self.seconds, "after-checkpoint": self.seconds - self.first_checkpoint_s, "save": self.save_s}
        return Window(kind, lengths[kind])


@dataclass
class Attempt:
    """One run of a trial's command.

    Attributes:
        returncode: Its exit status (``-9``: killed; ``None``: ran past the timeout).
        seconds: From its start to its end.
        kill: When it was to be killed (``None``: not to be).
        killed_at_s: When it was killed, seconds after the attempt's start.
        phase: What the kill found (:data:`PHASES`); ``None`` for an attempt not to be killed.
        checkpoint: The newest complete checkpoint's step when it ended (0: none).
    """

    returncode: int | None
    seconds: float
    kill: Kill | None = None
    killed_at_s: float | None = None
    phase: str | None = None
    checkpoint: int = 0


@dataclass
class Trial:
    """A run killed and rerun until it ended, and what is wrong with what it left (``problems``: nothing)."""

    number: int
    schedule: str
    run_dir: str
    attempts: list[Attempt] = field(default_factory=list)
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """Whether the trial ended with a complete run and no problem."""
        return not self.problems

    @property
    def kills(self) -> list[Attempt]:
        """Its attempts that were to be killed (one that exited first included)."""
        return [attempt for attempt in self.attempts if attempt.phase is not None]


def training_command(schedule: str, steps: int, run_dir: Path) -> list[str]:
    """The CLI command line of a trial of ``schedule``, ``steps`` steps long, in ``run_dir``."""
    return quickstart_command(
        *SMALL_RUN,
        *SCHEDULES[schedule],
        f"trainer.total_training_steps={steps}",
        f"trainer.default_local_dir={run_dir}",
    )


def child_env() -> dict[str, str]:
    """The environment of a training run: offline, with this checkout first on the path."""
    path = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "PYTHONPATH": path}


def newest_checkpoint(run_dir: Path) -> int:
    """The step of ``run_dir``'s newest complete checkpoint (sizes checked), 0 where there is none."""
    newest, _ = newest_complete(run_dir, check_contents=False) if run_dir.is_dir() else (None, [])
    return checkpoint_step(newest) if newest is not None else 0


def newest_published(run_dir: Path) -> int:
    """The step of ``run_dir``'s newest ``checkpoint-K`` directory (published by a rename: complete), 0 if none."""
    checkpoints = numbered_checkpoints(run_dir) if run_dir.is_dir() else []
    return checkpoint_step(checkpoints[-1]) if checkpoints else 0


def logged_steps(run_dir: Path, problems: list[str] | None = None) -> list[int]:
    """The steps of ``run_dir``'s training-step records (those with a ``loss``), in order; unreadable lines are
    named in ``problems``."""
    path = run_dir / METRICS_FILE
    text = path.read_text(errors="replace") if path.is_file() else ""
    records = parse_jsonl(text, path, [] if problems is None else problems, key="step")
    return [record["step"] for record in records if "loss" in record]


def leftovers(run_dir: Path) -> list[str]:
    """The ``.tmp`` files and directories under ``run_dir``, relative to it."""
    return sorted(str(path.relative_to(run_dir)) for path in run_dir.rglob("*") if ".tmp" in path.name)


def modified(path: Path) -> float:
    """``path``'s modification time (``time.time()``'s clock); 0 for a path that is gone."""
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return 0.0


def saving_since(run_dir: Path, since: float) -> list[int]:
    """The steps of ``run_dir``'s ``checkpoint-K.tmp`` staging directories made at ``since`` (``time.time()``) or
    later: saves under way, or cut short by a kill (not those an earlier run left, which a run deletes as it starts)."""
    staged = [path for path in run_dir.glob(f"checkpoint-*{STAGING_SUFFIX}") if modified(path) >= since]
    return [checkpoint_step(path.with_name(path.name.removesuffix(STAGING_SUFFIX))) for path in staged]


def kill_phase(run_dir: Path, steps: int, started_wall: float, checkpoint_before: int) -> str:
    """What a kill of an attempt that started at ``started_wall`` (``time.time()``) with ``checkpoint_before`` the
    newest checkpoint found in ``run_dir`` (see :data:`PHASES`)."""
    if saving_since(run_dir, started_wall):
        return "during a save"
    if newest_checkpoint(run_dir) >= steps:
        return "finishing"
    logged = modified(run_dir / METRICS_FILE) >= started_wall
    return "mid-step" if logged and max(logged_steps(run_dir), default=0) > checkpoint_before else "start-up"


def window_open(kill: Kill, run_dir: Path, checkpoint_before: int, started_wall: float) -> bool:
    """Whether an attempt that started at ``started_wall`` with ``checkpoint_before`` the newest checkpoint of
    ``run_dir`` has reached the start of the window of its ``kill``."""
    if kill.kind == "after-checkpoint":
        return newest_published(run_dir) > checkpoint_before
    return kill.kind == "run" or kill.step in saving_since(run_dir, started_wall)


def kill_group(process: subprocess.Popen[bytes]) -> None:
    """Kills ``process``'s process group with SIGKILL and waits until the group is gone (at most :data:`REAP_S`)."""
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    deadline = time.monotonic() + REAP_S
    while time.monotonic() < deadline:
        try:
            os.killpg(process.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(POLL_S)


def run_attempt(argv: list[str], run_dir: Path, steps: int, log: Path, kill: Kill | None, timeout: float) -> Attempt:
    """Runs ``argv``, a run of ``steps`` steps in ``run_dir`` (output appended to ``log``), and kills its process
    group as ``kill`` says (``None``: never); a run past ``timeout`` seconds is killed too (return code ``None``)."""
    before, started_wall, started = newest_checkpoint(run_dir), time.time(), time.monotonic()
    anchor = None
    with log.open("a") as output:
        process = subprocess.Popen(
            argv, cwd=REPO_ROOT, env=child_env(), stdout=output, stderr=subprocess.STDOUT, start_new_session=True
        )
        while process.poll() is None:
            now = time.monotonic()
            if anchor is None and kill is not None and window_open(kill, run_dir, before, started_wall):
                anchor = now
            due = kill is not None and anchor is not None and now - anchor >= kill.seconds
            if due or now - started > timeout:
                kill_group(process)
                returncode, phase = (
                    (process.returncode, kill_phase(run_dir, steps, started_wall, before))
                    if due
                    else (None, "timed out")
                )
                return Attempt(returncode, now - started, kill, now - started, phase, newest_checkpoint(run_dir))
            time.sleep(POLL_S)
    phase = None if kill is None else "exited first"
    return Attempt(process.returncode, time.monotonic() - started, kill, None, phase, newest_checkpoint(run_dir))


def run_problems(run_dir: Path, steps: int, resumed_from: int) -> list[str]:
    """What is wrong with the run in ``run_dir`` after its command exited 0, having started with ``resumed_from``
    its newest complete checkpoint (0: none); empty if nothing."""
    problems: list[str] = []
    try:
        result = json.loads((run_dir / RESULT_FILE).read_text())
    except (OSError, ValueError) as error:
        return [f"{RESULT_FILE} is unreadable: {error}"]
    if result.get("steps") != steps:
        problems.append(f"{RESULT_FILE} says {result.get('steps')} steps, not {steps}")
    expected = str(run_dir / f"checkpoint-{resumed_from}") if resumed_from else None
    if result.get("resumed_from") != expected:
        problems.append(f"resumed from {result.get('resumed_from')}, not the newest complete checkpoint {expected}")
    logged = logged_steps(run_dir, problems)
    if logged != list(range(1, steps + 1)):
        problems.append(f"{METRICS_FILE} logs the steps {logged}, not 1..{steps} once each")
    checkpoints = numbered_checkpoints(run_dir)
    if not checkpoints or checkpoint_step(checkpoints[-1]) != steps:
        problems.append(f"the newest checkpoint is {checkpoints[-1].name if checkpoints else None}, not {steps}")
    problems += [f"{path.name}: {checkpoint_problem(path)}" for path in checkpoints if checkpoint_problem(path)]
    if not (run_dir / FINAL_DIR / "model.safetensors").is_file():
        problems.append(f"{FINAL_DIR}/ has no model.safetensors")
    if leftovers(run_dir):
        problems.append(f"left over: {', '.join(leftovers(run_dir))}")
    return problems


def last_lines(log: Path, count: int = 5) -> str:
    """The last ``count`` lines of ``log``, joined with `` | ``."""
    return " | ".join(log.read_text(errors="replace").strip().splitlines()[-count:])


def run_trial(
    number: int, schedule: str, steps: int, kills: list[float], window: Window, directory: Path, timeout: float
) -> Trial:
    """Trial ``number``: a fresh run of ``schedule`` in ``directory``/run, killed after each of ``kills`` (fractions
    of ``window``) in turn and rerun until it exits 0; then checked (:func:`run_problems`)."""
    run_dir, started = directory / "run", time.monotonic()
    trial = Trial(number, schedule, str(run_dir))
    argv = training_command(schedule, steps, run_dir)
    for index in range(len(kills) + 1):
        resumed_from = newest_checkpoint(run_dir)
        kill = window.kill(kills[index], steps, resumed_from) if index < len(kills) else None
        log = directory / f"attempt-{index + 1}.log"
        attempt = run_attempt(argv, run_dir, steps, log, kill, timeout)
        trial.attempts.append(attempt)
        if attempt.returncode == 0:
            trial.problems = run_problems(run_dir, steps, resumed_from)
            break
        if attempt.returncode is None:
            trial.problems = [f"attempt {index + 1} ran past {timeout:.0f} s: {last_lines(log)}"]
            break
        if attempt.returncode != -signal.SIGKILL:
            trial.problems = [f"attempt {index + 1} exited {attempt.returncode}: {last_lines(log)}"]
            break
    trial.seconds = time.monotonic() - started
    return trial


def reference_run(schedule: str, steps: int, directory: Path) -> Reference:
    """Times an uninterrupted run of ``schedule`` in ``directory``/run (:class:`Reference`) and checks it like a
    trial."""
    run_dir, log = directory / "run", directory / "reference.log"
    argv, started = training_command(schedule, steps, run_dir), time.monotonic()
    first_checkpoint, save_started, longest_save = None, None, POLL_S
    with log.open("w") as output:
        process = subprocess.Popen(argv, cwd=REPO_ROOT, env=child_env(), stdout=output, stderr=subprocess.STDOUT)
        while process.poll() is None:
            now = time.monotonic()
            if first_checkpoint is None and newest_published(run_dir) > 0:
                first_checkpoint = now - started
            if save_started is None and saving_since(run_dir, 0.0):
                save_started = now
            elif save_started is not None and not saving_since(run_dir, 0.0):
                save_started, longest_save = None, max(longest_save, now - save_started)
            time.sleep(POLL_S)
    seconds = time.monotonic() - started
    if process.returncode != 0:
        failure = f"exited {process.returncode}: {last_lines(log)}"
        return Reference(schedule, seconds, seconds, longest_save, [failure])
    problems = run_problems(run_dir, steps, 0)
    return Reference(schedule, seconds, first_checkpoint or seconds, longest_save, problems)


def draw_kills(rng: random.Random, kill_again: float, most: int) -> list[float]:
    """A trial's kill moments as fractions of its window: one, then each rerun killed too with probability
    ``kill_again``, ``most`` kills at most."""
    kills = [rng.random()]
    while len(kills) < most and rng.random() < kill_again:
        kills.append(rng.random())
    return kills


def phase_counts(trials: list[Trial]) -> dict[str, int]:
    """How many kills found each of :data:`PHASES` (and ``timed out``, if any did)."""
    counts = Counter(attempt.phase for trial in trials for attempt in trial.kills)
    return {phase: counts[phase] for phase in (*PHASES, "timed out") if counts[phase] or phase in PHASES}


def landed(trials: list[Trial]) -> list[Attempt]:
    """The attempts of ``trials`` that a kill ended (not those that exited first)."""
    return [attempt for trial in trials for attempt in trial.kills if attempt.killed_at_s is not None]


def summary(references: list[Reference], trials: list[Trial], args: argparse.Namespace) -> dict[str, object]:
    """The figures of a run of this script, as ``--json`` writes them."""
    kills = landed(trials)
    return {
        "args": {**vars(args), "json": str(args.json)},
        "references": [asdict(reference) for reference in references],
        "passed": sum(trial.passed for trial in trials),
        "trials": [{**asdict(trial), "passed": trial.passed} for trial in trials],
        "kills": len(kills),
        "kills_with_a_checkpoint": sum(attempt.checkpoint > 0 for attempt in kills),
        "phases": phase_counts(trials),
        "median_trial_s": statistics.median(trial.seconds for trial in trials),
    }


def kill_text(attempt: Attempt) -> str:
    """A kill as the table shows it: when it came and what it found."""
    if attempt.killed_at_s is None:
        return str(attempt.phase)
    return f"{attempt.killed_at_s:.1f} {attempt.phase} (ckpt {attempt.checkpoint})"


def print_figures(figures: dict[str, object], trials: list[Trial]) -> None:
    """The reference runs, one line per trial, and the totals of ``figures`` (:func:`summary`)."""
    for reference in figures["references"]:
        failed = f"; FAILED: {'; '.join(reference['problems'])}" if reference["problems"] else ""
        print(
            f"uninterrupted {reference['schedule']}: {reference['seconds']:.1f} s, first checkpoint at "
            f"{reference['first_checkpoint_s']:.1f} s, longest save {reference['save_s']:.2f} s{failed}"
        )
    print(f"kill moments: uniform over the window '{figures['args']['window']}'\n")
    print(
        f"{'trial':>5}  {'schedule':<8}  {'kills: s after the attempt started, what it found':<60} {'runs':>4} "
        f"{'s':>6}  result"
    )
    for trial in trials:
        kills = ", ".join(kill_text(attempt) for attempt in trial.kills)
        result = "ok" if trial.passed else f"FAILED ({trial.run_dir}): {'; '.join(trial.problems)}"
        print(
            f"{trial.number:>5}  {trial.schedule:<8}  {kills:<60} {len(trial.attempts):>4} {trial.seconds:>6.1f}  "
            f"{result}"
        )
    print(
        f"\n{figures['passed']} of {len(trials)} trials passed; {figures['kills']} kills, "
        f"{figures['kills_with_a_checkpoint']} of them with a checkpoint on disk; median "
        f"{figures['median_trial_s']:.1f} s per trial"
    )
    print("kills by what they found: " + ", ".join(f"{phase} {n}" for phase, n in figures["phases"].items()))


def parse_arguments() -> argparse.Namespace:
    """The command line (see the module's docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0, help="seeds the kill moments and the kills-again")
    parser.add_argument("--steps", type=int, default=4, help="training steps per run")
    parser.add_argument(
        "--schedules",
        nargs="+",
        choices=sorted(SCHEDULES),
        default=["sync", "async"],
        help="the trials alternate between these",
    )
    parser.add_argument(
        "--window",
        choices=WINDOWS,
        default="run",
        help="draw kill moments over a whole run, after an attempt's first new checkpoint, or in its saves",
    )
    parser.add_argument("--kill-again", type=float, default=0.3, help="probability that a rerun is killed too")
    parser.add_argument("--max-kills", type=int, default=3, help="kills per trial at most")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds an attempt may run")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    if args.trials < 1 or args.steps < 1:
        parser.error("--trials and --steps must be at least 1")
    return args


def main() -> None:
    args = parse_arguments()
    rng = random.Random(args.seed)
    base = Path(tempfile.mkdtemp(prefix="resume_trials_"))
    references = {
        schedule: reference_run(schedule, args.steps, Path(tempfile.mkdtemp(dir=base, prefix=f"reference_{schedule}_")))
        for schedule in args.schedules
    }
    trials = []
    for number in range(1, args.trials + 1):
        schedule = args.schedules[(number - 1) % len(args.schedules)]
        window = references[schedule].window(args.window)
        directory = Path(tempfile.mkdtemp(dir=base, prefix=f"trial_{number:02d}_"))
        kills = draw_kills(rng, args.kill_again, args.max_kills)
        trial = run_trial(number, schedule, args.steps, kills, window, directory, args.timeout)
        trials.append(trial)
        print(f"trial {number}: {'ok' if trial.passed else 'FAILED: ' + '; '.join(trial.problems)}", flush=True)
        if trial.passed:
            shutil.rmtree(directory)
    figures = summary(list(references.values()), trials, args)
    print()
    print_figures(figures, trials)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    failed = not all(trial.passed for trial in trials) or any(r.problems for r in references.values())
    if failed:
        print(f"kept for inspection: {base}")
        sys.exit(1)
    shutil.rmtree(base)


if __name__ == "__main__":
    main()
