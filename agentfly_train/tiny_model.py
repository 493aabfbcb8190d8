"""A tiny Qwen2-architecture model and a locally trained tokenizer, for offline runs and tests, and tiny
Qwen2.5-VL- and Qwen3-VL-architecture vision-language models beside it (the policies that
:data:`agentfly_train.tiny_policies.TINY_POLICIES` names by ``agentfly:tiny*`` model name).

Nothing is downloaded: the byte-level BPE tokenizer is trained on text this module generates
(arithmetic word problems rendered as tool-calling chats) and splits digits as Qwen2's does; its
chat template is ``compact_tools`` (Qwen2.5's ChatML and Hermes ``<tool_call>`` format with a
one-line-per-tool listing, so prompts stay short on CPU), with TRL's response template for parsing
tool calls; the model is built from a config with random weights.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

from agentfly_train.tiny_policies import TinyPolicy

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
"""Control tokens, as in Qwen2.5 (skipped when decoding with ``skip_special_tokens``)."""
TOOL_TOKENS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")
"""Single tokens for the tool-call tags, kept in decoded text like Qwen2.5's."""
VISION_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
"""Qwen2.5-VL's vision control tokens: an image is ``<|vision_start|>``, one ``<|image_pad|>`` per merged patch,
``<|vision_end|>`` (special: dropped when decoding with ``skip_special_tokens``)."""
QWEN2_SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
"""Qwen2's pre-tokenisation: every digit is its own piece, so a number is spelled the same in any context."""


def _training_corpus(num_problems: int) -> Iterator[str]:
    import gymnasium as gym

    import agentfly_envs  # noqa: F401  (registers the envs)
    from agentfly_envs.contract import env_contract

    env = gym.make("agentfly/Arith-Calc", level="hard", max_turns=8)
    for index in range(num_problems):
        _, info = env.reset(options={"index": index})
        yield from (m["content"] for m in info["messages"])
        for action in env_contract(env).golden_actions():
            observation, *_ = env.step(action)
            yield action
            yield observation
    yield json.dumps([tool["function"] for tool in info["tools"]])
    env.close()


def build_tokenizer(vocab_size: int = 1024, num_problems: int = 300):
    """Trains a byte-level BPE tokenizer with the Qwen2.5 chat template.

    Args:
        vocab_size: Target vocabulary size, special tokens included.
        num_problems: Generated problems in the training corpus.

    Returns:
        A ``transformers.PreTrainedTokenizerFast`` with ``eos_token="<|im_end|>"``,
        ``pad_token="<|endoftext|>"`` and left padding (what TRL's GRPO expects).
    """
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    from trl.chat_template_utils import qwen3_template

    from agentfly_train.chat_templates import chat_template

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_training_corpus(num_problems), trainer=trainer)
    tokenizer.add_tokens([AddedToken(token, special=False, normalized=False) for token in TOOL_TOKENS])
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        padding_side="left",
        chat_template=chat_template("compact_tools"),
        response_template=qwen3_template,  # TRL's parser of Qwen's `<tool_call>` JSON, for its own tool loop
    )


