"""Whole weights of a policy sharded by FSDP2 (``fully_shard``, as Accelerate's FSDP2 plugin applies it).

Multi-turn rollouts end at different turns on different processes, so the number of forward passes a process
makes while sampling is its own. Under FSDP2 every forward of a sharded module all-gathers its parameters, a
collective all processes must make together; :func:`unsharded` gathers them once, before the rollout, so the
forwards inside make none. :func:`engine_weights` gives an engine with its own copy (vLLM) whole tensors.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator

import torch
from torch import Tensor


def fsdp_modules(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The modules of ``model`` that FSDP2 shards, in ``model.modules()`` order (the same on every process)."""
    from torch.distributed.fsdp import FSDPModule

    return [module for module in model.modules() if isinstance(module, FSDPModule)]


@contextlib.contextmanager
def unsharded(model: torch.nn.Module) -> Iterator[None]:
    """Holds every FSDP2 module of ``model`` unsharded, and not resharded after a forward, for the duration.

    Inside, forwards (``generate`` with ``synced_gpus=False``) are collective-free and may differ in number
    between processes. Entering and leaving are collective: every process must enter together. Each process
    holds the whole model meanwhile (as FSDP1's ``summon_full_params`` does). A no-op for a model without
    FSDP2 modules (one process, DDP).
    """
    modules = fsdp_modules(model)
    if not modules:
        yield
        return
    # the root's lazy init (done by its first forward) sets the root's own parameters to stay unsharded
    modules[0]._get_fsdp_state()._lazy_init()
    # torch has no getter for reshard-after-forward; its per-group settings are kept and put back as they were
    states = [module._get_fsdp_state() for module in modules]
    saved = [
        (state, state._auto_reshard_after_forward, [(g, g.post_forward_mesh_info) for g in state._fsdp_param_groups])
        for state in states
    ]
    for module in modules:
        module.set_reshard_after_forward(False, recurse=False)
        module.unshard()
    try:
        yield
    finally:
        for module in modules:
            module.reshard()
        for state, auto, groups in saved:
            state._auto_reshard_after_forward = auto
            for group, mesh_info in groups:
                group.post_forward_mesh_info = mesh_info


def whole(tensor: Tensor) -> Tensor:
    """``tensor`` itself, or, for an FSDP2 ``DTensor`` (a shard, or a result such as a sharded model's gradient
    norm), the whole tensor (all-gathered: collective)."""
    from torch.distributed.tensor import DTensor

    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


def full_tensors(named: Iterable[tuple[str, Tensor]]) -> Iterator[tuple[str, Tensor]]:
    """``named`` (e.g. a state dict's items) with every FSDP2 shard gathered into a whole tensor (:func:`whole`),
    one at a time. Collective when there are shards: every process must read the iterator to the end."""
    for name, tensor in named:
        yield name, whole(tensor).detach()


def unsharded_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A plain (unsharded, float32) copy of a Hugging Face model that FSDP2 has sharded in place, e.g. by the SFT
    warm start's trainer, for a trainer that prepares it anew; ``model`` itself when it is not sharded.
    Collective when sharded: every process must call it."""
    if not fsdp_modules(model):
        return model
    from transformers import AutoModelForCausalLM

    weights = dict(full_tensors(model.state_dict().items()))
    copy = AutoModelForCausalLM.from_config(model.config, dtype=torch.float32)
    copy.load_state_dict(weights)
    copy.config._name_or_path = model.config._name_or_path
    copy.generation_config = model.generation_config
    return copy


def engine_weights(model: torch.nn.Module) -> Iterator[tuple[str, Tensor]]:
    """The policy's whole weights under the base model's Hugging Face names, for an engine with its own copy
    (vLLM): FSDP2 shards gathered one tensor at a time (:func:`full_tensors`, collective). A PEFT (LoRA) policy's
    adapter is merged into its base weights while they are read, and unmerged after, so the iterator must be read
    to the end.

    Args:
        model: The policy, unwrapped from DDP (``accelerator.unwrap_model``); FSDP2 leaves it sharded in place.
    """
    from peft import PeftModel

    if not isinstance(model, PeftModel):
        yield from full_tensors(model.state_dict().items())
        return
    model.merge_adapter()
    try:
        for name, tensor in full_tensors(model.state_dict().items()):
            if ".lora_" not in name:
                yield name.removeprefix("base_model.model.").replace(".base_layer.", "."), tensor
    finally:
        model.unmerge_adapter()
