"""A task that only the screenshot answers, for the vision-language learning test and benchmarks: the screen
shows a square, red or blue, and the question (the same text for every task) asks which, answered ``1`` (red) or
``2`` (blue); with ``rounds=N``, N screens one after the other, each answered in its own turn. Importing this module
registers ``agentfly/TestRedOrBlue``; the CLI imports it with ``agent.imports=[tests/helpers/red_or_blue.py]``.

:func:`warm_start` writes the tiny vision-language policy the RL run starts from: it answers in the task's format and,
greedy, says ``1`` to every screen (accuracy 1/2); what RL adds to that can only come from the image.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym
from gymnasium import spaces

ENV_ID = "agentfly/TestRedOrBlue"
ANSWERS = {"red": "1", "blue": "2"}
"""The square's colour -> the answer naming it."""
SIDE = 112
"""The screen is ``SIDE`` x ``SIDE`` pixels: 8 x 8 patches of 14 pixels, 16 image tokens after the 2 x 2 merge."""
QUESTION = "Red (1) or blue (2)?"


class RedOrBlueTasks:
    """Task rows ``{"colour", "index", "task_seed"}``: colours alternate, and ``(task_seed, index)`` seeds the square's
    shade, size and place (another ``task_seed``, e.g. for validation, draws other screens)."""

    def __init__(self, num_tasks: int, task_seed: int) -> None:
        self.num_tasks, self.task_seed = num_tasks, task_seed

    def __len__(self) -> int:
        return self.num_tasks

    def row(self, index: int) -> dict[str, Any]:
        return {"colour": list(ANSWERS)[index % len(ANSWERS)], "index": index, "task_seed": self.task_seed}

    def validate(self, row: Mapping[str, Any]) -> None:
        """Any row of the three fields is a task (no data files are read)."""

    def golden(self, row: Mapping[str, Any]) -> None:
        """No golden solution: the answers are :meth:`RedOrBlue.golden_actions`, round by round."""
        return None


def screen(row: Mapping[str, Any], size: tuple[int, int] = (SIDE, SIDE)) -> Any:
    """The row's screen: a light grey image of ``size`` (width, height) pixels with a square of 5/8 to all of its
    shorter side, of a shade of the row's colour (a ``PIL.Image``)."""
    from PIL import Image, ImageDraw

    rng = random.Random(f"{row['task_seed']}/{row['index']}")
    width, height = size
    image = Image.new("RGB", size, (230, 230, 230))
    side = rng.randint(min(size) * 5 // 8, min(size))
    left, top = rng.randint(0, width - side), rng.randint(0, height - side)
    low, high = rng.randint(0, 60), rng.randint(180, 240)
    fill = (high, low, rng.randint(0, 60)) if row["colour"] == "red" else (rng.randint(0, 60), low, high)
    ImageDraw.Draw(image).rectangle([left, top, left + side - 1, top + side - 1], fill=fill)
    return image


class RedOrBlue(gym.Env):
    """The user message holds the screen (an image part) and :data:`QUESTION`; after each answer but the last round's,
    a tool message brings the next round's screen and the question again. The reward is the share of rounds whose
    turn's text was the colour's answer (:data:`ANSWERS`).

    Args:
        num_tasks: How many tasks the env addresses by index.
        task_seed: Seed of the screens' shades, sizes and places.
        parser: The agent type's parser, by name (the trainer's codec reads its format; the answer is plain text).
        rounds: Screens per episode, one turn each (a later round's colour is drawn from the task's seed).
        screen_size: The screens' (width, height) in pixels.
        Other keyword arguments (the trainer's ``max_turns``, ``obs``) are accepted and unused: the screen is always
        an image.
    """

    truncation_reward = 0.0
    reward_fn = None  # scored by step() itself

    def __init__(
        self,
        num_tasks: int = 64,
        task_seed: int = 0,
        parser: str = "gui",
        rounds: int = 1,
        screen_size: tuple[int, int] = (SIDE, SIDE),
        **_: Any,
    ) -> None:
        from agentfly_envs.parsers import get_parser

        self.parser = get_parser(parser)
        self.tasks = RedOrBlueTasks(num_tasks, task_seed)
        self.rounds, self.screen_size = rounds, tuple(screen_size)
        self.observation_space = spaces.Text(max_length=1, min_length=0)
        self.action_space = spaces.Text(max_length=64, min_length=0)
        self._screens: list[dict[str, Any]] = []
        self._turn = self._correct = 0

    def reset(self, *, seed: int | None = None, options: Mapping[str, Any] | None = None):
        super().reset(seed=seed)
        options = options or {}
        row = options.get("task") or self.tasks.row(options.get("index", 0))
        rng = random.Random(f"rounds/{row['task_seed']}/{row['index']}")
        later = [
            {**row, "colour": rng.choice(list(ANSWERS)), "index": f"{row['index']}/{n}"} for n in range(1, self.rounds)
        ]
        self._screens, self._turn, self._correct = [row, *later], 0, 0
        return "", {"messages": [{"role": "user", "content": self._content()}], "tools": []}

    def step(self, action: Any):
        text = action if isinstance(action, str) else action.get("content") or ""
        self._correct += text.strip() == ANSWERS[self._screens[self._turn]["colour"]]
        self._turn += 1
        if self._turn < self.rounds:
            message = {"role": "tool", "name": "screen", "content": self._content()}
            return "", 0.0, False, False, {"messages": [message], "reward_components": {}}
        reward = self._correct / self.rounds
        return "", reward, True, False, {"messages": [], "reward_components": {"correct": reward}}

    def golden_actions(self) -> list[str]:
        """The answers of the rounds left."""
        return [ANSWERS[row["colour"]] for row in self._screens[self._turn :]]

    def answer_action(self, answer: str) -> str:
        """The turn answering ``answer`` (plain text)."""
        return answer

    def _content(self) -> list[dict[str, Any]]:
        """The current round's screen and the question."""
        return [{"type": "image", "image": screen(self._screens[self._turn], self.screen_size)},
                {"type": "text", "text": QUESTION}]  # fmt: skip


if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=RedOrBlue)