def _stopping_on_eos(model, tokenizer):
    """``model``, its generation stopping on the tokenizer's EOS and padding with its pad token."""
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def build_model(tokenizer, hidden_size: int = 64, num_layers: int = 2, num_heads: int = 4, seed: int = 0):
    """A randomly initialised ``Qwen2ForCausalLM`` sized for CPU tests.

    Args:
        tokenizer: Its vocabulary size and special token ids configure the model.
        hidden_size: Width of the residual stream.
        num_layers: Transformer blocks.
        num_heads: Attention heads (key/value heads are half as many).
        seed: Seed of the weight initialisation.

    Returns:
        The model, in float32, with ``generation_config`` stopping on ``<|im_end|>``.
    """
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=max(num_heads // 2, 1),
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    return _stopping_on_eos(Qwen2ForCausalLM(config), tokenizer)


def build_tiny_checkpoint(directory: str | Path, **model_kwargs) -> Path:
    """Builds the tokenizer and model and saves both to ``directory`` (loadable with ``from_pretrained``).

    Returns:
        ``directory`` as a ``Path``.
    """
    directory = Path(directory)
    tokenizer = build_tokenizer()
    build_model(tokenizer, **model_kwargs).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def build_vl_tokenizer(template: str = "qwen2_5_vl", **kwargs):
    """:func:`build_tokenizer` (``kwargs``) made a vision-language one (:func:`add_vision_tokens`, ``template``)."""
    return add_vision_tokens(build_tokenizer(**kwargs), template)


def add_vision_tokens(tokenizer, template: str = "qwen2_5_vl"):
    """Adds Qwen2.5-VL's vision tokens (Qwen3-VL's are the same) to a :func:`build_tokenizer` tokenizer and gives it
    our chat template ``template`` (``qwen2_5_vl`` or ``qwen3_vl``), which writes a message's image part as
    ``<|vision_start|><|image_pad|><|vision_end|>``.

    Returns:
        ``tokenizer``, changed.
    """
    from agentfly_train.chat_templates import chat_template

    tokenizer.add_special_tokens({"additional_special_tokens": list(VISION_TOKENS)})
    tokenizer.chat_template = chat_template(template)
    return tokenizer


def build_vl_image_processor(max_pixels: int = 128 * 28 * 28, patch_size: int = 14, **options: Any):
    """Qwen2-VL's image processor (its Pillow backend: no torchvision) with ``patch_size``-pixel patches merged
    2 x 2: with Qwen2.5-VL's 14-pixel patches a MiniWoB screen (160 x 210) becomes a 12 x 16 patch grid, 48 image
    tokens.

    Args:
        max_pixels: Largest image, in pixels; larger ones are scaled down (``agent.image_max_pixels``).
        patch_size: Side of a patch in pixels (the vision tower's).
        options: Other options of the processor (``image_mean``...).
    """
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    side = patch_size * 2
    return Qwen2VLImageProcessorPil(patch_size=patch_size, min_pixels=side * side, max_pixels=max_pixels, **options)


def build_qwen3_vl_image_processor(max_pixels: int = 128 * 32 * 32):
    """Qwen3-VL's image processor: :func:`build_vl_image_processor` with Qwen3-VL's 16-pixel patches (merged 2 x 2)
    and normalisation (mean and std 0.5), so a MiniWoB screen (160 x 210) becomes a 10 x 14 patch grid, 35 image
    tokens.

    Args:
        max_pixels: Largest image, in pixels; larger ones are scaled down (``agent.image_max_pixels``).
    """
    half = [0.5, 0.5, 0.5]
    return build_vl_image_processor(max_pixels, patch_size=16, image_mean=half, image_std=half)


def _vl_configs(tokenizer, hidden_size: int, num_layers: int, num_heads: int, initializer_range: float):
    """The parts of a tiny Qwen-VL configuration both architectures share: ``(text, vision, top, section)``, the
    keyword dicts of the text model (:func:`build_model`'s size), of a one-block vision tower of width 32 projecting
    into it and of the configuration itself (vision token ids), and the M-RoPE section (temporal, height, width
    frequencies of half a head)."""
    half_head = hidden_size // num_heads // 2
    section = [half_head - 2 * (half_head // 3), half_head // 3, half_head // 3]
    token = tokenizer.convert_tokens_to_ids
    text = {
        "vocab_size": len(tokenizer),
        "hidden_size": hidden_size,
        "intermediate_size": hidden_size * 2,
        "num_hidden_layers": num_layers,
        "num_attention_heads": num_heads,
        "num_key_value_heads": max(num_heads // 2, 1),
        "max_position_embeddings": 4096,
        "tie_word_embeddings": True,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
        "bos_token_id": None,
        "initializer_range": initializer_range,
    }
    vision = {
        "depth": 1,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_heads": 2,
        "out_hidden_size": hidden_size,
        "initializer_range": initializer_range,
    }
    top = {
        "image_token_id": token("<|image_pad|>"),
        "video_token_id": token("<|video_pad|>"),
        "vision_start_token_id": token("<|vision_start|>"),
        "vision_end_token_id": token("<|vision_end|>"),
        "tie_word_embeddings": True,
    }
    return text, vision, top, section


def _qwen2_5_vl(text: dict, vision: dict, top: dict, section: list[int]):
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    config = Qwen2_5_VLConfig(
        text_config={**text, "rope_scaling": {"type": "mrope", "mrope_section": section}},
        vision_config={**vision, "fullatt_block_indexes": [0]},
        **top,
    )
    return Qwen2_5_VLForConditionalGeneration(config)


def _qwen3_vl(text: dict, vision: dict, top: dict, section: list[int]):
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    rope = {"rope_type": "default", "rope_theta": 5_000_000.0, "mrope_section": section, "mrope_interleaved": True}
    config = Qwen3VLConfig(
        text_config={**text, "head_dim": text["hidden_size"] // text["num_attention_heads"], "rope_parameters": rope},
        vision_config={
            **vision,
            "patch_size": 16,
            "spatial_merge_size": 2,
            "num_position_embeddings": 64,  # an 8 x 8 grid of learned positions, interpolated to the image's
            "deepstack_visual_indexes": [0],
        },
        **top,
    )
    return Qwen3VLForConditionalGeneration(config)


VL_ARCHITECTURES = {"qwen2_5_vl": _qwen2_5_vl, "qwen3_vl": _qwen3_vl}
"""``architecture`` of :func:`build_vl_model` -> the model built from the shared configuration parts."""


def build_vl_model(
    tokenizer,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    seed: int = 0,
    initializer_range: float = 0.02,
    architecture: str = "qwen2_5_vl",
):
    """A randomly initialised vision-language model sized for CPU tests: the text model of :func:`build_model`'s
    size with M-RoPE, and a one-block vision tower of width 32 projecting into it. ``qwen2_5_vl``:
    ``Qwen2_5_VLForConditionalGeneration`` (14-pixel patches, 2 x 2 merge); ``qwen3_vl``:
    ``Qwen3VLForConditionalGeneration`` (interleaved M-RoPE; 16-pixel patches, 2 x 2 merge; the block's features
    also added to the first text layer's input: DeepStack).

    Args:
        tokenizer: A :func:`build_vl_tokenizer` tokenizer (vocabulary, special and vision token ids).
        hidden_size: Width of the text model's residual stream (a multiple of ``2 * num_heads * 8``).
        num_layers: Text transformer blocks.
        num_heads: Text attention heads (key/value heads are half as many).
        seed: Seed of the weight initialisation.
        initializer_range: Standard deviation of the initial weights (transformers' default, 0.02, is sized for
            wide models: at this width the screenshots barely move the logits, and learning to read them stalls;
            about ``1 / sqrt(hidden_size)`` lets a short warm start and RL learn from them).
        architecture: A key of :data:`VL_ARCHITECTURES`.

    Returns:
        The model, in float32, with ``generation_config`` stopping on ``<|im_end|>``.
    """
    import torch

    torch.manual_seed(seed)
    parts = _vl_configs(tokenizer, hidden_size, num_layers, num_heads, initializer_range)
    return _stopping_on_eos(VL_ARCHITECTURES[architecture](*parts), tokenizer)


TEXT_POLICY = TinyPolicy(build_tokenizer, build_model)
"""``agentfly:tiny``: the Qwen2-architecture text policy."""
VL_POLICY = TinyPolicy(build_vl_tokenizer, build_vl_model, build_vl_image_processor)
"""``agentfly:tiny-vl``: the Qwen2.5-VL-architecture policy."""
QWEN3_VL_POLICY = TinyPolicy(
    partial(build_vl_tokenizer, "qwen3_vl"),
    partial(build_vl_model, architecture="qwen3_vl"),
    build_qwen3_vl_image_processor,
)
"""``agentfly:tiny-qwen3-vl``: the Qwen3-VL-architecture policy."""
