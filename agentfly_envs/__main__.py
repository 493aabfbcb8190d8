"""``python -m agentfly_envs``: plays episodes of an env and prints what the agent would see.

It replays golden demonstrations (the calculator steps of the reference solution, then the
answer), shows one transcript, and one episode of a sloppy agent whose mistakes come back as
error observations. Runs offline on ``agentfly/Arith-Calc`` by default.

    python -m agentfly_envs --env-id agentfly/GSM8K-Calc --data-files ../shared/data/gsm8k/test.jsonl

``python -m agentfly_envs serve ENV_ID --port N`` serves an env over HTTP in OpenEnv's protocol
(:mod:`agentfly_envs.remote.server`; the ``openenv`` extra); ``serve ENV_ID --mcp`` serves its tools as an MCP server
(:mod:`agentfly_envs.remote.mcp_server`; the ``mcp`` extra).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence

import gymnasium as gym

import agentfly_envs  # noqa: F401  (registers the envs)
from agentfly_envs.errors import AgentflyError
from agentfly_envs.remote.capacity import DEFAULT_MAX_SESSIONS, FILES_BESIDE_SESSIONS, raise_open_files_limit

SLOPPY_TURNS = (
    '<tool_call>{"name": "calculator", "arguments": {"expression": "2 ^ 3",}}</tool_call>',  # trailing comma
    '<tool_call>{"name": "calculater", "arguments": {"expression": "2 ** 3"}}</tool_call>',  # unknown tool
    '<tool_call>{"name": "calculator", "arguments": {"expression": "9**9**9**9"}}</tool_call>',  # resource bomb
    "I am not sure, maybe 7.",  # a final answer
)


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["serve"]:
        return serve(argv[1:])
    parser = argparse.ArgumentParser(
        prog="python -m agentfly_envs",
        usage="%(prog)s [-h] [--env-id ID] [--episodes N] [--data-files FILE] [--parser NAME] [--seed N]\n"
        "       %(prog)s serve ENV_ID [--host HOST] [--port N] [...]",
        description="Plays episodes of an env and prints what the agent would see: golden demonstrations replayed, "
        "one transcript, and a sloppy agent whose mistakes come back as error observations (default: "
        "agentfly/Arith-Calc, offline). `serve ENV_ID` serves an env over HTTP in OpenEnv's protocol instead.",
        epilog="`%(prog)s serve ENV_ID --port N` serves ENV_ID to clients of OpenEnv's protocol (the openenv extra), "
        "`%(prog)s serve ENV_ID --mcp` its tools to MCP clients (the mcp extra); `%(prog)s serve --help` lists its "
        "options.",
    )
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


def open_sessions(asked: int | None) -> int:
    """The sessions a server may hold: ``asked`` (``None``: :data:`DEFAULT_MAX_SESSIONS`, or as many as the
    open-files limit allows), after raising this process's open-files limit to fit them.

    Raises:
        ValueError: ``asked`` sessions do not fit under the hard limit on open files.
    """
    fit = raise_open_files_limit(asked or DEFAULT_MAX_SESSIONS)
    if asked is None:
        return max(min(DEFAULT_MAX_SESSIONS, fit), 1)
    if asked > fit:
        raise ValueError(
            f"--max-sessions {asked} needs {asked + FILES_BESIDE_SESSIONS} open files (a socket per session) and this "
            f"process may open {fit + FILES_BESIDE_SESSIONS} (ulimit -Hn): pass --max-sessions {fit} or less, or "
            "raise the hard limit"
        )
    return asked


def serve(argv: Sequence[str]) -> int:
    """``python -m agentfly_envs serve ENV_ID --port N`` (:mod:`agentfly_envs.remote.server`), or with ``--mcp`` its
    tools as an MCP server (:mod:`agentfly_envs.remote.mcp_server`); returns the exit status (2: the env cannot be
    built or has no tool to serve, or the ``openenv`` or ``mcp`` extra is missing)."""
    parser = argparse.ArgumentParser(
        prog="python -m agentfly_envs serve",
        description="Serve an agentfly env over HTTP in OpenEnv's protocol, or its tools to MCP clients (--mcp).",
    )
    parser.add_argument("env_id", help="registered env id, e.g. agentfly/GSM8K-Calc")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument(
        "--max-sessions",
        type=int,
        help=f"sessions (envs) open at once; one more is refused (default {DEFAULT_MAX_SESSIONS}, or fewer where "
        "the open-files limit, ulimit -Hn, holds fewer)",
    )
    parser.add_argument("--session-timeout", type=float, default=600.0, help="seconds before an idle session closes")
    parser.add_argument("--env-kwargs", default="{}", help='gymnasium.make kwargs as JSON, e.g. \'{"level": "easy"}\'')
    parser.add_argument(
        "--mcp",
        nargs="?",
        const="stdio",
        choices=("stdio", "http"),
        help="serve the env's tools as an MCP server instead: over stdin/stdout (--mcp), or streamable HTTP at "
        "http://HOST:PORT/mcp (--mcp http); the mcp extra",
    )
    args = parser.parse_args(argv)
    try:
        kwargs = json.loads(args.env_kwargs)
        if not isinstance(kwargs, dict):
            raise ValueError(f"--env-kwargs: a JSON object, not {type(kwargs).__name__}")
        if (args.max_sessions is not None and args.max_sessions < 1) or args.session_timeout <= 0:
            raise ValueError("--max-sessions must be >= 1 and --session-timeout > 0")
        if args.mcp is not None:
            from agentfly_envs.remote.mcp_server import serve_mcp

            serve_mcp(args.env_id, kwargs, args.mcp, args.host, args.port)
            return 0
        max_sessions = open_sessions(args.max_sessions)
        gym.make(args.env_id, disable_env_checker=True, **kwargs).close()  # before the server's slow imports
        from agentfly_envs.remote.server import MAX_MESSAGE_BYTES, create_app
    except (AgentflyError, gym.error.Error, ImportError, TypeError, ValueError) as error:
        print(f"error: cannot serve {args.env_id}: {' '.join(str(error).split())}", file=sys.stderr)
        return 2
    import uvicorn

    app = create_app(args.env_id, kwargs, max_sessions, args.session_timeout)
    where = f"http://{args.host}:{args.port}"
    print(f"serving {args.env_id} on {where} (OpenEnv protocol; WebSocket at /ws; {max_sessions} sessions)", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, ws_max_size=MAX_MESSAGE_BYTES, log_level="warning")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
