"""Vision-language policies: screenshots in the rollout's tokens (placeholders, masks, the image cap), HF sampling with
images against the trainer's forward (M-RoPE positions), saved episodes' screenshots and the report, the config
errors, and a short CLI run on the tiny VLM whose report shows them."""

from __future__ import annotations

import copy
import functools
import json
import math
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import gymnasium as gym
import pytest
import torch

import agentfly_envs  # noqa: F401  (registers the env ids)
from agentfly_envs.worlds.miniwob import require_miniwob
from agentfly_train.chat_templates import chat_template
from agentfly_train.config import ConfigError
from agentfly_train.generation import Generation, HFGenerationBackend, Policy, SamplingParams
from agentfly_train.rollout import (
    ChatCodec,
    RolloutBudgets,
    row_images,
    run_rollouts,
    training_rows,
    trajectory_record,
)
from agentfly_train.rollout.stream import BatchedRequests, EpisodeStream, run_to_end
from agentfly_train.tiny_model import (
    add_vision_tokens,
    build_qwen3_vl_image_processor,
    build_vl_image_processor,
    build_vl_model,
)
from agentfly_train.vision import IMAGE_PLACEHOLDER, ImageInputs, message_images
from tests.helpers.browser import console_errors, open_page, select
from tests.helpers.processes import run_cli
from tests.helpers.readme import readme_command, runs_readme_command
from tests.helpers.runs import final_weights, quickstart_config, step_records, sync_and_on_policy_async

ENV_ID = "agentfly/MiniWoB-ClickButton"
SCROLL = "Thought: I look further down.\nAction: scroll(start_box='(80,100)', direction='down')"


def _vision(tiny_tokenizer, template: str, image_processor):
    """``(tokenizer, images, codec, env)``: the tiny tokenizer with the vision tokens and ``template``, the image
    inputs of ``image_processor``, their codec, and a screenshot env (closed after the module)."""
    try:
        require_miniwob()
    except Exception as error:  # the web extra or Chromium is missing
        pytest.skip(str(error))
    tokenizer = add_vision_tokens(copy.deepcopy(tiny_tokenizer), template)
    images = ImageInputs.from_tokenizer(image_processor, tokenizer)
    codec = ChatCodec(tokenizer, None, images=images)
    env = gym.make(ENV_ID, obs="screenshot", parser="gui", max_turns=3)
    yield tokenizer, images, codec, env
    env.close()


@pytest.fixture(scope="module")
def vision(tiny_tokenizer):
    """Qwen2.5-VL's template and image processor (14-pixel patches)."""
    yield from _vision(tiny_tokenizer, "qwen2_5_vl", build_vl_image_processor())


@pytest.fixture(scope="module")
def qwen3_vision(tiny_tokenizer):
    """Qwen3-VL's template and image processor (16-pixel patches)."""
    yield from _vision(tiny_tokenizer, "qwen3_vl", build_qwen3_vl_image_processor())


class ScriptedPolicy:
    """Plays fixed assistant texts, and keeps the images each call was given per prompt."""

    def __init__(self, codec: ChatCodec, turns: list[str]) -> None:
        self.codec, self.turns, self.images = codec, list(turns), []

    def generate(self, prompts: Sequence[Sequence[int]], max_new_tokens, params, images=None):
        self.images.append([list(row) for row in images] if images else images)
        tokens = [*self.codec.encode(self.turns.pop(0)), self.codec.eos_token_id]
        return [Generation(tokens, [-0.5] * len(tokens), True)]


def _episode(vision, max_images, streamed=False):
    """Scroll, then the golden click, turn-synchronously or (``streamed``) through off-policy training's episode
    stream over HF-style batched requests."""
    _, _, codec, env = vision
    env.reset(options={"index": 0})
    golden = env.unwrapped.golden_actions()
    policy = ScriptedPolicy(codec, [SCROLL, *golden])
    budgets = RolloutBudgets(max_turns=3, max_tokens_per_turn=64, response_length=2048, max_images=max_images)
    task = env.unwrapped.tasks.row(0)
    with ThreadPoolExecutor(1) as executor:
        if streamed:
            stream = EpisodeStream(BatchedRequests(policy), codec, budgets, executor)
            [trajectory] = run_to_end(stream, [env], [task], SamplingParams(), keys=[0])
        else:
            [trajectory] = run_rollouts([env], [task], policy, codec, budgets, SamplingParams(), executor)
    return trajectory, policy


