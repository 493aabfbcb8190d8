"""Context policies on long episodes: the tokens the model is fed per turn and the peak memory of the process that
runs the episodes and trains on them, each policy against ``full`` at the same length, measured in the same run.

The episodes: ``agentfly/Arith-Calc`` played for exactly ``--turns`` turns by a scripted policy that calls the
calculator every turn with ``--expression`` (``7**150``: a 127-digit answer, standing for a tool's long output), so
every episode is as long as asked and every policy sees the same turns. Tokens per turn are
counted on the requests the policy is given (the context each turn is sampled after; ``summarize``'s summary requests,
answered with a fixed summary of about 20 tokens, are counted apart). The model's work is then one training pass
with the tiny model (``agentfly:tiny``, saved once here): a forward and backward pass over every training row
(``full``: one row per episode, its prompt and whole completion; the others: a row per turn, the context it was
sampled in and its sampled tokens). Each policy and length runs in a fresh process, whose peak resident set
(``os.wait4``) is the figure: interpreter, torch and model included, so the ratios understate what the policies save
in the model's activations alone.

    python benchmarks/context_policies.py --turns 10 30 100 --json benchmarks/results/context_policies.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # this checkout's packages, whatever copy is installed
POLICIES = ("full", "window", "mask_observations", "summarize")
SUMMARY = "The agent called the calculator on the two numbers several times and got the same product each time."
"""What the scripted policy answers to a summary request."""


def measure(policy: str, turns: int, args: argparse.Namespace) -> dict[str, float]:
    """Runs ``args.episodes`` episodes of ``turns`` turns under ``policy`` and one training pass over their rows (in
    this process); the tokens fed per turn, the rows trained and the times."""
    from concurrent.futures import ThreadPoolExecutor

    import gymnasium as gym
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import agentfly_envs  # noqa: F401  (registers the envs)
    from agentfly_train.config import ContextConfig
    from agentfly_train.context_policies import context_policy
    from agentfly_train.generation import Generation, SamplingParams
    from agentfly_train.rollout import ChatCodec, RolloutBudgets, run_rollouts, training_rows

    torch.manual_seed(0)
    episodes = args.episodes
    tokenizer = AutoTokenizer.from_pretrained(args.checkpoint)
    model = AutoModelForCausalLM.from_pretrained(args.checkpoint)
    envs = [gym.make("agentfly/Arith-Calc", level="single", max_turns=turns + 1) for _ in range(episodes)]
    _, info = envs[0].reset(options={"index": 0})
    codec = ChatCodec(tokenizer, info["tools"])
    golden = envs[0].unwrapped.golden_actions()[0]
    call = codec.turn_ids(re.sub(r'"expression": "[^"]*"', f'"expression": "{args.expression}"', golden))
    summary = [*codec.encode(SUMMARY), codec.eos_token_id]
    fed: dict[str, list[int]] = {"turn": [], "summary": []}

    class ScriptedCalls:
        """The calculator call every turn and :data:`SUMMARY` to every summary request; counts their prompts."""

        def generate(self, prompts, max_new_tokens, params):
            out = []
            for prompt in prompts:
                kind = "summary" if "You are summarising" in tokenizer.decode(prompt) else "turn"
                tokens = summary if kind == "summary" else call
                fed[kind].append(len(prompt))
                out.append(Generation(list(tokens), [0.0] * len(tokens), True))
            return out

    config = ContextConfig(policy=policy, window=args.window, summary_tokens=len(summary))
    budgets = RolloutBudgets(turns, max_tokens_per_turn=len(call), response_length=1 << 30,
                             context=context_policy(config), step_wise=config.rewrites_context)  # fmt: skip
    tasks = [envs[0].unwrapped.tasks.row(i) for i in range(episodes)]
    start = time.perf_counter()
    with ThreadPoolExecutor(episodes) as executor:
        trajectories = run_rollouts(envs, tasks, ScriptedCalls(), codec, budgets, SamplingParams(), executor)
    rollout_s = time.perf_counter() - start
    assert all(t.num_turns == turns for t in trajectories), [t.finish_reason for t in trajectories]
    rows = training_rows(trajectories, turns if budgets.step_wise else None)
    start = time.perf_counter()
    for prompt, completion, mask in zip(rows["prompt_ids"], rows["completion_ids"], rows["env_mask"], strict=True):
        logits = model(torch.tensor([[*prompt, *completion]])).logits[0, len(prompt) - 1 : -1]
        logprobs = logits.log_softmax(-1).gather(1, torch.tensor(completion)[:, None])[:, 0]
        (-(logprobs * torch.tensor(mask)).sum()).backward()
    train_s = time.perf_counter() - start
    for env in envs:
        env.close()
    return {
        "observation_tokens": len(trajectories[0].completion_ids) / turns - len(call),
        "tokens_per_turn": sum(fed["turn"]) / len(fed["turn"]),
        "last_turn_tokens": max(fed["turn"]),
        "summary_prompt_tokens_per_turn": sum(fed["summary"]) / len(fed["turn"]),
        "summaries": len(fed["summary"]),
        "rows": len(rows["prompt_ids"]),
        "trained_tokens": sum(len(p) + len(c) for p, c in zip(rows["prompt_ids"], rows["completion_ids"], strict=True)),
        "rollout_s": rollout_s,
        "train_s": train_s,
    }


def run_child(policy: str, turns: int, args: argparse.Namespace, checkpoint: str) -> dict[str, float]:
    """:func:`measure` in a fresh process: its figures and its peak resident set, MiB.

    Raises:
        SystemExit: the process failed (its last lines).
    """
    command = [sys.executable, __file__, "--child", policy, str(turns), "--episodes", str(args.episodes),
               "--window", str(args.window), "--expression", args.expression, "--checkpoint", checkpoint]  # fmt: skip
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        process = subprocess.Popen(command, cwd=REPO, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(process.pid, 0)
        out.seek(0), err.seek(0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"{policy} at {turns} turns failed: {err.read()[-2000:]}")
        return {**json.loads(out.read().splitlines()[-1]), "peak_rss_mib": usage.ru_maxrss / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, nargs="+", default=[10, 30, 100], help="episode lengths")
    parser.add_argument("--episodes", type=int, default=2, help="episodes per policy and length")
    parser.add_argument("--window", type=int, default=4, help="agent.context.window")
    parser.add_argument("--expression", default="7**150", help="what the scripted policy asks the calculator")
    parser.add_argument("--policies", nargs="+", choices=POLICIES, default=list(POLICIES), help="full is the baseline")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--child", nargs=2, metavar=("POLICY", "TURNS"), help=argparse.SUPPRESS)
    parser.add_argument("--checkpoint", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if "full" not in args.policies:
        parser.error("--policies needs full, the baseline of the ratios")
    if args.child:
        policy, turns = args.child
        print(json.dumps(measure(policy, int(turns), args)))
        return
    from agentfly_train.tiny_model import build_tiny_checkpoint

    results: dict[str, dict[str, dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as directory:
        checkpoint = str(build_tiny_checkpoint(directory))
        for turns in args.turns:
            figures = {policy: run_child(policy, turns, args, checkpoint) for policy in args.policies}
            for row in figures.values():
                row["tokens_ratio"] = row["tokens_per_turn"] / figures["full"]["tokens_per_turn"]
                row["rss_ratio"] = row["peak_rss_mib"] / figures["full"]["peak_rss_mib"]
            results[str(turns)] = figures
    observation = results[str(args.turns[0])]["full"]["observation_tokens"]
    print(f"{args.episodes} episodes per run, window {args.window}, {observation:.0f} tokens per observation; ratios "
          "against full at the same length")  # fmt: skip
    print(f"{'turns':>5} {'policy':<18} {'tokens/turn':>11} {'x full':>7} {'last turn':>9} {'summary':>8} "
          f"{'trained':>9} {'peak MiB':>9} {'x full':>7}")  # fmt: skip
    for turns, figures in results.items():
        for policy, row in figures.items():
            print(f"{turns:>5} {policy:<18} {row['tokens_per_turn']:>11.0f} {row['tokens_ratio']:>7.2f} "
                  f"{row['last_turn_tokens']:>9.0f} {row['summary_prompt_tokens_per_turn']:>8.0f} "
                  f"{row['trained_tokens']:>9.0f} {row['peak_rss_mib']:>9.0f} {row['rss_ratio']:>7.2f}")  # fmt: skip
    if args.json:
        meta = {"episodes": args.episodes, "window": args.window, "turns": args.turns, "expression": args.expression}
        args.json.write_text(json.dumps({"settings": meta, "results": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
