"""GRPO training speed on a GPU: agentfly's trainer against TRL's own ``GRPOTrainer`` on the same model and batch.

Each run trains a few GRPO steps on ``agentfly/Arith-Calc`` with a randomly initialised model of a real model's
shape (``qwen2.5-0.5b``, ``qwen3-1.7b``; the real Qwen3 tokenizer from ``.gpu/tokenizer``), bf16 mixed precision,
the HF generation backend and the attention transformers picks (SDPA, or flash attention where installed); the
baseline is TRL's ``GRPOTrainer`` with its own tool loop over the same env (``environment_factory``). Every run is a
child process (its own peak memory, a crash or a hang costs only that run), all within ``--budget`` seconds; the JSON
is rewritten after each run, so a run cut short still leaves the finished ones.

Figures per run (mean over the steps after the first): ``step_s`` and its split, ``rollout_s`` (sampling and env
steps, scoring), ``logprob_s`` (log-prob passes without gradient: old or reference log-probs) and ``update_s`` (the
rest: the loss's forward and backward, the optimiser); ``sampled_tokens_per_s`` (policy-sampled tokens over
``rollout_s``), ``trained_tokens_per_s`` (prompt and completion tokens over ``update_s``), ``peak_memory_gib`` and
``mfu_update`` (6 · parameters · trained tokens / ``update_s`` / the card's dense bf16 peak; attention's sequence
term left out). ``ratios`` divides agentfly's figures by TRL's for each shape.

    python benchmarks/gpu/trainer_speed.py --out gpu.json                 # on a GPU (benchmarks/gpu/run.sh)
    python benchmarks/gpu/trainer_speed.py --dry-run --out dry.json       # on a CPU: tiny shape, the same code paths
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
ENV_ID = "agentfly/Arith-Calc"
SHAPES: dict[str, tuple[str, dict[str, Any]]] = {
    "qwen2.5-0.5b": ("qwen2", {"hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
                               "num_attention_heads": 14, "num_key_value_heads": 2, "rope_theta": 1e6}),
    "qwen3-1.7b": ("qwen3", {"hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 28,
                             "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, "rope_theta": 1e6}),
    "tiny": ("qwen2", {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
                       "num_key_value_heads": 2}),
}  # fmt: skip
"""Model shapes by name: (transformers model type, config fields); the vocabulary is the real models' 151,936
(the tokenizer's size for ``tiny``), embeddings tied as in both real models."""
REAL_VOCAB = 151_936
BF16_PEAK_FLOPS = {"H100": 989e12, "H200": 989e12, "A100": 312e12, "L40S": 362e12, "B200": 2250e12}
"""Dense bf16 peak of a card by a name its device name contains (SXM figures; NVIDIA's datasheets)."""
GPU_RUNS = (("qwen2.5-0.5b", "agentfly", False), ("qwen2.5-0.5b", "trl", False), ("qwen3-1.7b", "agentfly", False),
            ("qwen3-1.7b", "trl", False), ("qwen2.5-0.5b", "agentfly-continuous", False),
            ("qwen2.5-0.5b", "agentfly", True))  # fmt: skip
"""(shape, trainer, gradient checkpointing), in order of importance: runs the budget does not reach are skipped.
Checkpointing is measured on the small shape only: TRL's generation under it did not finish 3 steps of the 1.7B
shape in 100 s on an H100 (2026-11-27). ``agentfly-continuous`` samples on transformers' continuous batching
(``rollout.hf_engine=continuous``, issue #44), which this project's CPU measures slower than the padded engine."""
DRY_RUNS = (("tiny", "agentfly", False), ("tiny", "trl", False), ("tiny", "agentfly-continuous", False),
            ("tiny", "agentfly", True))  # fmt: skip
RUN_FIELDS = ("step_s", "rollout_s", "logprob_s", "update_s", "sampled_tokens_per_s", "trained_tokens_per_s",
              "peak_memory_gib", "mfu_update", "parameters", "cuda_path")  # fmt: skip
"""The figures every finished run reports (the tests check them)."""


@dataclass
class Batch:
    """The batch of every run: ``prompts`` tasks x ``chains`` episodes per step, two micro-batches per optimiser
    step, at most ``tokens`` sampled per turn (two turns)."""

    prompts: int
    chains: int
    tokens: int
    steps: int

    @property
    def micro_batch(self) -> int:
        return self.prompts * self.chains // 2


@dataclass
class StepRecord:
    """One optimiser step's wall time and parts (seconds) and token counts."""

    step_s: float = 0.0
    generate_s: float = 0.0
    logprob_s: float = 0.0
    sampled_tokens: int = 0
    trained_tokens: int = 0


@dataclass
class PhaseClock:
    """Times a trainer's phases by wrapping two of its methods on the instance (TRL's and agentfly's trainers have
    both): ``_generate_and_score_completions`` (the rollout, with any no-gradient log-prob pass in it) and
    ``_get_per_token_logps_and_entropies`` (counted when called without gradient); the device is synchronised at
    each boundary so that asynchronous kernels land in the phase that launched them."""

    cuda: bool
    steps: list[StepRecord] = field(default_factory=list)
    current: StepRecord = field(default_factory=StepRecord)

    def sync(self) -> None:
        if self.cuda:
            import torch

            torch.cuda.synchronize()

    def attach(self, trainer: Any) -> None:
        generate, logprobs = trainer._generate_and_score_completions, trainer._get_per_token_logps_and_entropies

        def timed_generate(*args: Any, **kwargs: Any) -> Any:
            self.sync()
            start = time.perf_counter()
            output = generate(*args, **kwargs)
            self.sync()
            self.current.generate_s += time.perf_counter() - start
            sampled = output["completion_mask"]
            if output.get("tool_mask") is not None:
                sampled = sampled * output["tool_mask"]
            self.current.sampled_tokens += int(sampled.sum())
            self.current.trained_tokens += int(output["prompt_mask"].sum() + output["completion_mask"].sum())
            return output

        def timed_logprobs(*args: Any, **kwargs: Any) -> Any:
            import torch

            if torch.is_grad_enabled():
                return logprobs(*args, **kwargs)
            self.sync()
            start = time.perf_counter()
            output = logprobs(*args, **kwargs)
            self.sync()
            self.current.logprob_s += time.perf_counter() - start
            return output

        trainer._generate_and_score_completions = timed_generate
        trainer._get_per_token_logps_and_entropies = timed_logprobs
        trainer.add_callback(self.callback())

    def callback(self) -> Any:
        from transformers import TrainerCallback

        clock = self

        class StepClock(TrainerCallback):
            def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
                if clock.cuda:
                    import torch

                    torch.cuda.reset_peak_memory_stats()

            def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
                clock.sync()
                clock.current = StepRecord(step_s=time.perf_counter())

            def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
                clock.sync()
                clock.current.step_s = time.perf_counter() - clock.current.step_s
                clock.steps.append(clock.current)

        return StepClock()


def build_model(shape: str, tokenizer_dir: Path, directory: Path, device: str) -> None:
    """Saves a randomly initialised model of ``shape`` (bfloat16 weights) with the tokenizer to ``directory``."""
    import torch
    import trl
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from trl.chat_template_utils import add_response_schema

    model_type, fields = SHAPES[shape]
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    try:  # TRL's tool loop parses the templates it knows only; the Qwen3 one as TRL ships it for any other
        add_response_schema(copy.deepcopy(tokenizer))
    except ValueError:
        tokenizer.chat_template = (Path(trl.__file__).parent / "chat_templates" / "qwen3.jinja").read_text()
    stop = tokenizer.convert_tokens_to_ids("<|im_end|>")
    vocab = REAL_VOCAB if shape != "tiny" else len(tokenizer)
    ids = {"eos_token_id": stop, "pad_token_id": tokenizer.pad_token_id, "bos_token_id": None}
    config = AutoConfig.for_model(
        model_type, vocab_size=vocab, tie_word_embeddings=True, max_position_embeddings=8192, **ids, **fields
    )
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.generation_config.eos_token_id = stop
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)


