"""``python -m agentfly_envs``: plays episodes of an env and prints what the agent would see.

It replays golden demonstrations (the calculator steps of the reference solution, then the
answer), shows one transcript, and one episode of a sloppy agent whose mistakes come back as
error observations. Runs offline on ``agentfly/Arith-Calc`` by default.

    python -m agentfly_envs --env-id agentfly/GSM8K-Calc --data-files ../shared/data/gsm8k/test.jsonl
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

import gymnasium as gym

import agentfly_envs  # noqa: F401  (registers the envs)

SLOPPY_TURNS = (
    '<tool_call>{"name": "calculator", "arguments": {"expression": "2 ^ 3",}}</tool_call>',  # trailing comma
    '<tool_call>{"name": "calculater", "arguments": {"expression": "2 ** 3"}}</tool_call>',  # unknown tool
    '<tool_call>{"name": "calculator", "arguments": {"expression": "9**9**9**9"}}</tool_call>',  # resource bomb
    "I am not sure, maybe 7.",  # a final answer
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agentfly_envs", description=__doc__.split("\n\n")[0])
    parser.add_argument("--env-id", default="agentfly/Arith-Calc", help="registered env id")
    parser.add_argument("--episodes", type=int, default=200, help="golden episodes to replay")
    parser.add_argument("--data-files", help="GSM8K-format file for agentfly/GSM8K-Calc")
    parser.add_argument("--parser", help="override the env's parser (hermes, react, code, tool_calls)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    kwargs = {key: value for key, value in {"data_files": args.data_files, "parser": args.parser}.items() if value}
    env = gym.make(args.env_id, render_mode="ansi", **kwargs)
    tool_env = env.unwrapped
    print(f"{args.env_id}: {len(tool_env.tasks)} tasks, tools {list(tool_env.tools)}, parser {tool_env.parser.name}")

    env.reset(seed=args.seed)
    for action in tool_env.golden_actions():
        *_, terminated, truncated, _ = env.step(action)
    print("\n--- a golden episode ---\n" + env.render())

    env.reset(seed=args.seed)
    for action in SLOPPY_TURNS:
        _, reward, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            break
    print("\n--- a sloppy agent ---\n" + env.render())
    print(f"reward {reward}, error counts {info['error_counts']}")

    num_episodes, steps, solved = min(args.episodes, len(tool_env.tasks)), 0, 0
    start = time.perf_counter()
    for index in range(num_episodes):
        env.reset(options={"index": index})
        for action in tool_env.golden_actions():
            _, reward, terminated, truncated, _ = env.step(action)
            steps += 1
        solved += reward == 1.0
    seconds = time.perf_counter() - start
    print(
        f"\n{num_episodes} golden episodes: {solved / num_episodes:.1%} solved, "
        f"{steps / seconds:.0f} env steps/s, {num_episodes / seconds:.0f} episodes/s"
    )
    env.close()
    return 0 if solved == num_episodes else 1


if __name__ == "__main__":
    raise SystemExit(main())
