"""A tiny Qwen2-architecture model and a locally trained tokenizer, for offline runs and tests, and a tiny
Qwen2.5-VL-architecture vision-language model beside it.

Nothing is downloaded: the byte-level BPE tokenizer is trained on text this module generates
(arithmetic word problems rendered as tool-calling chats) and splits digits as Qwen2's does; its
chat template is ``compact_tools`` (Qwen2.5's ChatML and Hermes ``<tool_call>`` format with a
one-line-per-tool listing, so prompts stay short on CPU), with TRL's response template for parsing
tool calls; the model is built from a config with random weights.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

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

    env = gym.make("agentfly/Arith-Calc", level="hard", max_turns=8)
    for index in range(num_problems):
        _, info = env.reset(options={"index": index})
        yield from (m["content"] for m in info["messages"])
        for action in env.unwrapped.golden_actions():
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
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


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


def build_vl_tokenizer(**kwargs):
    """:func:`build_tokenizer` (``kwargs``) made a vision-language one (:func:`add_vision_tokens`)."""
    return add_vision_tokens(build_tokenizer(**kwargs))


def add_vision_tokens(tokenizer):
    """Adds Qwen2.5-VL's vision tokens to a :func:`build_tokenizer` tokenizer and gives it our ``qwen2_5_vl`` chat
    template, which writes a message's image part as ``<|vision_start|><|image_pad|><|vision_end|>``.

    Returns:
        ``tokenizer``, changed.
    """
    from agentfly_train.chat_templates import chat_template

    tokenizer.add_special_tokens({"additional_special_tokens": list(VISION_TOKENS)})
    tokenizer.chat_template = chat_template("qwen2_5_vl")
    return tokenizer


def build_vl_image_processor(max_pixels: int = 128 * 28 * 28):
    """Qwen2-VL's image processor (its Pillow backend: no torchvision) with 14-pixel patches merged 2 x 2, so a
    MiniWoB screen (160 x 210) becomes a 12 x 16 patch grid, 48 image tokens.

    Args:
        max_pixels: Largest image, in pixels; larger ones are scaled down (``agent.image_max_pixels``).
    """
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    return Qwen2VLImageProcessorPil(min_pixels=28 * 28, max_pixels=max_pixels)


def build_vl_model(
    tokenizer,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    seed: int = 0,
    initializer_range: float = 0.02,
):
    """A randomly initialised ``Qwen2_5_VLForConditionalGeneration`` sized for CPU tests: the text model of
    :func:`build_model`'s size with M-RoPE, and a one-block vision tower of width 32 (14-pixel patches, 2 x 2
    merge) projecting into it.

    Args:
        tokenizer: A :func:`build_vl_tokenizer` tokenizer (vocabulary, special and vision token ids).
        hidden_size: Width of the text model's residual stream (a multiple of ``2 * num_heads * 8``).
        num_layers: Text transformer blocks.
        num_heads: Text attention heads (key/value heads are half as many).
        seed: Seed of the weight initialisation.
        initializer_range: Standard deviation of the initial weights (transformers' default, 0.02, is sized for
            wide models: at this width the screenshots barely move the logits, and learning to read them stalls;
            about ``1 / sqrt(hidden_size)`` lets a short warm start and RL learn from them).

    Returns:
        The model, in float32, with ``generation_config`` stopping on ``<|im_end|>``.
    """
    import torch
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    torch.manual_seed(seed)
    half_head = hidden_size // num_heads // 2
    section = [half_head - 2 * (half_head // 3), half_head // 3, half_head // 3]  # temporal, height, width
    token = tokenizer.convert_tokens_to_ids
    config = Qwen2_5_VLConfig(
        text_config={
            "vocab_size": len(tokenizer),
            "hidden_size": hidden_size,
            "intermediate_size": hidden_size * 2,
            "num_hidden_layers": num_layers,
            "num_attention_heads": num_heads,
            "num_key_value_heads": max(num_heads // 2, 1),
            "max_position_embeddings": 4096,
            "rope_scaling": {"type": "mrope", "mrope_section": section},
            "tie_word_embeddings": True,
            "eos_token_id": tokenizer.eos_token_id,
            "pad_token_id": tokenizer.pad_token_id,
            "bos_token_id": None,
            "initializer_range": initializer_range,
        },
        vision_config={
            "depth": 1,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 2,
            "out_hidden_size": hidden_size,
            "fullatt_block_indexes": [0],
            "initializer_range": initializer_range,
        },
        image_token_id=token("<|image_pad|>"),
        video_token_id=token("<|video_pad|>"),
        vision_start_token_id=token("<|vision_start|>"),
        vision_end_token_id=token("<|vision_end|>"),
        tie_word_embeddings=True,
    )
    model = Qwen2_5_VLForConditionalGeneration(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model