def agentfly_trainer(
    model_dir: Path, batch: Batch, checkpointing: bool, run_dir: Path, engine: str = "padded"
) -> tuple[Any, Any]:
    """agentfly's trainer for the run, built as the CLI builds it, training TRL's algorithm (GRPO, no entropy bonus,
    no KL term; the training guide's defaults are PPO with a critic and an entropy bonus), sampling on the HF backend's
    ``engine`` (``padded`` or ``continuous``); ``(trainer, close)``."""
    from agentfly_train.build import prepare_run
    from agentfly_train.config import load_config

    overrides = [
        "algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.entropy_coeff=0", f"agent.env={ENV_ID}",
        "agent.agent_type=hf", "agent.max_turns=2", f"agent.num_chains={batch.chains}",
        f"agent.max_tokens_per_turn={batch.tokens}", "trainer.n_gpus_per_node=1", "sft.enable=false",
        f"data.train_batch_size={batch.prompts}",
        f"actor_rollout_ref.model.path={model_dir}",
        f"actor_rollout_ref.model.enable_gradient_checkpointing={str(checkpointing).lower()}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={batch.micro_batch}",
        "actor_rollout_ref.actor.use_kl_loss=false", f"actor_rollout_ref.rollout.response_length={2 * batch.tokens}",
        f"trainer.total_training_steps={batch.steps}", "trainer.val_before_train=false",
        f"trainer.default_local_dir={run_dir}", f"actor_rollout_ref.rollout.hf_engine={engine}",
    ]  # fmt: skip
    prepared = prepare_run(load_config(overrides))
    return prepared.trainer, prepared.trainer.close


