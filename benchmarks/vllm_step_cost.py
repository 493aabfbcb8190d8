"""vLLM engine step cost against batch size: how long one step of our vLLM backend takes for N running sequences.

Submits N requests (a 40-token prompt, ``--new-tokens`` sampled tokens each) to the in-process engine on the tiny
model and steps it until they finish; prints milliseconds per engine step and sampled tokens/s for each N. The
first size of the first repeat includes the engine's warm-up; the last repeat is the one to read.

    python benchmarks/vllm_step_cost.py --sizes 4 16 64 256 --repeats 2
"""

from __future__ import annotations

import argparse
import tempfile
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[4, 16, 64, 256], help="running sequences")
    parser.add_argument("--new-tokens", type=int, default=32, help="tokens sampled per request")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()

    from agentfly_train.generation import SamplingParams
    from agentfly_train.generation.vllm import VLLMGenerationBackend
    from agentfly_train.tiny_model import build_model, build_tokenizer

    tokenizer = build_tokenizer()
    model = build_model(tokenizer, hidden_size=128)
    with tempfile.TemporaryDirectory() as directory:
        model.save_pretrained(directory)
        tokenizer.save_pretrained(directory)
        engine = VLLMGenerationBackend.start(
            directory, [tokenizer.eos_token_id], kv_cache_memory_bytes=1 << 30, max_model_len=1024
        )
        print(f"{'repeat':>6} {'sequences':>9} {'steps':>6} {'ms/step':>8} {'tokens/s':>9}")
        for repeat in range(args.repeats):
            for size in args.sizes:
                for i in range(size):
                    engine.submit(f"{repeat}-{size}-{i}", list(range(5, 45)), args.new_tokens, SamplingParams(1.0))
                steps, start = 0, time.perf_counter()
                while engine.has_unfinished():
                    engine.step()
                    steps += 1
                seconds = time.perf_counter() - start
                print(
                    f"{repeat:>6} {size:>9} {steps:>6} {seconds / steps * 1e3:8.1f} "
                    f"{size * args.new_tokens / seconds:9.0f}"
                )


if __name__ == "__main__":
    main()
