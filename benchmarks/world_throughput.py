"""World throughput: replays gold paths through the TextWorldExpress envs (``agentfly/TWX-<Game>``), ScienceWorld
(``agentfly/ScienceWorld``) and the TextArena puzzles (``agentfly/TextArena-<Game>``).

Prints, for each game: env steps/s and episodes/s in one env and with ``make_vec`` sync and async over several
workers, the fraction of golden episodes that win, the time to start the world and load the first game (for
TWX and ScienceWorld, the JVM's start), and the time to load a game (``reset``) once the world runs. The
baseline, measured in the same run, is the bare world: the same commands sent to the world class (e.g.
:class:`~agentfly_envs.worlds.textworld_express.TextWorldExpress`) with no env around it.

    python benchmarks/world_throughput.py --episodes 200 --workers 2
    python benchmarks/world_throughput.py --games --puzzles Sokoban Mastermind
    python benchmarks/world_throughput.py --games --scienceworld boil find-animal --episodes 20

Needs ``pip install 'agentfly-rl[worlds]'`` and Java for TWX, ``[scienceworld]`` and Java for ScienceWorld,
``pip install 'agentfly-rl[puzzles]'`` for TextArena.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Sequence

import gymnasium as gym
from env_throughput import ReplayStats, median_run, replay_single, replay_vector

import agentfly_envs  # noqa: F401  (registers the envs)
from agentfly_envs.worlds import get_world

GAMES = ("Coin", "Cooking", "Commonsense")
"""The TWX games timed by default (``--games`` takes any ``agentfly/TWX-<Game>`` names, ``--puzzles`` any
``agentfly/TextArena-<Game>`` names)."""


def gold_plans(env_id: str, episodes: int, **kwargs) -> tuple[list[list], list[list[str]], list[dict]]:
    """The golden actions, gold commands and rows of the first ``episodes`` tasks (``kwargs`` go to ``gym.make``)."""
    env = gym.make(env_id, num_tasks=episodes, **kwargs)
    plans, commands, rows = [], [], []
    for index in range(episodes):
        _, info = env.reset(options={"index": index})
        plans.append(env.unwrapped.golden_actions())
        commands.append(env.unwrapped.tools["act"].gold_commands())
        rows.append(info["task"])
    env.close()
    return plans, commands, rows


def reset_seconds(env_id: str, episodes: int, **kwargs) -> float:
    """The median time of one ``reset`` (loading a game) in an env whose world already runs, in seconds."""
    env = gym.make(env_id, num_tasks=episodes, **kwargs)
    env.reset(options={"index": 0})
    times = []
    for index in range(episodes):
        start = time.perf_counter()
        env.reset(options={"index": index})
        times.append(time.perf_counter() - start)
    env.close()
    return statistics.median(times)


def bare_world(rows: Sequence[dict], commands: Sequence[Sequence[str]]) -> tuple[ReplayStats, float]:
    """Plays the gold commands on the world alone (start + step), the same-run baseline; also returns the
    seconds its first start took (launching the world (a JVM for TWX), loading the game, generating the first one)."""
    world, stats = get_world(rows[0]["world"])(), ReplayStats()
    start = time.perf_counter()
    world.start(rows[0])
    first_start = time.perf_counter() - start
    start = time.perf_counter()
    for row, path in zip(rows, commands, strict=True):
        world.start(row)
        for command in path:
            state = world.step(command)
            stats.steps += 1
        stats.episodes += 1
        stats.solved += state.success
    stats.seconds = time.perf_counter() - start
    world.close()
    return stats, first_start


def main(argv: Sequence[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--games", nargs="*", default=list(GAMES), help="TWX game names, e.g. Coin Cooking")
    parser.add_argument("--puzzles", nargs="*", default=[], help="TextArena game names, e.g. Sokoban Mastermind")
    parser.add_argument("--scienceworld", nargs="*", default=[], help="ScienceWorld task names, e.g. boil melt")
    parser.add_argument("--episodes", type=int, default=200, help="golden episodes per game (train seeds)")
    parser.add_argument("--workers", type=int, default=2, help="sub-envs of the vector envs")
    parser.add_argument("--vector-steps", type=int, default=1000, help="batched steps of each vector env")
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats per figure; the median is reported")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)

    results = {}
    names = {game: (f"agentfly/TWX-{game}", {}) for game in args.games}
    names |= {f"TextArena-{game}": (f"agentfly/TextArena-{game}", {}) for game in args.puzzles}
    if args.scienceworld:  # one env over the tasks: its rows go round them
        names["ScienceWorld"] = ("agentfly/ScienceWorld", {"game": args.scienceworld})
    for game, (env_id, make_kwargs) in names.items():
        kwargs = {"num_tasks": args.episodes, **make_kwargs}
        plans, commands, rows = gold_plans(env_id, args.episodes, **make_kwargs)
        bare = [bare_world(rows, commands) for _ in range(args.repeats)]
        result = {
            "env_id": env_id,
            "episodes": args.episodes,
            "mean_gold_path": statistics.fmean(len(path) for path in commands),
            "first_game_s": statistics.median(first_start for _, first_start in bare),
            "reset_s": reset_seconds(env_id, min(args.episodes, 50), **make_kwargs),
            "bare_world": median_run([stats for stats, _ in bare]).row(),
            "single": median_run([replay_single(env_id, plans, **kwargs) for _ in range(args.repeats)]).row(),
        }
        for mode in ("sync", "async"):
            runs = [
                replay_vector(env_id, plans, args.workers, args.vector_steps, mode=mode, **kwargs)
                for _ in range(args.repeats)
            ]
            result[f"{mode}_x{args.workers}"] = median_run(runs).row()
        results[game] = result

    for result in results.values():
        bare = result["bare_world"]["env_steps_per_s"]
        first = "first game" if "/TextArena-" in result["env_id"] else "JVM start + first game"
        print(
            f"\n{result['env_id']}: {result['episodes']} golden episodes (gold path {result['mean_gold_path']:.1f} "
            f"commands), {first} {result['first_game_s']:.2f} s, reset {result['reset_s'] * 1e3:.2f} ms"
        )
        print(f"  bare world: {bare:8.0f} steps/s")
        for mode in ("single", f"sync_x{args.workers}", f"async_x{args.workers}"):
            row = result[mode]
            print(
                f"  {mode:>10}: {row['env_steps_per_s']:8.0f} env steps/s ({row['env_steps_per_s'] / bare:4.2f}x bare "
                f"world) {row['episodes_per_s']:7.1f} episodes/s  golden solved {row['golden_solved']:.4f}"
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2, default=float)
    return results


if __name__ == "__main__":
    main()