def trl_trainer(model_dir: Path, batch: Batch, checkpointing: bool, run_dir: Path) -> tuple[Any, Any]:
    """TRL's ``GRPOTrainer`` with its own tool loop over the same env and the same batch; ``(trainer, close)``."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from agentfly_envs.adapters.trl import make_trl_environment, trl_dataset_rows
    from agentfly_train.trl_args import checkpointing_argument

    cuda = torch.cuda.is_available()
    args = GRPOConfig(
        output_dir=str(run_dir), per_device_train_batch_size=batch.micro_batch, gradient_accumulation_steps=2,
        num_generations=batch.chains, max_completion_length=batch.tokens, max_steps=batch.steps,
        learning_rate=1e-6, beta=0.0, temperature=1.0, bf16=cuda, use_cpu=not cuda, logging_steps=1, report_to=[],
        save_strategy="no", disable_tqdm=True, seed=0, **checkpointing_argument(GRPOConfig, checkpointing),
    )  # fmt: skip
    rows = trl_dataset_rows(ENV_ID, num_rows=batch.prompts * (batch.steps + 1))
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32),
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=AutoTokenizer.from_pretrained(model_dir, padding_side="left"),
        environment_factory=make_trl_environment(ENV_ID),
    )
    return trainer, lambda: None


TRAINERS = {
    "agentfly": agentfly_trainer,
    "agentfly-continuous": functools.partial(agentfly_trainer, engine="continuous"),
    "trl": trl_trainer,
}


def flop_parameters(model: Any) -> int:
    """Parameters that cost 2 FLOPs per token forward: all but an untied input embedding (a lookup)."""
    total = sum(parameter.numel() for parameter in model.parameters())
    tied = model.get_input_embeddings().weight is model.get_output_embeddings().weight
    return total if tied else total - model.get_input_embeddings().weight.numel()


def peak_flops() -> float | None:
    """The card's dense bf16 peak (FLOP/s) from :data:`BF16_PEAK_FLOPS`; ``None`` for a CPU or an unknown card."""
    import torch

    if not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name()
    return next((peak for card, peak in BF16_PEAK_FLOPS.items() if card in name), None)


