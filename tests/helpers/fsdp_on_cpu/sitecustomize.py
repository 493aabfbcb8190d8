"""Turns Accelerate's FSDP back on for CPU processes (put this folder on ``PYTHONPATH``).

Accelerate keeps FSDP for accelerator devices: on CPU processes it ignores ``--use_fsdp`` and runs DDP.
torch's FSDP2 (``fully_shard``) itself runs on CPU over gloo, so after Accelerate has chosen multi-CPU DDP this
sets its state to FSDP with the plugin it was given (every time the state is read anew): the policy is then
really sharded, as on GPUs.
"""

from accelerate import state
from accelerate.utils import DistributedType

_choose = state.AcceleratorState.__init__


def _fsdp_on_cpu(self, *args, **kwargs):
    _choose(self, *args, **kwargs)
    # AcceleratorState() without arguments re-reads the multi-CPU choice: keep the plugin already chosen
    plugin = kwargs.get("fsdp_plugin") or getattr(self, "fsdp_plugin", None)
    if self.distributed_type == DistributedType.MULTI_CPU and plugin is not None:
        self.distributed_type = DistributedType.FSDP
        self.fsdp_plugin = plugin


state.AcceleratorState.__init__ = _fsdp_on_cpu
