"""``AgentGRPOTrainer``: TRL's ``GRPOTrainer`` trained on multi-turn agent rollouts, with verl's algorithms.

:mod:`~agentfly_train.trainer.grpo` holds the class (TRL's hooks and the loss wiring); its rollouts, extra forward
passes and checkpoints are in :mod:`~agentfly_train.trainer.rollouts`, :mod:`~agentfly_train.trainer.forwards` and
:mod:`~agentfly_train.trainer.checkpointing`.
"""

from agentfly_train.trainer.grpo import AgentGRPOTrainer, env_reward

__all__ = ["AgentGRPOTrainer", "env_reward"]