def one_run(shape: str, trainer_name: str, checkpointing: bool, model_dir: Path, batch: Batch) -> dict[str, Any]:
    """Trains ``batch.steps`` steps with one trainer and returns its figures (see the module docstring)."""
    import torch

    cuda = torch.cuda.is_available()
    with tempfile.TemporaryDirectory() as run_dir:
        trainer, close = TRAINERS[trainer_name](model_dir, batch, checkpointing, Path(run_dir))
        clock = PhaseClock(cuda)
        clock.attach(trainer)
        try:
            trainer.train()
        finally:
            close()
        model = trainer.accelerator.unwrap_model(trainer.model)
        losses = [record["loss"] for record in trainer.state.log_history if "loss" in record]
        norms = [record["grad_norm"] for record in trainer.state.log_history if "grad_norm" in record]
    measured = clock.steps[1:] or clock.steps
    mean = {name: sum(getattr(step, name) for step in measured) / len(measured) for name in asdict(measured[0])}
    rollout_s = mean["generate_s"] - mean["logprob_s"]
    update_s = mean["step_s"] - mean["generate_s"]
    parameters = flop_parameters(model)
    peak = peak_flops()
    return {
        "shape": shape,
        "trainer": trainer_name,
        "adv_estimator": trainer.rl.algorithm.adv_estimator if trainer_name != "trl" else "grpo",
        "gradient_checkpointing": checkpointing,
        "steps_measured": len(measured),
        "step_s": mean["step_s"],
        "rollout_s": rollout_s,
        "logprob_s": mean["logprob_s"],
        "update_s": update_s,
        "sampled_tokens": mean["sampled_tokens"],
        "trained_tokens": mean["trained_tokens"],
        "sampled_tokens_per_s": mean["sampled_tokens"] / rollout_s,
        "trained_tokens_per_s": mean["trained_tokens"] / update_s,
        "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
        "mfu_update": 6 * parameters * mean["trained_tokens"] / update_s / peak if peak else None,
        "parameters": parameters,
        "cuda_path": {
            "device": str(next(model.parameters()).device),
            "mixed_precision": "bf16" if trainer.args.bf16 else "fp32",
            "attention": model.config._attn_implementation,
            "gradient_checkpointing": any(getattr(part, "gradient_checkpointing", False) for part in model.modules()),
            "losses_finite": bool(losses) and all(math.isfinite(loss) for loss in losses),
            "grad_norms_finite": bool(norms) and all(math.isfinite(norm) for norm in norms),
        },
    }


