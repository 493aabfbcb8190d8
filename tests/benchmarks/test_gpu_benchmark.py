"""benchmarks/gpu: the wheelhouse's manifest serves the trainer on the GPU machine's own packages, and the benchmark's
dry run on a CPU writes every figure of every run."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.helpers.paths import REPO_ROOT
from tests.helpers.readme import readme_command, runs_readme_command
from tests.helpers.skips import needs_train_extra

GPU = REPO_ROOT / "benchmarks" / "gpu"


def script(name: str):
    """The module ``benchmarks/gpu/<name>.py``."""
    spec = importlib.util.spec_from_file_location(f"gpu_{name}", GPU / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_the_manifest_pins_versions_the_project_accepts_and_with_the_machines_packages_covers_the_trainer():
    wheelhouse = script("wheelhouse")
    wanted = wheelhouse.project_requirements()
    pinned = wheelhouse.manifest()
    for pin in pinned:
        name = canonicalize_name(pin.name)
        if name in wanted:
            (version,) = (Version(spec.version) for spec in pin.specifier)
            assert wanted[name].specifier.contains(version), f"{pin} is outside the project's {wanted[name]}"
    machine = wheelhouse.MACHINE_VERSIONS
    assert wheelhouse.unmet([wanted[canonicalize_name(name)] for name in machine if name in wanted], machine, "x") == []
    covered = set(machine) | {canonicalize_name(pin.name) for pin in pinned}
    assert {canonicalize_name(name) for name in wheelhouse.TRAINER_NEEDS} <= covered


def test_unmet_names_each_requirement_missing_or_too_old_and_skips_those_that_do_not_apply():
    wheelhouse = script("wheelhouse")
    requirements = [Requirement("trl>=1.16"), Requirement("gymnasium"), Requirement("dataclasses; python_version<'3'")]
    assert wheelhouse.unmet(requirements, {"trl": "1.15.2"}, "agentfly") == [
        "agentfly needs trl>=1.16 (found 1.15.2)",
        "agentfly needs gymnasium (found nothing)",
    ]


@needs_train_extra
@pytest.mark.slow
@runs_readme_command("bash benchmarks/gpu/run.sh")
def test_the_gpu_run_checks_its_install_and_its_dry_run_writes_every_figure_of_each_run(readme, tmp_path: Path):
    """run.sh on a CPU as on the GPU machine, but with this interpreter's packages as the machine's (all there: pip
    installs nothing) and ``--dry-run``: the venv, the requirement check, the runs, the JSON."""
    command = readme_command(readme, add=["--dry-run", "--tokenizer", str(tmp_path / "none")])
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])
    env = {**os.environ, "PATH": path, "OUT": str(tmp_path / "out"), "VENV": str(tmp_path / "venv"), "BUDGET": "500"}
    done = subprocess.run(
        command.argv, capture_output=True, text=True, cwd=REPO_ROOT, env=env, timeout=600, check=False
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (tmp_path / "out" / "log.txt").read_text().startswith("installed: torch ")
    result = json.loads((tmp_path / "out" / "gpu_trainer_speed.json").read_text())
    fields = script("trainer_speed").RUN_FIELDS
    assert [run["run"] for run in result["runs"]] == [
        "tiny/agentfly/no-ckpt", "tiny/trl/no-ckpt", "tiny/agentfly-continuous/no-ckpt", "tiny/agentfly/ckpt"
    ]  # fmt: skip
    for run in result["runs"]:
        assert set(fields) <= set(run), run
        assert run["adv_estimator"] == "grpo"  # both trainers train GRPO (the guide's default is PPO with a critic)
        assert 0 < run["sampled_tokens"] < run["trained_tokens"]
        assert abs(run["rollout_s"] + run["logprob_s"] + run["update_s"] - run["step_s"]) < 1e-6
        path = run["cuda_path"]
        assert path["losses_finite"] and path["grad_norms_finite"]
        assert path["gradient_checkpointing"] is run["gradient_checkpointing"]
    assert set(result["ratios"]) == {"tiny", "tiny/agentfly-continuous"}
    assert set(result["ratios"]["tiny"]) == {"step_time", "sampled_tokens_per_s", "trained_tokens_per_s"}
    assert result["machine"]["device"] == "cpu"
    assert result["batch"] == {"prompts": 2, "chains": 2, "tokens": 16, "steps": 2}
