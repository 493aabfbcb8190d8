"""Several CPU training processes under ``accelerate launch``: DDP over gloo, or FSDP2."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.helpers.processes import free_port

FSDP_ON_CPU = Path(__file__).parent / "fsdp_on_cpu"
"""A ``sitecustomize`` folder that turns Accelerate's FSDP back on for CPU processes (see its docstring)."""


def accelerate_launch(processes: int, *, fsdp: bool = False) -> tuple[list[str], dict[str, str]]:
    """The command prefix and environment that start ``processes`` CPU processes of ``-m agentfly_train`` under
    ``accelerate launch``: DDP over gloo, or with ``fsdp`` FSDP2 (the policy sharded across them).

    ``accelerate launch --cpu --num_processes N`` starts one process; ``--multi_gpu`` (or ``--use_fsdp``) with
    ``ACCELERATE_USE_CPU=true`` starts N through torch's launcher, and Accelerate then sets up multi-CPU DDP.
    """
    launcher = str(Path(sys.executable).with_name("accelerate"))
    mode = ["--use_fsdp", "--fsdp_version=2", "--fsdp_auto_wrap_policy=TRANSFORMER_BASED_WRAP",
            "--fsdp_state_dict_type=SHARDED_STATE_DICT"] if fsdp else ["--multi_gpu"]  # fmt: skip
    command = [launcher, "launch", *mode, f"--num_processes={processes}", "--num_machines=1",
               "--mixed_precision=no", "--dynamo_backend=no", f"--main_process_port={free_port()}",
               "-m", "agentfly_train"]  # fmt: skip
    env = {"ACCELERATE_USE_CPU": "true", "OMP_NUM_THREADS": "1"}
    if fsdp:
        env["PYTHONPATH"] = str(FSDP_ON_CPU)
    return command, env
