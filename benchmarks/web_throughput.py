"""Web env throughput: an ``agentfly/MiniWoB-ClickButton`` step against the bare ``miniwob`` env's, in text and
screenshot mode, and Chromium's memory per env.

Each timed step clicks an element that does not end the episode (the task area), so every step costs the same;
the episode is reset (untimed) every ``--steps-per-episode`` steps. The baseline, measured in the same run, is
``miniwob``'s own Gymnasium env (``miniwob/click-button-v1``) taking the same click: with its screenshot off for the
text comparison (our text mode reads the DOM only) and on for the screenshot one. Memory: the resident and the
proportional set size (PSS counts shared pages once per sharer) of one env's chromedriver and Chromium processes.

    python benchmarks/web_throughput.py --steps 200 --json benchmarks/results/web_throughput.json

Needs ``pip install 'agentfly-rl[web]'`` and Chromium with chromedriver on PATH.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import time
from pathlib import Path

import gymnasium as gym
import miniwob

import agentfly_envs  # noqa: F401  (registers the envs)
from agentfly_envs.worlds.miniwob import require_miniwob

ROW = {"world": "miniwob", "game": "click-button", "split": "train", "time_limit_s": 3600.0}
AREA_REF = 3
"""MiniWoB's task area (``div#area``): clicking it changes nothing, so the episode goes on."""


def timed_steps(step, reset, steps: int, per_episode: int) -> float:
    """Median seconds of one ``step()`` over ``steps`` steps, resetting (untimed) every ``per_episode``."""
    times = []
    for index in range(steps):
        if index % per_episode == 0:
            reset(index // per_episode)
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bare_step_s(screenshots: bool, steps: int, per_episode: int) -> float:
    gym.register_envs(miniwob)
    env = gym.make("miniwob/click-button-v1")
    bare = env.unwrapped
    bare.reset(seed=0)
    bare.set_record_screenshots(screenshots)
    action = bare.create_action("CLICK_ELEMENT", ref=AREA_REF)
    seconds = timed_steps(lambda: bare.step(action), lambda i: bare.reset(seed=i), steps, per_episode)
    env.close()
    return seconds


def agentfly_step_s(obs: str, steps: int, per_episode: int) -> tuple[float, dict[str, float]]:
    env = gym.make("agentfly/MiniWoB-ClickButton", obs=obs, max_turns=10**6)
    action = f'<tool_call>{{"name": "click", "arguments": {{"element": {AREA_REF}}}}}</tool_call>'
    if obs == "screenshot":
        action = '<tool_call>{"name": "click", "arguments": {"x": 150, "y": 205}}</tool_call>'
    env.reset(options={"task": {**ROW, "seed": 0}})
    memory = chromium_memory_mib(env.unwrapped.tools["click"].session.browser.pids[0])
    seconds = timed_steps(
        lambda: env.step(action), lambda i: env.reset(options={"task": {**ROW, "seed": i}}), steps, per_episode
    )
    env.close()
    return seconds, memory


def chromium_memory_mib(driver_pid: int) -> dict[str, float]:
    """RSS and PSS (MiB) of a chromedriver and every process under it, summed."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            children.setdefault(int(stat.read_text().rsplit(")", 1)[1].split()[1]), []).append(int(stat.parent.name))
        except OSError:
            continue
    pids, todo = [], [driver_pid]
    while todo:
        pids.append(todo.pop())
        todo.extend(children.get(pids[-1], []))
    totals = {"rss_mib": 0.0, "pss_mib": 0.0, "processes": float(len(pids))}
    for pid in pids:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            name, *value = line.split()
            if name in ("Rss:", "Pss:"):
                totals[f"{name[:-1].lower()}_mib"] += int(value[0]) / 1024
    return totals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200, help="timed steps per configuration")
    parser.add_argument("--steps-per-episode", type=int, default=20, help="steps between (untimed) resets")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()
    require_miniwob()
    os.environ.setdefault("MINIWOB_CHROME_BINARY", shutil.which("chromium") or "")  # the bare env's browser, found
    os.environ.setdefault("MINIWOB_CHROMEDRIVER", shutil.which("chromedriver") or "")  # here as our env finds it
    figures = {}
    for mode, screenshots in (("text", False), ("screenshot", True)):
        bare = bare_step_s(screenshots, args.steps, args.steps_per_episode)
        ours, memory = agentfly_step_s(mode, args.steps, args.steps_per_episode)
        figures[mode] = {"bare_step_ms": bare * 1e3, "env_step_ms": ours * 1e3, "ratio": ours / bare, **memory}
    figures["screenshot_over_text"] = figures["screenshot"]["env_step_ms"] / figures["text"]["env_step_ms"]
    print(f"{'mode':<11} {'bare miniwob step':>18} {'agentfly step':>14} {'ratio':>6} {'steps/s':>8}")
    for mode in ("text", "screenshot"):
        row = figures[mode]
        print(
            f"{mode:<11} {row['bare_step_ms']:>15.1f} ms {row['env_step_ms']:>11.1f} ms {row['ratio']:>5.2f}x "
            f"{1e3 / row['env_step_ms']:>8.1f}"
        )
    print(f"screenshot mode costs {figures['screenshot_over_text']:.2f}x a text-mode step")
    memory = figures["text"]
    print(
        f"Chromium per env: {memory['processes']:.0f} processes, RSS {memory['rss_mib']:.0f} MiB, "
        f"PSS {memory['pss_mib']:.0f} MiB"
    )
    if args.json:
        args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)}, **figures}, indent=2) + "\n")


if __name__ == "__main__":
    main()
