"""A vision-language training step against a text-only one, and the trainer-side memory of a rollout's screenshots.

Step time: the same short GRPO job through the CLI twice, on the tiny VLM (``agentfly:tiny-vl``) and MiniWoB's
click-button with GUI actions, once seeing the page as screenshots (``obs=screenshot``: 48 image tokens per screen,
the vision tower in every forward) and once as the text listing of its elements (``obs=text``: the same model, no
image). Prints the mean seconds of a step and of its parts from each run's ``metrics.jsonl`` (the first step, a
warm-up, left out) and the screenshot run's ratios to the text run of the same invocation.

Memory: the images a 64-episode, 2-turn screenshot rollout holds in the trainer (one screenshot per turn: 128 PIL
images) and the pixel inputs the loss gets from them (``pixel_values``, ``image_grid_thw``), built from real
screenshots of one env; the resident-set growth of the process while they are built. The envs' Chromium processes
are not counted (one per env, see ``benchmarks/web_throughput.py``).

    python benchmarks/vlm_step.py --steps 4 --out benchmarks/results/vlm_step.json
"""

from __future__ import annotations

import json
import resource
from pathlib import Path

from step_time import mean_parts, step_arguments, step_records  # this folder is on the path of a script run from it

PARTS = ("step_time", "timing/rollout_s", "timing/env_s", "timing/update_s")
SIZES = ("episode/turns", "episode/response_length", "completions/mean_length")
"""What each step's episodes were (means): turns, completion tokens (all), sampled tokens."""
JOB = [
    "actor_rollout_ref.model.path=agentfly:tiny-vl",
    "agent.env=agentfly/MiniWoB-ClickButton",
    "agent.agent_type=gui",
    "agent.template=qwen2_5_vl",
    "algorithm.adv_estimator=grpo",
    "agent.max_turns=2",
    "agent.max_tokens_per_turn=32",
    "actor_rollout_ref.rollout.response_length=512",
    "agent.num_chains=4",
    "data.train_batch_size=2",
    "data.val_size=0",
]
MODES = {"text": "agent.env_kwargs={obs: text}", "screenshot": "agent.env_kwargs={obs: screenshot}"}


def run_job(mode: str, steps: int, directory: Path, extra: list[str]) -> list[dict[str, float]]:
    """The per-step records (steps 2..N) of one CLI training run seeing the page in ``mode``."""
    return step_records(mode, [*JOB, MODES[mode], f"trainer.total_training_steps={steps}", *extra], directory)


def rollout_image_memory(episodes: int = 64, turns: int = 2) -> dict[str, float]:
    """MiB the screenshots of ``episodes`` x ``turns`` turns take in the trainer: as PIL images, as pixel inputs,
    and the process's peak resident-set growth while both are built."""
    import gymnasium as gym

    import agentfly_envs  # noqa: F401  (registers the env ids)
    from agentfly_train.tiny_model import build_vl_image_processor
    from agentfly_train.vision import ImageInputs

    env = gym.make("agentfly/MiniWoB-ClickButton", obs="screenshot", parser="gui")
    shots = []
    for index in range(turns):
        _, info = env.reset(options={"index": index})
        shots.append(info["messages"][-1]["content"][0]["image"])
    env.close()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    images = [[shot.copy() for shot in shots] for _ in range(episodes)]
    pixels = ImageInputs(build_vl_image_processor(), image_token_id=0).pixel_inputs(images)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    mib = 2**20
    return {
        "episodes": episodes,
        "images": episodes * turns,
        "pil_mib": sum(len(image.tobytes()) for row in images for image in row) / mib,
        "pixel_inputs_mib": (pixels["pixel_values"].nbytes + pixels["image_grid_thw"].nbytes) / mib,
        "peak_rss_growth_mib": (after - before) / 1024,
    }


def main() -> None:
    args = step_arguments(__doc__, default_steps=4)

    figures = mean_parts(list(MODES), run_job, args.steps, args.overrides, PARTS + SIZES)
    for mode, parts in figures.items():
        ratios = ", ".join(f"{part} {parts[part] / max(figures['text'][part], 1e-9):.2f}x" for part in PARTS)
        print(f"{mode:>10}: " + ", ".join(f"{part} {parts[part]:.2f} s" for part in PARTS))
        print(f"{'':>10}  against text: {ratios}")
        print(f"{'':>10}  episodes: " + ", ".join(f"{part} {parts[part]:.1f}" for part in SIZES))
    memory = rollout_image_memory()
    print(
        f"screenshots of {memory['episodes']} two-turn episodes ({memory['images']} images): "
        f"{memory['pil_mib']:.1f} MiB as images, {memory['pixel_inputs_mib']:.1f} MiB as pixel inputs, "
        f"peak RSS growth {memory['peak_rss_growth_mib']:.1f} MiB"
    )
    if args.out:
        args.out.write_text(json.dumps({"steps": args.steps, "runs": figures, "memory": memory}, indent=2) + "\n")


if __name__ == "__main__":
    main()
