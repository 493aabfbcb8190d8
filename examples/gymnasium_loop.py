"""A plain Gymnasium loop over an agentfly env: the interface any RL library sees.

The policy maps the chat so far to the assistant's next turn. Two are built in:

- ``golden``: replays the reference solution (no model; shows the env contract and rewards).
- ``hf``: a transformers causal LM that renders the chat with its chat template and the env's tool
  schemas, samples a turn and decodes it (``--model tiny`` builds a small random model locally;
  any Hub id or local path of a tool-calling chat model works, e.g. ``Qwen/Qwen2.5-0.5B-Instruct``).

    python examples/gymnasium_loop.py --policy golden --episodes 20
    python examples/gymnasium_loop.py --policy hf --model Qwen/Qwen2.5-0.5B-Instruct --env-id agentfly/GSM8K-Calc
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym

import agentfly_envs  # noqa: F401  (registers the envs)

Policy = Callable[[list[dict[str, Any]], list[dict[str, Any]]], str]


def golden_policy(env: gym.Env) -> Policy:
    """Replays the env's golden demonstration of the current task, one turn per call."""
    plan: list[str] = []

    def act(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
        if len(messages) == 2:  # a new episode: system + user
            plan[:] = env.unwrapped.golden_actions()
        return plan.pop(0)

    return act


def hf_policy(model_name: str, max_new_tokens: int, seed: int) -> Policy:
    """Samples assistant turns from a transformers causal LM with the chat template and tool schemas."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(seed)
    if model_name == "tiny":
        from agentfly_train.tiny_model import build_model, build_tokenizer

        tokenizer = build_tokenizer()
        model = build_model(tokenizer)
    else:
        tokenizer = AutoTokenizer.from_pretrained(model_name)
        model = AutoModelForCausalLM.from_pretrained(model_name)
    model.eval()

    def act(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
        inputs = tokenizer.apply_chat_template(
            messages, tools=tools, add_generation_prompt=True, return_tensors="pt", return_dict=True
        )
        with torch.no_grad():
            output = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=True, temperature=0.7)
        return tokenizer.decode(output[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)

    return act


def run(env: gym.Env, policy: Policy, episodes: int, seed: int) -> list[float]:
    """Plays ``episodes`` episodes; returns their returns."""
    returns = []
    for episode in range(episodes):
        _, info = env.reset(seed=seed + episode)
        messages, tools = info["messages"], info["tools"]
        total, done = 0.0, False
        while not done:
            action = policy(messages, tools)
            _, reward, terminated, truncated, info = env.step(action)
            messages += [{"role": "assistant", "content": action}, *info["messages"]]
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
        print(f"episode {episode}: return {total:.1f}, {info['turn']} turns, errors {info['error_counts']}")
    return returns


def main(argv: Sequence[str] | None = None) -> list[float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env-id", default="agentfly/Arith-Calc")
    parser.add_argument("--data-files", help="GSM8K-format file for agentfly/GSM8K-Calc")
    parser.add_argument("--policy", choices=["golden", "hf"], default="golden")
    parser.add_argument("--model", default="tiny", help="'tiny' or a Hub id / local path (policy hf)")
    parser.add_argument("--episodes", type=int, default=5)
    parser.add_argument("--max-turns", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    kwargs = {"max_turns": args.max_turns, **({"data_files": args.data_files} if args.data_files else {})}
    env = gym.make(args.env_id, **kwargs)
    policy = golden_policy(env) if args.policy == "golden" else hf_policy(args.model, args.max_new_tokens, args.seed)
    returns = run(env, policy, args.episodes, args.seed)
    print(f"mean return over {len(returns)} episodes: {sum(returns) / len(returns):.3f}")
    env.close()
    return returns


if __name__ == "__main__":
    main()