def test_a_multi_turn_screenshot_episode_carries_each_turns_image_as_untrained_placeholders(vision):
    """Scroll, then the golden click: the prompt's and the observation's screenshots are each one run of the
    processor's patch count of image tokens, never trained (``env_mask = 0``), the policy is handed every image of
    its context at every turn, and the tokens are the template's rendering of the whole conversation."""
    _, images, codec, _ = vision
    trajectory, policy = _episode(vision, max_images=None)
    assert trajectory.reward == 1.0 and trajectory.num_turns == 2 and len(trajectory.images) == 2
    per_image = images.tokens_per_image(trajectory.images[0])
    assert per_image == (168 // 28) * (224 // 28) == 48  # 160 x 210 rounds to 168 x 224, 14-pixel patches merged 2 x 2
    pad = images.image_token_id
    assert trajectory.prompt_ids.count(pad) == per_image
    in_completion = [n for n, token in enumerate(trajectory.completion_ids) if token == pad]
    assert len(in_completion) == per_image and in_completion == list(range(in_completion[0], in_completion[-1] + 1))
    assert all(trajectory.env_mask[n] == 0 for n in in_completion)
    assert [len(given[0]) if given else 0 for given in policy.images] == [1, 2]
    assert policy.images[1][0] == trajectory.images
    whole = codec.encode(codec.render(trajectory.messages, add_generation_prompt=False), trajectory.images)
    ids = trajectory.prompt_ids + trajectory.completion_ids
    assert whole[: len(ids)] == ids
    record = json.dumps(trajectory_record(trajectory))
    assert '"size": [160, 210]' in record  # sample files write an image as its size


def _image_parts(record: dict) -> list[dict]:
    """The image parts of a saved episode's messages."""
    parts = [
        part for message in record["messages"] if isinstance(message["content"], list) for part in message["content"]
    ]
    return [part for part in parts if part["type"] == "image"]


def _shown_screenshots(browser) -> list[list]:
    """``[loaded, natural width, natural height]`` of each screenshot in the report's episode list."""
    return browser.execute_script(
        "return [...document.querySelectorAll('#episode-list img.shot')]"
        ".map(img => [img.complete, img.naturalWidth, img.naturalHeight])"
    )


def test_saved_episodes_keep_each_screenshot_once_as_a_png_that_the_report_inlines(vision, tmp_path, browser):
    """A sample line names each screenshot's PNG file (relative to the line's directory), holding the pixels the
    policy saw; a screen that recurs (here: the scroll leaves the page as it was, and the episode is saved three
    times) is one file. The report inlines the screenshots newest step first while its byte budget lasts, and says
    where the others are; in headless Chromium the episode shows its screenshots. With ``AGENTFLY_REPORT_SHOTS=DIR``
    it writes a picture of the episode there (``report_gui_episode.png``)."""
    from PIL import Image, ImageOps

    from agentfly_train.report import build_report, load_run, render
    from agentfly_train.samples import write_samples

    trajectory, _ = _episode(vision, max_images=None)
    samples = tmp_path / "train_samples"
    write_samples(samples / "step_000001.jsonl", [trajectory])
    write_samples(samples / "step_000001.jsonl", [trajectory], append=True)
    lines = [json.loads(line) for line in (samples / "step_000001.jsonl").read_text().splitlines()]
    saved = _image_parts(lines[0])
    shown = message_images(trajectory.messages)
    assert len(lines) == 2 and _image_parts(lines[1]) == saved and len(saved) == len(shown) == 2
    assert all(part["size"] == [160, 210] for part in saved) and saved[0]["file"] == saved[1]["file"]
    for part, image in zip(saved, shown, strict=True):
        with Image.open(samples / part["file"]) as png:
            assert png.format == "PNG" and png.tobytes() == image.convert(png.mode).tobytes()
    assert [path.name for path in (samples / "images").iterdir()] == [saved[0]["file"].removeprefix("images/")]

    mirrored = copy.deepcopy(trajectory)  # a later step with another screen
    for message in mirrored.messages:
        for part in message["content"] if isinstance(message["content"], list) else []:
            if part["type"] == "image":
                part["image"] = ImageOps.mirror(part["image"])
    write_samples(samples / "step_000002.jsonl", [mirrored])
    newest = _image_parts(json.loads((samples / "step_000002.jsonl").read_text()))[0]["file"]
    data = load_run(tmp_path)
    names = [f"train_samples/{newest}", f"train_samples/{saved[0]['file']}"]
    assert list(data.images) == names and all(data.images[name] == tmp_path / name for name in names)
    assert data.samples["train"][1][0]["messages"][1]["content"][0]["file"] == names[1]

    page = render(data, image_bytes=data.images[names[0]].stat().st_size)
    payload = json.loads(page.split('id="run-data">', 1)[1].split("</script>", 1)[0])
    assert list(payload["images"]) == names[:1] and payload["images"][names[0]].startswith("data:image/png;base64,")
    assert "screenshots left out of this page: 1 (older ones; it holds " in " ".join(payload["problems"])

    open_page(browser, build_report(tmp_path))
    select(browser, "step-picker", "1")
    assert _shown_screenshots(browser) == [[True, 160, 210]] * 4  # the two episodes' two screenshots, loaded
    assert console_errors(browser) == []
    if "AGENTFLY_REPORT_SHOTS" in os.environ:  # the picture in docs/gui-agents.md
        folder = Path(os.environ["AGENTFLY_REPORT_SHOTS"])
        folder.mkdir(parents=True, exist_ok=True)
        episode = browser.find_element("css selector", "#episode-list article.episode")
        episode.screenshot(str(folder / "report_gui_episode.png"))


def test_max_images_drops_the_oldest_screenshot_and_each_turn_trains_in_the_context_it_was_sampled_in(vision):
    """With ``max_images=1``, the observation's screenshot replaces the prompt's in the context: the second turn is
    sampled with the new screenshot only, the old one's tokens (markers included) are the placeholder text's, and
    each turn's training row is its own context with that context's images (the rows of turns not taken, the
    prompt's)."""
    tokenizer, images, _, _ = vision
    trajectory, policy = _episode(vision, max_images=1)
    first, second = message_images(trajectory.messages)  # the record keeps every screenshot
    assert trajectory.reward == 1.0 and trajectory.num_turns == 2
    assert [given[0] for given in policy.images] == [[first], [second]]
    assert trajectory.images == [second] and [span.images for span in trajectory.turn_spans] == [[first], [second]]
    per_image = images.tokens_per_image(first)
    later = trajectory.turn_spans[1].context
    assert later.count(images.image_token_id) == per_image
    assert tokenizer.decode(later, skip_special_tokens=False).count("<|vision_start|>") == 1
    assert IMAGE_PLACEHOLDER in tokenizer.decode(later)
    assert trajectory.context_ids[: len(later)] == later
    assert trajectory.turn_spans[0].context == trajectory.prompt_ids  # sampled on the prompt as it was
    rows = training_rows([trajectory], turns=3)
    shots = row_images([trajectory], turns=3)
    assert shots == [[first], [second], [first]]
    for prompt, completion, mask, row_shots in zip(
        rows["prompt_ids"], rows["completion_ids"], rows["env_mask"], shots, strict=True
    ):
        assert [*prompt, *completion].count(images.image_token_id) == per_image * len(row_shots)
        assert images.image_token_id not in [token for token, m in zip(completion, mask, strict=True) if m]
    assert rows["prompt_ids"][1] == later and rows["env_mask"][2] == [0]


@pytest.mark.parametrize("max_images", [None, 1])
def test_the_warm_starts_rows_of_a_screenshot_episode_are_the_rows_rl_trains_on(vision, max_images):
    """Golden rows of a two-turn screenshot episode (click-checkboxes: two clicks) are the rollout's training rows of
    the same turns sampled: the same tokens, the images of each row, placeholder counts of ``tokens_per_image``, and
    loss only on the assistant's tokens (never an image token). With ``max_images=1`` each turn is a row in its own
    context, the first screenshot replaced by the placeholder text in the second; without a cap, one row. The
    collator of the warm start hands the loss each row's pixel inputs and image token types, and the warm start's
    loss on these rows changes when the screenshots do."""
    from PIL import ImageOps
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    from agentfly_train.demonstrations import golden_token_rows
    from agentfly_train.sft import PixelCollator, WarmStartPhase, warm_start

    tokenizer, images, codec, _ = vision
    env = gym.make("agentfly/MiniWoB-ClickCheckboxes", obs="screenshot", parser="gui", max_turns=3)
    try:
        env.reset(options={"index": 0})
        golden = env.unwrapped.golden_actions()
        task = env.unwrapped.tasks.row(0)
        budgets = RolloutBudgets(max_turns=2, max_tokens_per_turn=64, response_length=4096, max_images=max_images,
                                 step_wise=max_images is not None)  # fmt: skip
        rows = golden_token_rows(env, codec, [task], rollout=budgets)
        with ThreadPoolExecutor(1) as executor:
            [trajectory] = run_rollouts(
                [env], [task], ScriptedPolicy(codec, golden), codec, budgets, SamplingParams(), executor
            )
    finally:
        env.close()
    assert len(golden) == 2 and trajectory.reward == 1.0
    turns = 2 if max_images else None
    expected, shots = training_rows([trajectory], turns), row_images([trajectory], turns)
    pairs = zip(expected["prompt_ids"], expected["completion_ids"], strict=True)
    assert [row["input_ids"] for row in rows] == [[*prompt, *completion] for prompt, completion in pairs]
    assert [row["assistant_masks"] for row in rows] == [
        [0] * len(prompt) + mask for prompt, mask in zip(expected["prompt_ids"], expected["env_mask"], strict=True)
    ]
    assert [row["images"] for row in rows] == shots
    first, second = message_images(trajectory.messages)
    assert shots == ([[first], [second]] if max_images else [[first, second]])
    pad = images.image_token_id
    for row in rows:
        trained = [token for token, m in zip(row["input_ids"], row["assistant_masks"], strict=True) if m]
        assert row["input_ids"].count(pad) == sum(images.tokens_per_image(image) for image in row["images"])
        assert pad not in trained
        assert tokenizer.decode(trained).count("Action: click(") == (1 if max_images else 2)
    assert (IMAGE_PLACEHOLDER in tokenizer.decode(rows[-1]["input_ids"])) == (max_images == 1)

    collate = PixelCollator(DataCollatorForLanguageModeling(pad_token_id=0), [row["images"] for row in rows], images)
    batch = collate([{"input_ids": row["input_ids"], "row": n} for n, row in reversed(list(enumerate(rows)))])
    pixels = images.pixel_inputs([row["images"] for row in reversed(rows)])
    assert torch.equal(batch["pixel_values"], pixels["pixel_values"]) and pixels["pixel_values"].abs().sum() > 0
    assert torch.equal(batch["image_grid_thw"], pixels["image_grid_thw"])
    assert torch.equal(batch["mm_token_type_ids"], (batch["input_ids"] == pad).int())
    assert "num_images" not in batch and "row" not in batch

    inverted = [row | {"images": [ImageOps.invert(image.convert("RGB")) for image in row["images"]]} for row in rows]
    losses = []  # the warm start (TRL's SFTTrainer) on these rows, and on them with each screenshot inverted
    for shown in (rows, inverted):
        model = build_vl_model(tokenizer, hidden_size=32, num_layers=1, initializer_range=0.2)  # images matter
        _, loss = warm_start(model, tokenizer, [WarmStartPhase(shown, 1)], lr=1e-9, batch_size=len(rows), use_cpu=True,
                             seed=0, images=images)  # fmt: skip
        losses.append(loss)
    assert all(math.isfinite(loss) for loss in losses) and abs(losses[0] - losses[1]) > 1e-3  # 0.06, 0.015


def test_an_episode_within_max_images_is_one_growing_sequence(vision):
    """The same episode with room for both screenshots: the context is the prompt and the completion, unchanged."""
    trajectory, _ = _episode(vision, max_images=2)
    assert trajectory.context_ids == trajectory.prompt_ids + trajectory.completion_ids
    assert trajectory.images == message_images(trajectory.messages) and len(trajectory.images) == 2


@pytest.mark.parametrize(
    ("inputs", "build_model"),
    [("vision", build_vl_model), ("qwen3_vision", functools.partial(build_vl_model, architecture="qwen3_vl"))],
    ids=["qwen2_5_vl", "qwen3_vl"],
)
def test_hf_sampling_with_images_scores_as_the_trainers_forward(inputs, build_model, request):
    """Log-probabilities HF ``generate`` reports for two left-padded prompts with screenshots are those of one
    forward over prompt + completion with the pixel inputs and the image token types (M-RoPE positions), the image
    token excluded; without the token types (1-D positions) they differ (Qwen3-VL refuses). Qwen3-VL's forward also
    takes the DeepStack features of the image tokens, which only fit where the expanded ids have one token per merged
    patch."""
    tokenizer, images, codec, env = request.getfixturevalue(inputs)
    model = build_model(tokenizer, hidden_size=32, num_layers=1)
    with torch.no_grad():  # weights large enough that positions move the log-probabilities visibly
        for weight in model.parameters():
            weight.mul_(8 if weight.ndim == 2 else 1)
    prompts, shots = [], []
    for index in (0, 1):
        _, info = env.reset(options={"index": index})
        prompts.append(codec.prompt_ids(info["messages"]) + codec.encode("x" * (3 * index)))
        shots.append([info["messages"][-1]["content"][0]["image"]])
    backend = HFGenerationBackend.from_policy(Policy.plain(model, tokenizer, images))
    torch.manual_seed(0)
    generations = backend.generate(prompts, [6, 6], SamplingParams(temperature=1.0), images=shots)
    for prompt, shot, generation in zip(prompts, shots, generations, strict=True):
        ids = torch.tensor([prompt + generation.token_ids])
        assert images.image_token_id not in generation.token_ids
        pixels = images.pixel_inputs([shot])
        pixels.pop("num_images")
        with torch.no_grad():
            mrope = _logprobs(model, images, ids, len(prompt), pixels, mm_token_type_ids=images.token_types(ids))
            try:
                flat = _logprobs(model, images, ids, len(prompt), pixels)
            except ValueError as error:  # Qwen3-VL refuses images without the token types
                assert "mm_token_type_ids" in str(error) and inputs == "qwen3_vision"
                flat = torch.full_like(mrope, float("inf"))
        torch.testing.assert_close(mrope, torch.tensor(generation.logprobs), atol=2e-4, rtol=0)
        assert (mrope - flat).abs().max() > 1e-3


def _logprobs(model, images: ImageInputs, ids, prompt_length: int, pixels, **extra):
    """Log-probabilities of ``ids[prompt_length:]`` under one forward, the image token excluded."""
    logits = model(input_ids=ids, **pixels, **extra).logits[0, prompt_length - 1 : -1]
    logits[:, images.image_token_id] = float("-inf")
    return torch.log_softmax(logits, -1).gather(1, ids[0, prompt_length:, None])[:, 0]


def _screenshot_overrides(*extra: str) -> list[str]:
    return [
        "actor_rollout_ref.model.path=agentfly:tiny-vl",
        f"agent.env={ENV_ID}",
        "agent.agent_type=gui",
        "agent.template=qwen2_5_vl",
        "agent.env_kwargs={obs: screenshot}",
        "algorithm.adv_estimator=grpo",
        "sft.enable=false",  # the quickstart's warm start, on MiniWoB's golden episodes: not what these tests check
        *extra,
    ]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["actor_rollout_ref.rollout.name=vllm"], "the vllm backend does not sample from prompts with images"),
        (["algorithm.adv_estimator=gae"], "trains a critic, which does not see the screenshots"),
        (
            ["actor_rollout_ref.actor.use_kl_loss=true", "actor_rollout_ref.actor.kl_loss_type=full"],
            "the exact (full) KL runs the model without the screenshots",
        ),
        (["agent.max_images=-1"], "agent.max_images must be >= 0"),
        (
            ["agent.max_images=1", "algorithm.adv_estimator=reinforce_plus_plus"],
            "agent.max_images trains each turn as its own sample, which needs an estimator that compares",
        ),
    ],
)
def test_what_a_screenshot_run_cannot_combine_is_a_one_line_config_error(extra, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")) as error:
        quickstart_config(_screenshot_overrides(*extra))
    assert "\n" not in str(error.value)


def test_the_episode_stream_hands_each_turn_the_images_the_turn_synchronous_rollout_does(vision):
    """Off-policy training's episode stream (:class:`EpisodeStream` over HF's batched requests) on the scroll-then-click
    episode with ``max_images=1``: the policy is given the same screenshots at each turn, and the trajectory's
    tokens, images and turn contexts are those of :func:`run_rollouts`."""
    synchronous, sync_policy = _episode(vision, max_images=1)
    streamed, policy = _episode(vision, max_images=1, streamed=True)
    assert streamed.num_turns == 2 and policy.images == sync_policy.images
    assert (streamed.prompt_ids, streamed.completion_ids, streamed.env_mask, streamed.images) == (
        synchronous.prompt_ids, synchronous.completion_ids, synchronous.env_mask, synchronous.images
    )  # fmt: skip
    assert [(span.context, span.images) for span in streamed.turn_spans] == [
        (span.context, span.images) for span in synchronous.turn_spans
    ]


def test_async_on_screenshots_with_max_staleness_0_equals_sync_under_greedy_decoding(tmp_path):
    """Screenshots through the CLI's off-policy schedule (``async_training.enable=true``, on-policy settings, HF,
    greedy): two steps give the same rewards, losses, importance weights and updated weights as the synchronous
    schedule, so the stream sampled from the screenshots the trainer's loss then read."""
    from tests.helpers.red_or_blue import ENV_ID as RED_OR_BLUE

    common = _screenshot_overrides(
        f"agent.env={RED_OR_BLUE}",
        "agent.imports=[tests/helpers/red_or_blue.py]",
        "agent.env_kwargs={obs: screenshot, num_tasks: 8}",
        "agent.max_tokens_per_turn=8",
        "actor_rollout_ref.rollout.response_length=16",
        "actor_rollout_ref.rollout.top_k=1",  # greedy, with log-probs at temperature 1
        "actor_rollout_ref.actor.entropy_coeff=0.01",  # greedy chains of a task are equal: make each step move it
        "actor_rollout_ref.model.tiny_hidden_size=32",
        "agent.num_chains=2",
        "data.train_batch_size=2",
        "data.val_size=0",
        "data.shuffle=false",
        "algorithm.rollout_correction.rollout_is=token",
        "trainer.total_training_steps=2",
    )
    sync, asynchronous = sync_and_on_policy_async(common, tmp_path)
    steps = {"sync": step_records(sync), "async": step_records(asynchronous)}
    assert len(steps["sync"]) == len(steps["async"]) == 2
    for a, s in zip(steps["async"], steps["sync"], strict=True):
        for key in ("reward/mean", "episode/response_length", "rollout_corr/rollout_is_mean", "actor/entropy"):
            assert a[key] == pytest.approx(s[key], abs=1e-5), key
        assert a["async/staleness_max"] == 0 and a["async/dropped"] == 0
    assert all(step["grad_norm"] > 0 for step in steps["sync"])  # the policy moved
    weights_async = final_weights(asynchronous)
    for name, tensor in final_weights(sync).items():
        torch.testing.assert_close(weights_async[name], tensor, atol=1e-6, rtol=1e-5)


def test_a_text_model_on_screenshots_is_a_one_line_config_error(vision):
    from agentfly_train.models import policy_images

    config = quickstart_config([*_screenshot_overrides(), "actor_rollout_ref.model.path=agentfly:tiny"])
    with pytest.raises(ConfigError, match="needs a vision-language model") as error:
        policy_images(config, vision[0])
    assert "\n" not in str(error.value)


def test_image_max_pixels_scales_the_screenshot_for_tokens_and_pixels_alike(vision):
    from PIL import Image

    from agentfly_train.models import policy_images

    config = quickstart_config([*_screenshot_overrides(), f"agent.image_max_pixels={100 * 14 * 14}"])
    images = policy_images(config, vision[0])
    screen = Image.new("RGB", (160, 210))
    grid = images.pixel_inputs([[screen]])["image_grid_thw"][0]
    assert images.tokens_per_image(screen) == int(grid.prod()) // 4 < 48  # 48 at the processor's own limit


def test_a_qwen3_vl_checkpoint_directory_loads_as_an_image_text_model_with_image_max_pixels(tmp_path, tiny_tokenizer):
    """A directory laid out as a Qwen3-VL checkpoint (its preprocessor file as Qwen's: ``size`` in pixels, the
    torchvision processor type) goes through the code of any checkpoint: an image-text-to-text model, the Pillow
    processor with ``agent.image_max_pixels`` as its ``longest_edge``, and a forward whose expanded ids fit the
    image features."""
    from PIL import Image

    from agentfly_train.models import load_policy, policy_images

    tokenizer = add_vision_tokens(copy.deepcopy(tiny_tokenizer), "qwen3_vl")
    build_vl_model(tokenizer, hidden_size=32, num_layers=1, architecture="qwen3_vl").save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    preprocessor = {
        "image_processor_type": "Qwen2VLImageProcessorFast",
        "size": {"longest_edge": 16777216, "shortest_edge": 65536},
        "patch_size": 16,
        "temporal_patch_size": 2,
        "merge_size": 2,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
    }
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(preprocessor))
    overrides = [*_screenshot_overrides(), f"actor_rollout_ref.model.path={tmp_path}", "agent.template=qwen3_vl"]
    config = quickstart_config([*overrides, f"agent.image_max_pixels={100 * 32 * 32}"])
    model, tokenizer = load_policy(config)
    images = policy_images(config, tokenizer)
    assert type(model).__name__ == "Qwen3VLForConditionalGeneration"
    assert type(images.image_processor).__name__ == "Qwen2VLImageProcessorPil"
    assert images.image_processor.size.longest_edge == 100 * 32 * 32
    screen = Image.new("RGB", (640, 480), "red")
    pixels = images.pixel_inputs([[screen]])
    pixels.pop("num_images")
    per_image = images.tokens_per_image(screen)
    assert per_image == int(pixels["image_grid_thw"][0].prod()) // 4 <= 100 < 640 * 480 // (32 * 32)
    message = {"role": "user", "content": [{"type": "image", "image": screen}, {"type": "text", "text": "Go."}]}
    text = tokenizer.apply_chat_template([message], add_generation_prompt=True, tokenize=False)
    ids = torch.tensor([images.expand(tokenizer(text, add_special_tokens=False)["input_ids"], [screen])])
    with torch.no_grad():
        logits = model(input_ids=ids, **pixels, mm_token_type_ids=images.token_types(ids)).logits
    assert logits.shape[:2] == ids.shape and text.startswith("<|im_start|>user\n<|vision_start|><|image_pad|>")


