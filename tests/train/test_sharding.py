"""``agentfly_train.sharding`` on a Qwen2 model sharded by torch's FSDP2 across two CPU processes (gloo), checked
against the same model unsharded: forwards inside ``unsharded`` (a different number on each process), the whole
tensors of ``full_tensors``, the LoRA-merged weights of ``engine_weights`` and ``unsharded_copy``.

The test starts ``python -m torch.distributed.run --nproc_per_node 2 -m tests.train.test_sharding``; each process
runs :func:`_check_on_this_process`, and rank 0 prints ``sharding checks passed`` when both got through.
"""

from __future__ import annotations

import sys

import torch

TOLERANCE = 1e-6
"""float32, same weights, same ops: the sharded and unsharded models agree to rounding."""


def test_sharded_policy_gives_the_unsharded_ones_weights_and_outputs():
    from tests.helpers.processes import free_port, run_cli

    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={free_port()}",
               "-m", "tests.train.test_sharding"]  # fmt: skip
    done = run_cli(command, timeout=300, env={"OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "sharding checks passed" in done.stdout


def _model(lora: bool) -> torch.nn.Module:
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)  # fmt: skip
    model = Qwen2ForCausalLM(config)
    if lora:  # init_lora_weights=False: a non-zero adapter, so merging changes the weights
        model = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    return model


def _shard(model: torch.nn.Module) -> None:
    from torch.distributed.fsdp import fully_shard

    for layer in model.get_base_model().model.layers if hasattr(model, "get_base_model") else model.model.layers:
        fully_shard(layer)
    fully_shard(model)


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and float((a - b).abs().max()) <= TOLERANCE


def _check_on_this_process() -> None:
    import copy
    import datetime

    import torch.distributed as dist

    from agentfly_train.sharding import engine_weights, fsdp_modules, full_tensors, unsharded, unsharded_copy

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))  # a mismatched collective fails
    rank = dist.get_rank()
    ids = torch.randint(0, 64, (2, 6), generator=torch.Generator().manual_seed(1))

    model = _model(lora=False)
    plain = copy.deepcopy(model)
    _shard(model)
    assert len(fsdp_modules(model)) == 3
    with torch.no_grad():
        want = plain(input_ids=ids).logits
        with unsharded(model):  # collective-free inside: rank 1 makes more forwards and a longer generate
            for _ in range(1 + 2 * rank):
                assert _close(model(input_ids=ids).logits, want)
            sampled = model.generate(input_ids=ids, max_new_tokens=3 + 4 * rank, do_sample=False, synced_gpus=False)
        assert torch.equal(sampled, plain.generate(input_ids=ids, max_new_tokens=3 + 4 * rank, do_sample=False))
        assert _close(model(input_ids=ids).logits, want)  # resharded: the usual collective forward again
    whole = dict(full_tensors(model.state_dict().items()))
    assert whole.keys() == plain.state_dict().keys()
    assert all(_close(whole[name], tensor) for name, tensor in plain.state_dict().items())
    copied = unsharded_copy(model)
    assert not fsdp_modules(copied) and _close(copied(input_ids=ids).logits, want)

    policy = _model(lora=True)
    merged = copy.deepcopy(policy).merge_and_unload().state_dict()
    _shard(policy)
    sent = dict(engine_weights(policy))
    assert sent.keys() == merged.keys()
    assert all(_close(sent[name], tensor) for name, tensor in merged.items())
    # the adapter is unmerged again: the policy computes what it computed before the sync
    reference = _model(lora=True)
    with torch.no_grad():
        assert _close(policy(input_ids=ids).logits, reference(input_ids=ids).logits)
    dist.barrier()
    if rank == 0:
        print("sharding checks passed", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    _check_on_this_process()
