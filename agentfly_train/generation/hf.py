"""The Hugging Face ``generate`` backend (CPU and GPU)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import torch

from agentfly_train.generation.base import Generation, GenerationBackend, Policy, SamplingParams

if TYPE_CHECKING:
    from agentfly_train.config.schema import TrainConfig
    from agentfly_train.vision import ImageInputs


class _SampledLogprobRecorder:
    """A logits processor keeping the log-probability of each sampled token in bounded memory.

    ``generate`` calls processors with the ids so far, whose last column is the token sampled from the
    previous step's distribution, so only one step's ``[batch, vocab]`` log-probabilities are held.
    """

    def __init__(self, temperature: float, prompt_length: int) -> None:
        self.temperature = temperature
        self.prompt_length = prompt_length
        self.previous: torch.Tensor | None = None
        self.logprobs: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if input_ids.shape[1] > self.prompt_length:
            self._take(input_ids[:, -1])
        self.previous = torch.log_softmax(scores.float() / self.temperature, dim=-1)
        return scores

    def _take(self, tokens: torch.Tensor) -> None:
        self.logprobs.append(self.previous.gather(1, tokens[:, None]).squeeze(1))

    def finish(self, sequences: torch.Tensor) -> torch.Tensor:
        """``[batch, new_tokens]`` log-probabilities of the sampled tokens."""
        if sequences.shape[1] > self.prompt_length + len(self.logprobs):
            self._take(sequences[:, -1])
        return torch.stack(self.logprobs, dim=1)


class HFGenerationBackend(GenerationBackend):
    """Batched sampling with ``transformers``' ``generate``, from the policy model itself (``rollout.name=hf``).

    Args:
        model_context: Returns a context manager that yields the model to generate with (e.g. TRL's
            ``unwrap_model_for_generation`` under Accelerate); the model is put in eval mode inside it
            and its previous mode restored after.
        pad_token_id: Left-padding token.
        eos_token_ids: Tokens that end a turn.
        device: Where the inputs go.
        images: A vision-language policy's image inputs (``None``: a text policy, which samples no images).
    """

    supports_images = True

    def __init__(
        self,
        model_context: Callable[[], contextlib.AbstractContextManager[Any]],
        pad_token_id: int,
        eos_token_ids: Sequence[int],
        device: torch.device | str = "cpu",
        images: ImageInputs | None = None,
    ) -> None:
        self.model_context = model_context
        self.pad_token_id = pad_token_id
        self.eos_token_ids = list(eos_token_ids)
        self.device = torch.device(device)
        self.images = images

    @classmethod
    def build(cls, config: TrainConfig, policy: Policy) -> HFGenerationBackend:
        """See :meth:`GenerationBackend.build` (the backend has no keys of its own: :meth:`from_policy`)."""
        return cls.from_policy(policy)

    @classmethod
    def from_policy(cls, policy: Policy) -> HFGenerationBackend:
        """A backend sampling from ``policy.sampling_model``."""
        tokenizer = policy.tokenizer
        return cls(policy.sampling_model, tokenizer.pad_token_id, policy.eos_token_ids, policy.device, policy.images)

    @classmethod
    def for_model(cls, model: Any, pad_token_id: int, eos_token_ids: Sequence[int]) -> HFGenerationBackend:
        """A backend over a plain (unwrapped) model."""
        return cls(lambda: contextlib.nullcontext(model), pad_token_id, eos_token_ids, model.device)

    @contextlib.contextmanager
    def _eval_model(self) -> Iterator[Any]:
        with self.model_context() as model:
            was_training = model.training
            model.eval()
            try:
                yield model
            finally:
                model.train(was_training)

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: Sequence[int],
        params: SamplingParams,
        images: Sequence[Sequence[Any]] | None = None,
    ) -> list[Generation]:
        """See :meth:`GenerationBackend.generate` (images go in as the policy's pixel inputs and image token types,
        from which a Qwen2.5-VL model computes its M-RoPE positions)."""
        if not prompts:
            return []
        width = max(map(len, prompts))
        input_ids = torch.full((len(prompts), width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, ids in enumerate(prompts):
            input_ids[row, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
            attention_mask[row, width - len(ids) :] = 1
        greedy = params.temperature == 0
        recorder = _SampledLogprobRecorder(1.0 if greedy else params.temperature, width)
        sampling: dict[str, Any] = (
            {"do_sample": False}
            if greedy
            else {
                "do_sample": True,
                "temperature": params.temperature,
                "top_p": params.top_p,
                "top_k": params.top_k if params.top_k > 0 else 0,
            }
        )
        # The image token only stands for an image's patches: the policy never writes one (a sampled one would have
        # no image). Its log-probabilities are then those of the distribution without it (the gap is its mass).
        pixels: dict[str, Any] = {} if self.images is None else {"suppress_tokens": [self.images.image_token_id]}
        if images and any(images):
            if self.images is None:
                raise ValueError("prompts hold images but the policy has no image inputs (a text policy)")
            pixels.update(self.images.pixel_inputs(images, self.device))
            pixels.pop("num_images")  # generate takes the batch's images in row order
            pixels["mm_token_type_ids"] = self.images.token_types(input_ids).to(self.device)
        with self._eval_model() as model, torch.no_grad():
            sequences = model.generate(
                input_ids=input_ids.to(self.device),
                attention_mask=attention_mask.to(self.device),
                **pixels,
                max_new_tokens=max(max_new_tokens),
                eos_token_id=self.eos_token_ids,
                pad_token_id=self.pad_token_id,
                logits_processor=[recorder],
                synced_gpus=False,  # each process samples alone (an FSDP2 policy is unsharded for the rollout)
                **sampling,
            )
        new_tokens = sequences[:, width:].cpu()
        logprobs = recorder.finish(sequences).cpu()
        return [self._cut(new_tokens[row], logprobs[row], budget) for row, budget in enumerate(max_new_tokens)]

    def _cut(self, tokens: torch.Tensor, logprobs: torch.Tensor, budget: int) -> Generation:
        ids = tokens[:budget].tolist()
        end = next((i for i, token in enumerate(ids) if token in self.eos_token_ids), None)
        if end is not None:
            ids = ids[: end + 1]
        return Generation(token_ids=ids, logprobs=logprobs[: len(ids)].tolist(), stopped=end is not None)