def machine() -> dict[str, Any]:
    """What ran the benchmark: versions, the card, its bf16 peak, whether flash attention is installed."""
    import importlib.util

    import torch
    import transformers
    import trl

    cuda = torch.cuda.is_available()
    return {
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "bf16_peak_flops": peak_flops(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "transformers": transformers.__version__,
        "trl": trl.__version__,
        "flash_attn_installed": importlib.util.find_spec("flash_attn") is not None,
    }


def ratios(runs: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """agentfly's figures over TRL's, for runs of the same shape and gradient checkpointing setting: keyed by the
    shape for the padded engine, ``SHAPE/agentfly-continuous`` for continuous batching."""
    out = {}
    for ours in runs:
        if ours.get("trainer", "trl") == "trl" or "step_s" not in ours:
            continue
        same = (ours["shape"], ours["gradient_checkpointing"])
        theirs = next((run for run in runs if run.get("trainer") == "trl" and "step_s" in run
                       and (run["shape"], run["gradient_checkpointing"]) == same), None)  # fmt: skip
        if theirs is not None:
            key = ours["shape"] if ours["trainer"] == "agentfly" else f"{ours['shape']}/{ours['trainer']}"
            out[key] = {
                "step_time": ours["step_s"] / theirs["step_s"],
                "sampled_tokens_per_s": ours["sampled_tokens_per_s"] / theirs["sampled_tokens_per_s"],
                "trained_tokens_per_s": ours["trained_tokens_per_s"] / theirs["trained_tokens_per_s"],
            }
    return out


def run_all(args: argparse.Namespace) -> dict[str, Any]:
    """Builds each shape's model once, runs :data:`GPU_RUNS` (or :data:`DRY_RUNS`) as child processes within the
    budget, and writes the JSON after each."""
    import torch

    deadline = time.monotonic() + args.budget
    device = "cuda" if torch.cuda.is_available() else "cpu"
    result: dict[str, Any] = {"machine": machine(), "batch": asdict(args.batch), "runs": [], "ratios": {}}
    with tempfile.TemporaryDirectory(prefix="agentfly-gpu-models-") as scratch:  # a 1.7B model is 3.4 GB
        models = Path(scratch)
        for shape, trainer_name, checkpointing in DRY_RUNS if args.dry_run else GPU_RUNS:
            name = f"{shape}/{trainer_name}/{'ckpt' if checkpointing else 'no-ckpt'}"
            left = deadline - time.monotonic()
            if left < args.min_run_s:
                result["runs"].append({"run": name, "skipped": f"{left:.0f} s of the budget left"})
                continue
            model_dir = models / shape
            if not model_dir.exists():
                build_model(shape, args.tokenizer, model_dir, device)
                if device == "cuda":  # the parent's cached blocks would stay out of the children's reach
                    torch.cuda.empty_cache()
            started = time.monotonic()
            arguments = [shape, trainer_name, str(checkpointing), str(model_dir)]
            record = _child_run(arguments, args.batch, min(deadline - started, args.run_timeout))
            record.update(run=name, wall_s=time.monotonic() - started)
            result["runs"].append(record)
            result["ratios"] = ratios(result["runs"])
            args.out.write_text(json.dumps(result, indent=2))
            print(_summary(record), flush=True)
    args.out.write_text(json.dumps(result, indent=2))
    return result


def _child_run(arguments: list[str], batch: Batch, timeout: float) -> dict[str, Any]:
    """One run (``--one ARGUMENTS``) in a child process: its figures, or ``{"error": ...}`` (its last line of
    output, or the timeout that stopped it)."""
    command = [sys.executable, __file__, "--one", *arguments, "--batch", *map(str, asdict(batch).values())]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"stopped after {timeout:.0f} s"}
    lines = done.stdout.strip().splitlines()
    return json.loads(lines[-1]) if done.returncode == 0 and lines else {"error": _last_line(done.stderr)}


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def _summary(record: dict[str, Any]) -> str:
    if "step_s" not in record:
        return f"{record['run']}: {record.get('error') or record.get('skipped')}"
    mfu = f", MFU {record['mfu_update']:.1%}" if record["mfu_update"] is not None else ""
    memory = f", peak {record['peak_memory_gib']:.1f} GiB" if record["peak_memory_gib"] is not None else ""
    return (f"{record['run']}: step {record['step_s']:.2f} s (rollout {record['rollout_s']:.2f}, log-probs "
            f"{record['logprob_s']:.2f}, update {record['update_s']:.2f}); {record['sampled_tokens_per_s']:.0f} "
            f"sampled tok/s, {record['trained_tokens_per_s']:.0f} trained tok/s{memory}{mfu}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("gpu_trainer_speed.json"), help="the JSON written")
    parser.add_argument("--dry-run", action="store_true", help="CPU: the tiny shape, small batch, 2 steps")
    parser.add_argument("--budget", type=float, default=400, help="seconds for all runs (later runs are skipped)")
    parser.add_argument("--run-timeout", type=float, default=120, help="seconds one run may take at most")
    parser.add_argument("--min-run-s", type=float, default=45, help="start no run with less of the budget left")
    parser.add_argument("--tokenizer", type=Path, default=ROOT / ".gpu" / "tokenizer", help="a tokenizer directory")
    parser.add_argument("--one", nargs=4, metavar=("SHAPE", "TRAINER", "CKPT", "MODEL_DIR"), help=argparse.SUPPRESS)
    parser.add_argument(
        "--batch",
        nargs=4,
        type=int,
        metavar=("PROMPTS", "CHAINS", "TOKENS", "STEPS"),
        help="tasks per step, episodes per task, tokens per turn, steps (8 4 256 3; dry 2 2 16 2)",
    )
    args = parser.parse_args()
    args.batch = Batch(*(args.batch or ((2, 2, 16, 2) if args.dry_run else (8, 4, 256, 3))))
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    if args.one:
        shape, trainer_name, checkpointing, model_dir = args.one
        print(json.dumps(one_run(shape, trainer_name, checkpointing == "True", Path(model_dir), args.batch)))
        return
    if args.dry_run and not args.tokenizer.exists():
        from agentfly_train.tiny_model import build_tokenizer

        args.tokenizer = Path(tempfile.mkdtemp(prefix="agentfly-tiny-tokenizer-"))
        build_tokenizer().save_pretrained(args.tokenizer)
    run_all(args)


if __name__ == "__main__":
    main()