def warm_start(directory: str | Path, seed: int, steps: int = 32, blue_says_red: float = 0.6, lr: float = 1e-2) -> Path:
    """Builds the tiny vision-language policy (``initializer_range=0.1``: see
    :func:`~agentfly_train.tiny_model.build_vl_model`) and trains it for ``steps`` batches of 8 screens on the
    answers of a demonstrator that says ``1`` to every red square, but also to a blue one with probability
    ``blue_says_red`` (else ``2``). Imitating it, the policy answers one digit and stops, says ``1`` to red squares and,
    greedy, to blue ones too (accuracy 1/2); sampled, it says ``2`` to about ``1 - blue_says_red`` of the blue ones,
    which RL rewards. Saves model, tokenizer and image processor to ``directory``.

    Returns:
        ``directory``, for ``actor_rollout_ref.model.path``.
    """
    import torch

    from agentfly_train.rollout import ChatCodec
    from agentfly_train.tiny_model import build_vl_image_processor, build_vl_model, build_vl_tokenizer
    from agentfly_train.vision import ImageInputs

    tokenizer = build_vl_tokenizer()
    model = build_vl_model(tokenizer, hidden_size=64, num_layers=2, seed=seed, initializer_range=0.1)
    processor = build_vl_image_processor()
    images = ImageInputs.from_tokenizer(processor, tokenizer)
    codec = ChatCodec(tokenizer, None, images=images)
    env = RedOrBlue(num_tasks=1024, task_seed=seed + 1000)  # other screens than the RL run's
    rng = random.Random(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.LinearLR(optimizer, 1.0, 0.05, steps)  # settles on the demonstrator's odds
    model.train()
    for _ in range(steps):
        rows, shots = [], []
        for _ in range(8):
            _, info = env.reset(options={"index": rng.randrange(len(env.tasks))})
            prompt = codec.prompt_ids(info["messages"])
            says = "1" if env.golden_actions() == ["1"] or rng.random() < blue_says_red else "2"
            answer = [*codec.encode(says), codec.eos_token_id]
            rows.append((prompt + answer, [-100] * len(prompt) + answer))
            shots.append([info["messages"][0]["content"][0]["image"]])
        input_ids = torch.tensor([ids for ids, _ in rows])  # one length: the same text and image size every time
        labels = torch.tensor([labels for _, labels in rows])
        pixels = images.pixel_inputs(shots)
        pixels.pop("num_images")
        loss = model(input_ids=input_ids, labels=labels, mm_token_type_ids=images.token_types(input_ids), **pixels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        schedule.step()
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    processor.save_pretrained(directory)
    return Path(directory)


RL_JOB = (
    f"agent.env={ENV_ID}",
    "agent.imports=[tests/helpers/red_or_blue.py]",
    "agent.agent_type=gui",
    "agent.template=qwen2_5_vl",
    "agent.env_kwargs={obs: screenshot, num_tasks: 256}",
    "data.val_env_kwargs={task_seed: 1}",
    "data.val_size=32",
    "trainer.val_before_train=true",
    "algorithm.adv_estimator=grpo",
    "agent.max_turns=1",
    "agent.max_tokens_per_turn=4",
    "actor_rollout_ref.rollout.response_length=8",
    "agent.num_chains=8",
    "data.train_batch_size=4",
    "actor_rollout_ref.actor.use_kl_loss=false",
    "actor_rollout_ref.actor.entropy_coeff=0.0",
    "actor_rollout_ref.actor.optim.lr=3e-3",
    "trainer.total_training_steps=15",
    "sft.enable=false",
)
"""The GRPO job (CLI overrides, run from the repository root) from a :func:`warm_start` directory, given with
``actor_rollout_ref.model.path``: 4 screens x 8 chains a step; greedy validation on 32 screens the training never
shows (``task_seed=1``), before and after."""
