"""Images in a vision-language policy's token sequence: the placeholder tokens each image takes, the model inputs of
a batch's images, and the cap on images per episode.

A chat template writes one image token (``<|image_pad|>`` for Qwen2.5-VL) where a message holds an image part
(``{"type": "image", "image": PIL.Image.Image}``, as screenshot observations carry them); the image processor says
how many tokens the image fills (its patch grid, merged), and :meth:`ImageInputs.expand` repeats the token that
many times, as the model's processor does. Those tokens belong to observations and prompts (``env_mask = 0``): the
model is never trained to write them.

Images per episode are capped (``agent.max_images``) where the observation arrives: an image beyond the cap is
replaced by :data:`IMAGE_PLACEHOLDER` text before the observation is tokenised, so the tokens the policy sampled
after it and the tokens trained are the same sequence. Earlier images stay: dropping one from the context later
would change the prefix the earlier turns were sampled on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

IMAGE_PLACEHOLDER = "[screenshot not shown: agent.max_images reached]"
"""The text that stands for an image beyond ``agent.max_images`` in an observation."""


def message_images(messages: Sequence[Mapping[str, Any]]) -> list[Any]:
    """The images of ``messages``' content parts, in order (PIL images)."""
    return [
        part["image"]
        for message in messages
        if not isinstance(message.get("content"), str | None)
        for part in message["content"]
        if part.get("type") == "image"
    ]


def cap_images(messages: Sequence[Mapping[str, Any]], room: int | None) -> list[Mapping[str, Any]]:
    """``messages`` with the image parts after the first ``room`` replaced by :data:`IMAGE_PLACEHOLDER` text parts
    (``None``: no cap); messages without an image beyond the cap are returned as they are.

    Example:
        >>> shown = cap_images([{"role": "tool", "content": [{"type": "image", "image": 1}, {"type": "text",
        ...                      "text": "Clicked."}]}], room=0)
        >>> shown[0]["content"][0]["text"]
        '[screenshot not shown: agent.max_images reached]'
    """
    if room is None:
        return list(messages)
    out: list[Mapping[str, Any]] = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, str | None):
            out.append(message)
            continue
        parts = []
        for part in content:
            if part.get("type") == "image":
                if room <= 0:
                    part = {"type": "text", "text": IMAGE_PLACEHOLDER}
                room -= 1
            parts.append(part)
        out.append({**message, "content": parts})
    return out


@dataclass(frozen=True)
class ImageInputs:
    """What a vision-language policy's images become: placeholder tokens in the sequence and pixel inputs.

    Attributes:
        image_processor: The model's image processor (Qwen2-VL's: ``merge_size``, patches with ``image_grid_thw``).
        image_token_id: The token the chat template writes for an image, repeated once per merged patch.
    """

    image_processor: Any
    image_token_id: int

    @classmethod
    def from_tokenizer(cls, image_processor: Any, tokenizer: Any, image_token: str = "<|image_pad|>") -> ImageInputs:
        """Inputs whose image token is the tokenizer's ``image_token``.

        Raises:
            ValueError: the tokenizer has no such token.
        """
        token_id = tokenizer.convert_tokens_to_ids(image_token)
        if token_id is None or token_id == tokenizer.unk_token_id:
            raise ValueError(f"the tokenizer has no image token {image_token!r}")
        return cls(image_processor, token_id)

    def tokens_per_image(self, image: Any) -> int:
        """Placeholder tokens ``image`` (a PIL image) fills: its patches at the size the processor resizes it to,
        over ``merge_size ** 2``."""
        width, height = image.size
        return self.image_processor.get_number_of_image_patches(height, width) // self.image_processor.merge_size**2

    def expand(self, ids: Sequence[int], images: Sequence[Any]) -> list[int]:
        """``ids`` with the ``i``-th image token repeated :meth:`tokens_per_image` of ``images[i]`` times.

        Raises:
            ValueError: the ids hold another number of image tokens than there are images.
        """
        count = sum(token == self.image_token_id for token in ids)
        if count != len(images):
            raise ValueError(f"the chat template wrote {count} image token(s) for {len(images)} image(s)")
        pending = iter(images)
        out: list[int] = []
        for token in ids:
            out.extend([token] * self.tokens_per_image(next(pending)) if token == self.image_token_id else [token])
        return out

    def pixel_inputs(self, images: Sequence[Sequence[Any]], device: Any = "cpu") -> dict[str, Any]:
        """The model inputs of each sequence's images, for a batch (TRL's ragged layout).

        Args:
            images: Per sequence, its images in order (an empty list for a sequence without).
            device: Where the tensors go.

        Returns:
            ``{}`` when no sequence has an image; else ``pixel_values`` ((sum of patches, C * t * p * p) float),
            ``image_grid_thw`` ((images, 3) long) and ``num_images`` (per sequence, a list of ints).
        """
        flat = [image for row in images for image in row]
        if not flat:
            return {}
        processed = self.image_processor(images=flat, return_tensors="pt")
        return {
            "pixel_values": processed["pixel_values"].to(device),
            "image_grid_thw": processed["image_grid_thw"].to(device),
            "num_images": [len(row) for row in images],
        }

    def token_types(self, input_ids: Tensor) -> Tensor:
        """(B, L) int: 1 on image tokens, 0 elsewhere (``mm_token_type_ids``, from which the model computes its
        M-RoPE positions)."""
        return (input_ids == self.image_token_id).to(torch.int)