def test_the_shipped_qwen2_5_vl_template_writes_one_image_token_per_image(vision):
    tokenizer = vision[0]
    message = {"role": "user", "content": [{"type": "image", "image": None}, {"type": "text", "text": "Go."}]}
    text = tokenizer.apply_chat_template([message], chat_template=chat_template("qwen2_5_vl"), tokenize=False)
    assert "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Go.<|im_end|>\n" in text


def test_a_qwen3_vl_episode_wraps_each_screenshot_observation_as_a_tool_response_in_a_user_turn(qwen3_vision):
    """Qwen3-VL's template (``agent.template=qwen3_vl``): no default system prompt, the observation after each turn a
    user turn holding ``<tool_response>`` around the screenshot's tokens (35 of them: 160 x 224 pixels, 10 x 14
    patches of 16 merged 2 x 2), which are never trained, and the whole episode the template's rendering."""
    tokenizer, images, codec, _ = qwen3_vision
    trajectory, policy = _episode(qwen3_vision, max_images=None)
    assert trajectory.reward == 1.0 and trajectory.num_turns == 2 and len(trajectory.images) == 2
    per_image = images.tokens_per_image(trajectory.images[0])
    assert per_image == (224 // 16) * (160 // 16) // 4 == 35
    prompt = tokenizer.decode(trajectory.prompt_ids, skip_special_tokens=False)
    assert prompt.startswith("<|im_start|>system\n") and "You are a helpful assistant." not in prompt
    assert f"<|im_start|>user\n<|vision_start|>{'<|image_pad|>' * per_image}<|vision_end|>" in prompt
    assert prompt.endswith("<|im_end|>\n<|im_start|>assistant\n")
    pad = images.image_token_id
    in_completion = [n for n, token in enumerate(trajectory.completion_ids) if token == pad]
    assert len(in_completion) == per_image and all(trajectory.env_mask[n] == 0 for n in in_completion)
    observation = trajectory.completion_ids[in_completion[0] - 1 : in_completion[-1] + 2]
    before = tokenizer.decode(trajectory.completion_ids[: in_completion[0] - 1], skip_special_tokens=False)
    assert before.endswith("<|im_end|>\n<|im_start|>user\n<tool_response>\n")
    assert tokenizer.decode(observation, skip_special_tokens=False) == (
        f"<|vision_start|>{'<|image_pad|>' * per_image}<|vision_end|>"
    )
    after = tokenizer.decode(trajectory.completion_ids[in_completion[-1] + 2 :], skip_special_tokens=False)
    assert after.split("\n</tool_response><|im_end|>\n<|im_start|>assistant\n")[1:]  # then the second turn
    assert [len(given[0]) for given in policy.images] == [1, 2]
    whole = codec.encode(codec.render(trajectory.messages, add_generation_prompt=False), trajectory.images)
    ids = trajectory.prompt_ids + trajectory.completion_ids
    assert whole[: len(ids)] == ids


@pytest.mark.slow  # Chromium and two RL steps of a tiny VLM through the CLI, for each command
@pytest.mark.timeout(600)
@runs_readme_command(
    "python -m agentfly_train actor_rollout_ref.model.path=agentfly:tiny-vl agent.env=agentfly/MiniWoB-ClickButton "
    "agent.agent_type=gui agent.template=qwen2_5_vl 'agent.env_kwargs={obs: screenshot}' agent.max_images=1 "
    "algorithm.adv_estimator=grpo agent.max_turns=2 agent.max_tokens_per_turn=32 agent.num_chains=2 "
    "data.train_batch_size=2 data.val_size=0 trainer.total_training_steps=2",
    "python -m agentfly_train actor_rollout_ref.model.path=agentfly:tiny-qwen3-vl "
    "agent.env=agentfly/MiniWoB-ClickButton agent.agent_type=gui agent.template=qwen3_vl "
    "'agent.env_kwargs={obs: screenshot}' "
    "algorithm.adv_estimator=grpo agent.max_turns=2 agent.max_tokens_per_turn=32 agent.num_chains=2 "
    "data.train_batch_size=2 data.val_size=0 trainer.total_training_steps=2",
)
def test_two_training_steps_on_screenshots_through_the_cli(tmp_path, readme, browser):
    """``agent_type=gui``, ``template=qwen2_5_vl`` (``qwen3_vl``) and ``obs=screenshot`` on the tiny Qwen2.5-VL
    (Qwen3-VL): two optimiser steps whose
    loss ran the model on the batch's screenshots (a gradient flows), then ``final/`` is written with the image
    processor; the run's report, opened in headless Chromium, shows the saved training episodes' screenshots."""
    pytest.importorskip("miniwob")
    command = readme_command(
        readme,
        add=[
            "actor_rollout_ref.rollout.response_length=256",
            "actor_rollout_ref.model.tiny_hidden_size=64",
            "trainer.log_train_generations=2",
            f"trainer.default_local_dir={tmp_path}",
        ],
    )
    result = run_cli(command.argv, timeout=600, env=command.env)
    assert result.returncode == 0, result.stderr[-3000:]
    steps = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    steps = [step for step in steps if "loss" in step]
    assert len(steps) == 2 and all(step["grad_norm"] > 0 for step in steps)
    assert (tmp_path / "final" / "config.json").is_file()
    assert (tmp_path / "final" / "preprocessor_config.json").is_file()  # the image processor, for eval of final/

    lines = (tmp_path / "train_samples" / "step_000002.jsonl").read_text().splitlines()
    saved = [part["file"] for line in lines for part in _image_parts(json.loads(line))]
    assert len(lines) == 2 and saved and all((tmp_path / "train_samples" / name).is_file() for name in saved)
    open_page(browser, tmp_path / "report.html")  # on the last step's training episodes
    assert _shown_screenshots(browser) == [[True, 160, 210]] * len(saved)  # every one, loaded
    assert browser.execute_script("return performance.getEntriesByType('resource').length") == 0  # inline images
    assert console_errors(browser) == []
