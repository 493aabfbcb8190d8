"""Speed of agentfly_train.algorithms at batch 4096 x 1024 response tokens on CPU, against verl 0.9.1.

Times each advantage estimator, KL penalty, the KL-in-reward step and the PPO losses (median of
``--repeats`` rounds after one warm-up) on one synthetic batch: 512 prompts x 8 responses with uid labels,
random lengths, a 64-token tool span in half the rows, 0/1 outcome rewards on each row's last valid token.
If verl imports in the running interpreter, the same inputs go through verl's ``core_algos`` in the same
run, each round calling ours then verl's so both see the same machine load; the table gives verl's time,
the ratio verl / ours (> 1: we are faster) and the largest absolute difference of the outputs on valid
tokens. ``full`` KL has no verl counterpart (verl raises NotImplementedError): it is timed on a smaller
batch of full logits (``--full-kl-shape``) against the same KL computed unchunked.

    python benchmarks/algorithms_speed.py --threads 1   # writes benchmarks/results/algorithms_speed.json

verl is not a dependency. To compare, give an environment that has this project and its torch verl's
wheel and the few packages ``verl.trainer.ppo.core_algos`` imports, keeping pip away from torch:

    pip install --no-deps verl==0.9.1
    pip install "ray>=2.41" codetiming "tensordict>=0.8,<=0.10,!=0.9.0" -c .ci/constraints.txt

On a machine shared with other jobs, ``--threads 1`` gives steadier figures: with every core busy, each
multi-threaded torch op waits for its second thread to be scheduled.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import ModuleType

import numpy as np
import torch

from agentfly_train import algorithms as alg

RESULTS = Path(__file__).parent / "results" / "algorithms_speed.json"

Verl = tuple[ModuleType, Callable[[dict], object]] | None
"""verl's ``core_algos`` module and ``OmegaConf.create`` (its config type), or None where verl does not import."""


@dataclass
class Case:
    """One timed function: ours, verl's equivalent (or None) and how to compare their outputs."""

    name: str
    ours: Callable[[], object]
    verl: Callable[[], object] | None = None
    outputs: Callable[[object], Sequence[torch.Tensor]] = lambda out: [out]  # the tensors to compare


