"""Images in a vision-language policy's token sequence: the placeholder tokens each image takes, the model inputs of
a batch's images, and the cap on images per episode.

A chat template writes one image token (``<|image_pad|>`` for Qwen2.5-VL) where a message holds an image part
(``{"type": "image", "image": PIL.Image.Image}``, as screenshot observations carry them); the image processor says
how many tokens the image fills (its patch grid, merged), and :meth:`ImageInputs.expand` repeats the token that
many times, as the model's processor does. Those tokens belong to observations and prompts (``env_mask = 0``): the
model is never trained to write them.

Images per episode are capped (``agent.max_images``): when an observation brings the episode's context past the cap,
the oldest images in it are replaced by :data:`IMAGE_PLACEHOLDER` text (:meth:`ImageInputs.drop_oldest`), so the
policy always sees the newest screenshots. The context is then no longer the episode's growing sequence, so each
turn is trained as its own row, in the context (tokens and images) it was sampled in
(:func:`~agentfly_train.rollout.training_rows`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

IMAGE_PLACEHOLDER = "[earlier screenshot dropped: agent.max_images]"
"""The text that stands, in an episode's context, for a screenshot older than the newest ``agent.max_images``."""


def message_images(messages: Sequence[Mapping[str, Any]]) -> list[Any]:
    """The images of ``messages``' content parts, in order (PIL images)."""
    return [
        part["image"]
        for message in messages
        if not isinstance(message.get("content"), str | None)
        for part in message["content"]
        if part.get("type") == "image"
    ]


@dataclass(frozen=True)
class ImageInputs:
    """What a vision-language policy's images become: placeholder tokens in the sequence and pixel inputs.

    Attributes:
        image_processor: The model's image processor (Qwen2-VL's: ``merge_size``, patches with ``image_grid_thw``).
        image_token_id: The token the chat template writes for an image, repeated once per merged patch.
        marker_ids: The tokens the chat template writes right before and after an image's tokens
            (``<|vision_start|>``, ``<|vision_end|>``), or ``None``: they go with the image when it is dropped.
    """

    image_processor: Any
    image_token_id: int
    marker_ids: tuple[int | None, int | None] = (None, None)

    @classmethod
    def from_tokenizer(
        cls,
        image_processor: Any,
        tokenizer: Any,
        image_token: str = "<|image_pad|>",
        markers: tuple[str, str] = ("<|vision_start|>", "<|vision_end|>"),
    ) -> ImageInputs:
        """Inputs whose image token is the tokenizer's ``image_token``, between its ``markers`` (those it has).

        Raises:
            ValueError: the tokenizer has no such image token.
        """

        def token_id(token: str) -> int | None:
            found = tokenizer.convert_tokens_to_ids(token)
            return None if found is None or found == tokenizer.unk_token_id else found

        image = token_id(image_token)
        if image is None:
            raise ValueError(f"the tokenizer has no image token {image_token!r}")
        return cls(image_processor, image, (token_id(markers[0]), token_id(markers[1])))

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

    def spans(self, ids: Sequence[int], images: Sequence[Any]) -> list[tuple[int, int]]:
        """Per image of ``images`` (the first images of ``ids``, in order), where its tokens are in ``ids``:
        ``(start, end)`` around its run of placeholder tokens and the markers right before and after it (example:
        :meth:`drop_oldest`)."""
        before, after = self.marker_ids
        ids = list(ids)
        spans, position = [], 0
        for image in images:
            start = ids.index(self.image_token_id, position)
            end = start + self.tokens_per_image(image)
            start -= int(before is not None and start > 0 and ids[start - 1] == before)
            end += int(after is not None and end < len(ids) and ids[end] == after)
            spans.append((start, end))
            position = end
        return spans

    def drop_oldest(
        self, ids: Sequence[int], images: Sequence[Any], keep: int, placeholder_ids: Sequence[int]
    ) -> tuple[list[int], list[Any]]:
        """``ids`` with the tokens of each image but the newest ``keep`` (:meth:`spans`) replaced by
        ``placeholder_ids`` (:data:`IMAGE_PLACEHOLDER`'s tokens), and the images left.

        Example:
            >>> from PIL import Image
            >>> class OnePatchPerPixel:  # an image fills width x height tokens
            ...     merge_size = 1
            ...     def get_number_of_image_patches(self, height, width): return height * width
            >>> inputs = ImageInputs(OnePatchPerPixel(), image_token_id=9, marker_ids=(7, 8))
            >>> shots = [Image.new("RGB", (2, 1)), Image.new("RGB", (1, 1))]
            >>> inputs.spans([1, 7, 9, 9, 8, 2, 7, 9, 8], shots)
            [(1, 5), (6, 9)]
            >>> ids, kept = inputs.drop_oldest([1, 7, 9, 9, 8, 2, 7, 9, 8], shots, keep=1, placeholder_ids=[5])
            >>> ids, kept == shots[1:]
            ([1, 5, 2, 7, 9, 8], True)
        """
        dropped = max(len(images) - keep, 0)
        out: list[int] = []
        position = 0
        for start, end in self.spans(ids, images[:dropped]):
            out += [*ids[position:start], *placeholder_ids]
            position = end
        return [*out, *ids[position:]], list(images[dropped:])

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
