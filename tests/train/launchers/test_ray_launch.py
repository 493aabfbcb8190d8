"""Training on a real local Ray cluster (``ray start --head`` on 127.0.0.1, 2 CPUs) through the CLI.

Two Ray Train workers (gloo), one of them killed mid-run (the run fails in one line and the same command resumes
it), log the losses and rewards of two ``accelerate launch`` processes run without a break; a cluster too small for
the requested workers is refused in one line before anything starts.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.distributed import accelerate_launch
from tests.helpers.processes import free_port, run_cli
from tests.helpers.runs import SMALL_VLLM_ENGINE, step_records
from tests.helpers.skips import skip_without_vllm

pytest.importorskip("ray.train.torch", reason="Ray Train is not installed (the ray extra)")
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray")]
"""Slow, and on one worker with the other Ray tests (one local cluster at a time)."""

RUN = [
    "--no-progress",
    "--config",
    "quickstart",
    "sft.enable=false",
    "data.train_batch_size=2",
    "agent.num_chains=2",
    "agent.max_tokens_per_turn=16",
    "data.val_size=4",
    "trainer.val_before_train=false",
    "trainer.device=cpu",
    "trainer.nnodes=1",
    "trainer.n_gpus_per_node=2",
    # the untrained policy fails every task (advantage 0): the entropy bonus makes each step move it
    "actor_rollout_ref.actor.entropy_coeff=0.01",
]


NO_AUTH = {"RAY_AUTH_MODE": "disabled"}
"""Ray 2.5x's token authentication is off for this throwaway loopback cluster (the drivers would need its token)."""


@pytest.fixture(scope="module")
def ray_address(tmp_path_factory):
    """A 2-CPU Ray head on 127.0.0.1, stopped with its process group at the end."""
    port = free_port()
    ray = Path(sys.executable).with_name("ray")
    temp_dir = tmp_path_factory.mktemp("ray")
    head = subprocess.Popen(
        [str(ray), "start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={port}", "--num-cpus=2",
         "--num-gpus=0", "--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={temp_dir}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, env={**os.environ, **NO_AUTH},
    )  # fmt: skip
    address = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.5)
    yield address
    os.killpg(head.pid, signal.SIGKILL)  # `ray start --block` took over 30 s to stop on SIGTERM
    head.wait(timeout=30)


def _train(ray_address: str, run_dir: Path, *overrides: str, timeout: float = 600):
    command = [sys.executable, "-m", "agentfly_train", *RUN, f"trainer.default_local_dir={run_dir}", *overrides]
    return run_cli(command, timeout=timeout, env={"RAY_ADDRESS": ray_address, **NO_AUTH})


def test_ray_workers_killed_and_resumed_train_as_two_uninterrupted_accelerate_processes(ray_address, tmp_path):
    """A Ray Train worker killed during step 2 fails the run in one line; the same command resumes it from
    checkpoint 1, and its 3 steps log the losses and rewards of 2 ``accelerate launch`` processes run without a
    break (same data, RNG and gradients across the kill, the restore and the two launchers)."""
    import psutil

    run_dir = tmp_path / "ray"
    command = [sys.executable, "-m", "agentfly_train", *RUN, f"trainer.default_local_dir={run_dir}",
               "trainer.total_training_steps=3", "trainer.save_freq=1"]  # fmt: skip
    run = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "RAY_ADDRESS": ray_address, **NO_AUTH},
    )
    deadline = time.monotonic() + 400
    while not (run_dir / "checkpoint-1" / "trainer_state.json").is_file() and time.monotonic() < deadline:
        assert run.poll() is None, run.communicate()[1][-3000:]
        time.sleep(0.2)
    workers = [p for p in psutil.process_iter(["cmdline"]) if "RayTrainWorker" in " ".join(p.info["cmdline"] or ())]
    assert workers, "no Ray Train worker process found"
    workers[-1].kill()
    _, stderr = run.communicate(timeout=300)
    assert run.returncode == 1
    message = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(message) == 1 and "a training worker failed" in message[0] and "resume" in message[0], stderr[-3000:]

    done = _train(ray_address, run_dir, "trainer.total_training_steps=3", "trainer.save_freq=1")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "run directory:" in done.stdout and "(3 steps)" in done.stdout
    result = json.loads((run_dir / "result.json").read_text())
    assert result["steps"] == 3 and Path(result["resumed_from"]).name in ("checkpoint-1", "checkpoint-2")
    ray_steps = step_records(run_dir)
    assert [record["step"] for record in ray_steps] == [1, 2, 3]  # each step logged once, by rank 0
    report = (run_dir / "report.html").read_text()  # the run report, written at the end by rank 0
    assert "Reward and accuracy" in report and "could not write" not in done.stdout

    launch, env = accelerate_launch(2)
    command = [*launch, *RUN, "trainer.launcher=local", f"trainer.default_local_dir={tmp_path / 'accelerate'}",
               "trainer.total_training_steps=3"]  # fmt: skip
    done = run_cli(command, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("run directory:") == 2
    accelerate_steps = step_records(tmp_path / "accelerate")
    for ours, theirs in zip(ray_steps, accelerate_steps, strict=True):
        for key in ("loss", "reward/mean", "actor/entropy", "episode/sampled_tokens"):
            assert ours[key] == pytest.approx(theirs[key], rel=1e-4, abs=1e-6), (key, ours["step"])


def test_ray_workers_sample_with_colocated_vllm_engines_kept_on_the_policy(ray_address, tmp_path):
    """Each worker's engine, pumped by its own asynchronous generator (``async_training``, on-policy settings:
    nothing sampled ahead of the weights), gets the updated policy before step 2."""
    skip_without_vllm()
    engine = ["actor_rollout_ref.rollout.name=vllm", *SMALL_VLLM_ENGINE, "actor_rollout_ref.actor.optim.lr=1e-3"]
    on_policy = ["async_training.enable=true", "async_training.staleness_threshold=0", "async_training.max_staleness=0"]
    done = _train(ray_address, tmp_path, "trainer.total_training_steps=2", *engine, *on_policy)
    assert done.returncode == 0, done.stderr[-3000:]
    steps = step_records(tmp_path)
    assert [record["step"] for record in steps] == [1, 2]
    assert all(record["async/staleness_max"] == 0 and record["async/dropped"] == 0 for record in steps), steps
    # the figure is the maximum over both workers
    assert all(record["rollout/logprob_diff_max"] < 1e-3 for record in steps), steps


def test_too_few_cpus_for_the_workers_is_one_line_within_a_minute(ray_address, tmp_path):
    start = time.monotonic()
    done = _train(ray_address, tmp_path, "trainer.n_gpus_per_node=4", "trainer.total_training_steps=1")
    assert time.monotonic() - start < 60
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "config error: the Ray cluster is too small: trainer.nnodes=1 x trainer.n_gpus_per_node=4 workers need "
        "4 CPUs (it has 2); add nodes or lower the counts (or trainer.cpus_per_worker=1)"
    ]
