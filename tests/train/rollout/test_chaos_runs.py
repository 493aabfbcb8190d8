"""Issue #40 item 4: real CLI training runs while a chaos thread kills what the envs rely on (sandbox processes, a
served env's server, Ray env actors, a world's JVM). Each run completes every step, and its saved samples show that
no episode that met an infrastructure failure was trained: such an episode is marked excluded, and no episode kept
for training holds a failure's observation."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.paths import REPO_ROOT
from tests.helpers.processes import free_port
from tests.helpers.runs import LEARNING_TASKS
from tests.helpers.skips import needs_textworld_express

psutil = pytest.importorskip("psutil")
pytestmark = pytest.mark.slow

SANDBOXED_CALCULATOR = '''
import functools

import gymnasium as gym

from agentfly_envs.sandbox import default_pool
from agentfly_envs.tools import Tool, ToolError


def sandboxed_arith(**kwargs):
    """Arith-Calc whose calculator hands each value back through a sandboxed interpreter."""
    env = gym.make("agentfly/Arith-Calc", **kwargs).unwrapped
    compute = env.tools["calculator"].function

    @functools.wraps(compute)
    def calculator(*args, **kwargs):
        execution = default_pool().run(f"print({compute(*args, **kwargs)!r})")  # SandboxError: infrastructure
        if execution.status.value != "ok":
            raise ToolError(f"the interpreter ended with {execution.status.value}: {execution.detail}")
        return execution.output.strip()

    env.tools["calculator"] = Tool(calculator, name="calculator")
    return env


gym.register("chaos/Arith-Sandbox", entry_point=sandboxed_arith)
'''
RUN = (
    "sft.enable=false",
    "data.train_batch_size=2",
    "agent.num_chains=4",
    "trainer.log_train_generations=8",
    "actor_rollout_ref.rollout.retries=2",
    "actor_rollout_ref.rollout.max_infra_failure_rate=1.0",
    "--no-progress",
)
"""RL steps (:func:`train` sets how many) of four episodes of two tasks, every episode saved, failures replayed twice
and never stopping the run."""


class Chaos(threading.Thread):
    """Kills processes of a run's process tree (``victims(run)`` picks them) every ``interval`` seconds (jittered),
    from the moment the run has logged its first step until it ends or ``most`` kills were made.

    Attributes:
        killed: The command lines of the processes killed.
    """

    def __init__(
        self,
        run: subprocess.Popen,
        run_dir: Path,
        victims: Callable[[psutil.Process], Sequence[psutil.Process]],
        interval: float,
        most: int,
    ) -> None:
        super().__init__(daemon=True)
        self.training, self.run_dir, self.victims, self.interval, self.most = run, run_dir, victims, interval, most
        self.killed: list[str] = []
        self._rng = random.Random(0)

    def run_started(self) -> bool:
        metrics = self.run_dir / "metrics.jsonl"
        return metrics.exists() and any('"loss"' in line for line in metrics.read_text().splitlines())

    def run(self) -> None:
        while self.training.poll() is None and not self.run_started():
            time.sleep(0.2)
        root = psutil.Process(self.training.pid)
        while self.training.poll() is None and len(self.killed) < self.most:
            time.sleep(self.interval * self._rng.uniform(0.5, 1.5))
            try:
                candidates = list(self.victims(root))
            except psutil.Error:
                continue
            if candidates:
                victim = self._rng.choice(candidates)
                try:
                    command = " ".join(victim.cmdline()[:3])
                    victim.kill()
                except psutil.Error:
                    continue
                self.killed.append(command)


def train(
    arguments: Sequence[str],
    run_dir: Path,
    chaos: Callable[[subprocess.Popen], Chaos | None],
    steps: int = 4,
) -> Chaos | None:
    """Runs ``python -m agentfly_train`` with ``arguments`` (and its run directory) for ``steps`` steps while
    ``chaos(run)`` acts; checks that it ends with status 0 after all its steps, and returns the chaos thread."""
    command = [sys.executable, "-m", "agentfly_train", *arguments, f"trainer.default_local_dir={run_dir}"]
    command.append(f"trainer.total_training_steps={steps}")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    run = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    thread = chaos(run)
    if thread is not None:
        thread.start()
    out, err = run.communicate(timeout=900)
    if thread is not None:
        thread.join(timeout=30)
    assert run.returncode == 0, (out + err)[-4000:]
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [record["step"] for record in records if "loss" in record] == list(range(1, steps + 1))
    return thread


def failure_figures(run_dir: Path) -> dict[str, float]:
    """The run's sums of ``rollout/infra_failures``, ``rollout/excluded`` and ``env/health_restarts``."""
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    keys = ("rollout/infra_failures", "rollout/excluded", "env/health_restarts")
    return {key: sum(record.get(key, 0) for record in records if "loss" in record) for key in keys}