def make_batch(batch: int, length: int, group_size: int, seed: int = 0) -> dict:
    """The synthetic batch described in the module docstring; tensors (B, T) unless noted."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, length + 1, (batch,), generator=g)
    position = torch.arange(length)[None]
    mask = (position < lengths[:, None]).float()
    gap_start = torch.randint(0, length, (batch, 1), generator=g)
    has_gap = (torch.arange(batch) % 2 == 0)[:, None]
    mask[has_gap & (position >= gap_start) & (position < gap_start + 64)] = 0.0  # a 64-token tool span
    mask[torch.arange(batch), 0] = 1.0  # at least one sampled token per row
    last = (mask * position).argmax(-1)
    rewards = torch.zeros(batch, length)
    rewards[torch.arange(batch), last] = torch.randint(0, 2, (batch,), generator=g).float()
    uids = [str(uuid.UUID(int=int(torch.randint(0, 2**62, (1,), generator=g)))) for _ in range(batch // group_size)]
    logprob = -3 * torch.rand(batch, length, generator=g)
    return {
        "rewards": rewards,
        "mask": mask,
        "index": np.array([uid for uid in uids for _ in range(group_size)], dtype=object),  # (B,) verl's "uid" column
        "values": torch.randn(batch, length, generator=g),
        "baselines": torch.randint(0, 2, (batch,), generator=g).float(),  # (B,)
        "logprob": logprob,
        "old_logprob": logprob + 0.1 * torch.randn(batch, length, generator=g),
        "ref_logprob": logprob + 0.3 * torch.randn(batch, length, generator=g),
        "advantages": torch.randn(batch, length, generator=g),
    }


def estimator_cases(b: dict, verl: Verl) -> list[Case]:
    r, m, idx = b["rewards"], b["mask"], b["index"]
    cases = []
    settings = [
        ("gae γ=1 λ=1", "gae", {"gamma": 1.0, "lam": 1.0}),
        ("gae γ=0.99 λ=0.95", "gae", {"gamma": 0.99, "lam": 0.95}),
        ("grpo", "grpo", {}),
        ("grpo (Dr. GRPO)", "grpo", {"norm_adv_by_std_in_grpo": False}),
        ("grpo_passk", "grpo_passk", {}),
        ("reinforce_plus_plus γ=1", "reinforce_plus_plus", {"gamma": 1.0}),
        ("reinforce_plus_plus γ=0.99", "reinforce_plus_plus", {"gamma": 0.99}),
        ("reinforce_plus_plus_baseline", "reinforce_plus_plus_baseline", {}),
        ("rloo", "rloo", {}),
        ("remax", "remax", {}),
        ("opo", "opo", {}),
        ("gpg", "gpg", {}),
    ]
    inputs = {"index": idx, "values": b["values"], "reward_baselines": b["baselines"]}
    for label, name, options in settings:
        ours = partial(alg.compute_advantage, name, r, m, **inputs, **options)
        cases.append(Case(f"adv {label}", ours, _verl_estimator(verl, b, name, options), outputs=lambda out: out))
    return cases


def _verl_estimator(verl: Verl, b: dict, name: str, options: dict) -> Callable[[], object] | None:
    if verl is None:
        return None
    core, config = verl
    r, m, idx = b["rewards"], b["mask"], b["index"]
    gamma, lam = options.get("gamma", 1.0), options.get("lam", 1.0)
    norm = options.get("norm_adv_by_std_in_grpo", True)
    cfg = config({"gamma": gamma, "lam": lam, "norm_adv_by_std_in_grpo": norm})
    if name == "gae":
        return lambda: core.compute_gae_advantage_return(r, b["values"], m, gamma, lam)
    if name == "grpo":
        return lambda: core.compute_grpo_outcome_advantage(r, m, idx, norm_adv_by_std_in_grpo=norm)
    if name == "remax":
        return lambda: core.compute_remax_outcome_advantage(r, b["baselines"], m, config=cfg)
    return lambda: core.get_adv_estimator_fn(name)(r, m, index=idx, config=cfg)


def kl_cases(b: dict, verl: Verl) -> list[Case]:
    core = verl[0] if verl else None
    old, ref = b["old_logprob"], b["ref_logprob"]
    cases = []
    for kind in ("kl", "abs", "mse", "low_var_kl", "low_var_kl+"):
        theirs = partial(core.kl_penalty, old, ref, kind) if core else None
        cases.append(Case(f"kl_penalty {kind}", partial(alg.kl_penalty, old, ref, kind), theirs))
    for kind in ("kl", "low_var_kl"):
        theirs = partial(_verl_apply_kl_penalty, core, b, kind) if core else None
        cases.append(Case(f"apply_kl_penalty {kind} (adaptive)", partial(_apply_kl_penalty, b, kind), theirs))
    return cases


def _apply_kl_penalty(b: dict, kind: str) -> torch.Tensor:
    controller = alg.AdaptiveKLController(0.1, 0.1, 1e4)
    return alg.apply_kl_penalty(b["rewards"], b["old_logprob"], b["ref_logprob"], b["mask"], controller, kind)[0]


def _verl_apply_kl_penalty(core: ModuleType, b: dict, kind: str) -> torch.Tensor:
    """verl 0.9.1's ``ray_trainer.apply_kl_penalty`` without its DataProto wrapper (ray_trainer's imports need the
    whole training stack); the same calls in the same order."""
    mask = b["mask"]
    kl_ctrl = core.AdaptiveKLController(0.1, 0.1, 1e4)
    kld = core.kl_penalty(b["old_logprob"], b["ref_logprob"], kl_penalty=kind) * mask
    rewards = b["rewards"] - kl_ctrl.value * kld
    current_kl = torch.mean(core.verl_F.masked_mean(kld, mask=mask, axis=-1), dim=0).item()
    kl_ctrl.update(current_kl=current_kl, n_steps=mask.shape[0])
    return rewards


def loss_cases(b: dict, verl: Verl) -> list[Case]:
    core, config = verl if verl else (None, None)
    cases = []
    for mode in ("token-mean", "seq-mean-token-mean"):
        ours = partial(_policy_gradient, alg.policy_loss, b, 0.2, 0.28, 3.0, mode)
        theirs = None
        if core:
            actor = config({"clip_ratio": 0.2, "clip_ratio_low": 0.2, "clip_ratio_high": 0.28, "clip_ratio_c": 3.0})
            actor.global_batch_info = {}
            theirs = partial(_policy_gradient, core.compute_policy_loss_vanilla, b, mode, actor)
        cases.append(Case(f"policy_loss fwd+bwd {mode}", ours, theirs))
    value_inputs = (b["values"], b["advantages"], b["values"] + 0.5 * b["advantages"], b["mask"], 0.5)  # V, R, V_old
    theirs = partial(core.compute_value_loss, *value_inputs) if core else None
    cases.append(Case("value_loss token-mean", partial(alg.value_loss, *value_inputs), theirs, outputs=list))
    return cases


def _policy_gradient(loss_fn: Callable, b: dict, *loss_args: object) -> torch.Tensor:
    """d loss / d log π of ``loss_fn(old_log_prob, log_prob, advantages, mask, *loss_args)``: forward and backward."""
    log_prob = b["logprob"].clone().requires_grad_()
    loss, _ = loss_fn(b["old_logprob"], log_prob, b["advantages"], b["mask"], *loss_args)
    loss.backward()
    return log_prob.grad


def median_seconds(fns: Sequence[Callable[[], object]], repeats: int) -> tuple[list[float], list[object]]:
    """Median wall time of each function over ``repeats`` rounds after one untimed warm-up, and its output.

    Each round calls every function once, so all of them see the same load on a shared machine.
    """
    outputs = [fn() for fn in fns]
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for fn, fn_times in zip(fns, times, strict=True):
            start = time.perf_counter()
            fn()
            fn_times.append(time.perf_counter() - start)
    return [statistics.median(t) for t in times], outputs


def max_abs_diff(case: Case, ours: object, theirs: object, mask: torch.Tensor) -> float:
    """Largest |ours - verl| over the compared outputs, on valid tokens for (B, T) outputs."""
    worst = 0.0
    for a, b in zip(case.outputs(ours), case.outputs(theirs), strict=True):
        a, b = a.detach(), torch.as_tensor(b).detach()
        if a.shape == mask.shape:
            a, b = a[mask.bool()], b[mask.bool()]
        worst = max(worst, (a.double() - b.double()).abs().max().item())
    return worst


def load_verl() -> Verl:
    """(verl's core_algos, OmegaConf.create) when verl imports here, else None."""
    try:
        from omegaconf import OmegaConf
        from verl.trainer.ppo import core_algos
    except ImportError:
        return None
    return core_algos, OmegaConf.create


def run_full_kl(shape: Sequence[int], chunk_size: int, repeats: int) -> dict:
    """Times ``full_kl`` on random (B, T, V) logits against an unchunked torch computation of the same KL."""
    g = torch.Generator().manual_seed(1)
    logits, ref_logits = torch.randn(*shape, generator=g), torch.randn(*shape, generator=g)

    def unchunked() -> torch.Tensor:
        log_p, log_q = logits.log_softmax(-1), ref_logits.log_softmax(-1)
        return (log_p.exp() * (log_p - log_q)).sum(-1)

    (ours_s, plain_s), (ours, plain) = median_seconds(
        [partial(alg.full_kl, logits, ref_logits, chunk_size), unchunked], repeats
    )
    return {
        "name": f"full_kl B,T,V={tuple(shape)} chunk={chunk_size}",
        "ours_s": ours_s,
        "unchunked_torch_s": plain_s,
        "max_abs_diff_vs_unchunked": (ours - plain).abs().max().item(),
    }


def markdown_table(rows: list[dict]) -> str:
    lines = ["| function | ours (ms) | verl (ms) | verl / ours | max abs diff |", "|---|---:|---:|---:|---:|"]
    for row in rows:
        verl_ms = f"{row['verl_s'] * 1e3:.1f}" if row.get("verl_s") is not None else "n/a"
        ratio = f"{row['verl_s'] / row['ours_s']:.2f}x" if row.get("verl_s") is not None else "n/a"
        diff = f"{row['max_abs_diff']:.1e}" if row.get("max_abs_diff") is not None else "n/a"
        lines.append(f"| {row['name']} | {row['ours_s'] * 1e3:.1f} | {verl_ms} | {ratio} | {diff} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=4096, help="responses in the batch (B)")
    parser.add_argument("--length", type=int, default=1024, help="response tokens per row (T)")
    parser.add_argument("--group-size", type=int, default=8, help="responses per prompt")
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats per function; the median is reported")
    parser.add_argument("--full-kl-shape", type=int, nargs=3, default=(2, 1024, 32768), metavar=("B", "T", "V"))
    parser.add_argument("--full-kl-chunk", type=int, default=256, help="positions per chunk of full_kl")
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--json", type=Path, default=RESULTS, help="where to write the results")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    verl = load_verl()
    batch = make_batch(args.batch, args.length, args.group_size)
    rows = []
    for case in estimator_cases(batch, verl) + kl_cases(batch, verl) + loss_cases(batch, verl):
        row: dict = {"name": case.name}
        if case.verl is None:
            (row["ours_s"],), _ = median_seconds([case.ours], args.repeats)
        else:
            (row["ours_s"], row["verl_s"]), (ours, theirs) = median_seconds([case.ours, case.verl], args.repeats)
            row["speedup_vs_verl"] = row["verl_s"] / row["ours_s"]
            row["max_abs_diff"] = max_abs_diff(case, ours, theirs, batch["mask"])
        rows.append(row)
        print(markdown_table([row]).splitlines()[-1], flush=True)
    full = run_full_kl(args.full_kl_shape, args.full_kl_chunk, args.repeats)

    print("\n" + markdown_table(rows))
    print(
        f"\n{full['name']}: {full['ours_s'] * 1e3:.0f} ms (unchunked torch: {full['unchunked_torch_s'] * 1e3:.0f} ms, "
        f"max abs diff {full['max_abs_diff_vs_unchunked']:.1e}); verl has no 'full' KL."
    )
    result = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "batch": args.batch,
        "length": args.length,
        "group_size": args.group_size,
        "repeats": args.repeats,
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "load_average_1_5_15_min": os.getloadavg(),
        "machine": platform.processor() or platform.machine(),
        "verl": _verl_version() if verl else None,
        "rows": rows,
        "full_kl": full,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    return result


def _verl_version() -> str:
    from importlib.metadata import version

    return version("verl")


if __name__ == "__main__":
    main()