def check_samples(run_dir: Path, failure_marks: Sequence[str]) -> list[dict[str, Any]]:
    """The run's saved training samples, checked: an episode is marked excluded exactly when it names its
    infrastructure failure, and no episode kept for training has a tool observation holding one of
    ``failure_marks`` (the words of a failure that is not the agent's)."""
    samples = [json.loads(line) for path in (run_dir / "train_samples").glob("*.jsonl") for line in path.open()]
    assert len(samples) % 8 == 0 and samples  # 8 episodes a step
    for sample in samples:
        assert sample.get("excluded", False) == ("infra_failure" in sample)
        if sample.get("excluded"):
            continue
        observations = [m["content"] for m in sample["messages"] if m["role"] not in ("assistant", "system")]
        assert not [text for text in observations for mark in failure_marks if mark in str(text)], sample
    return samples


def descendants(match: Callable[[psutil.Process], bool]) -> Callable[[psutil.Process], list[psutil.Process]]:
    """A victim picker: the processes under the run that ``match``."""

    def pick(root: psutil.Process) -> list[psutil.Process]:
        found = []
        for process in root.children(recursive=True):
            try:
                if match(process):
                    found.append(process)
            except psutil.Error:
                continue
        return found

    return pick


def test_a_run_survives_sandbox_processes_killed_under_it(warm_policy, tmp_path):
    """Fork servers, guards and interpreters of the sandbox pool are killed at random while the calculator's values
    come back through it: a killed fork server or spare is replaced unseen, a failed sandbox is an infrastructure
    failure (replayed, else excluded), and an interpreter killed mid-call is indistinguishable from the code's own
    crash (the agent's, an error observation; docs/extending.md)."""
    chaos_env = tmp_path / "chaos_sandbox.py"
    chaos_env.write_text(SANDBOXED_CALCULATOR)
    run_dir = tmp_path / "run"
    arguments = ["--config", "quickstart", *LEARNING_TASKS, "agent.env=chaos/Arith-Sandbox"]
    arguments += [f"agent.imports=[{chaos_env}]", f"actor_rollout_ref.model.path={warm_policy}", *RUN]
    chaos = train(arguments, run_dir, lambda run: Chaos(run, run_dir, descendants(lambda p: True), 0.1, 40))
    assert chaos is not None and len(chaos.killed) >= 3, chaos.killed
    check_samples(run_dir, ["sandbox"])


def serve(port: int) -> subprocess.Popen:
    """Serves the learning tasks' env (tool-call format) on ``port``; returns once it answers ``/health``."""
    kwargs = json.dumps({"level": "single", "num_tasks": 2, "parser": "tool_calls"})
    command = [sys.executable, "-m", "agentfly_envs", "serve", "agentfly/Arith-Calc", "--port", str(port)]
    server = subprocess.Popen([*command, "--env-kwargs", kwargs], cwd=REPO_ROOT, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 120
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5):
                return server
        except OSError:
            assert server.poll() is None and time.monotonic() < deadline, "the env server did not start"
            time.sleep(0.3)


class ServerKiller(threading.Thread):
    """Kills a served env's server with SIGKILL once the run has logged its first step, and serves it again on the
    same port a second later."""

    def __init__(self, run: subprocess.Popen, run_dir: Path, servers: list[subprocess.Popen], port: int) -> None:
        super().__init__(daemon=True)
        self.training, self.run_dir, self.servers, self.port = run, run_dir, servers, port
        self.killed: list[str] = []

    run_started = Chaos.run_started

    def run(self) -> None:
        while self.training.poll() is None and not self.run_started():
            time.sleep(0.1)
        if self.training.poll() is None:
            self.servers[-1].kill()
            self.servers[-1].wait()
            self.killed.append("env server")
            time.sleep(1.0)
            self.servers.append(serve(self.port))


def test_a_run_on_a_served_env_survives_its_server_killed_and_restarted(warm_policy, tmp_path):
    pytest.importorskip("openenv", reason='needs openenv-core (the "openenv" extra)')
    port = free_port()
    servers = [serve(port)]
    run_dir = tmp_path / "run"
    arguments = ["--config", "quickstart", f"agent.env=openenv:http://127.0.0.1:{port}", "agent.env_kwargs={}"]
    arguments += ["data.val_env_kwargs={}", "data.val_size=0", "agent.max_turns=2", "agent.max_tokens_per_turn=32"]
    arguments += ["actor_rollout_ref.rollout.response_length=128", f"actor_rollout_ref.model.path={warm_policy}", *RUN]
    try:
        killer = train(arguments, run_dir, lambda run: ServerKiller(run, run_dir, servers, port))
    finally:
        for server in servers:
            server.kill()
            server.wait()
    assert killer is not None and killer.killed == ["env server"] and len(servers) == 2
    figures = failure_figures(run_dir)
    assert figures["rollout/infra_failures"] > 0, figures  # the steps after the kill met the dead server
    samples = check_samples(run_dir, ["Error: the environment server"])
    assert any(sample.get("excluded") or sample.get("failed_attempts") for sample in samples)


def test_a_run_on_ray_env_actors_survives_actors_killed_under_it(warm_policy, tmp_path):
    pytest.importorskip("ray", reason='needs Ray (the "ray" extra)')
    run_dir = tmp_path / "run"
    arguments = ["--config", "quickstart", *LEARNING_TASKS, f"actor_rollout_ref.model.path={warm_policy}", *RUN]
    arguments += ["actor_rollout_ref.rollout.env_runtime=ray", "actor_rollout_ref.rollout.env_workers=2"]

    def env_host(process: psutil.Process) -> bool:
        return "_EnvHost" in " ".join(process.cmdline())

    # 8 steps: the 3 kills, from the first step's end on, land before the last steps' rollouts, however slow the run
    chaos = train(arguments, run_dir, lambda run: Chaos(run, run_dir, descendants(env_host), 0.5, 3), steps=8)
    assert chaos is not None and chaos.killed, "no env actor was found to kill"
    figures = failure_figures(run_dir)
    assert figures["rollout/infra_failures"] + figures["env/health_restarts"] > 0, figures
    check_samples(run_dir, ["the worker running this environment died"])


@needs_textworld_express
def test_a_world_run_survives_its_jvms_killed_under_it(tmp_path):
    """JVMs killed under a world run are launched again on the world's next episode and the run goes on. The tiny
    untrained policy seldom sends the world a command, so its episodes meet a dead JVM at their reset, which launches
    a fresh one; an episode whose command meets one is replayed on a relaunched JVM
    (test_infrastructure_failures.py, with a scripted golden policy)."""
    run_dir = tmp_path / "run"
    arguments = ["--config", "quickstart", "agent.env=agentfly/TWX-Coin", "agent.env_kwargs={num_tasks: 4}"]
    arguments += ["data.val_size=0", "agent.max_turns=3", "agent.max_tokens_per_turn=16"]
    arguments += ["actor_rollout_ref.model.tiny_hidden_size=32", "actor_rollout_ref.rollout.response_length=128", *RUN]

    def jvm(process: psutil.Process) -> bool:
        return process.name() == "java"

    chaos = train(arguments, run_dir, lambda run: Chaos(run, run_dir, descendants(jvm), 0.5, 4), steps=8)
    assert chaos is not None and len(chaos.killed) >= 2, chaos.killed
    check_samples(run_dir, ["the world stopped working"])
