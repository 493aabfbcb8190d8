"""Multi-turn, token-in/token-out rollouts of a policy over agentfly environments.

:class:`AgentRollout` drives a run's episodes with two loops over the same per-episode logic
(:mod:`~agentfly_train.rollout.episode`): the turn-synchronous :func:`run_rollouts` (one batched generation call
per turn, any backend) and :func:`run_rollouts_async` (each episode at its own pace over a backend that streams
requests: vLLM).
"""

from agentfly_train.rollout.agent import AgentRollout, trajectory_record
from agentfly_train.rollout.asynchronous import run_rollouts_async
from agentfly_train.rollout.codec import ChatCodec, TemplateError
from agentfly_train.rollout.episode import (
    FINISH_REASONS,
    EngineTime,
    InfrastructureFailureRate,
    RolloutBudgets,
    Trajectory,
    TurnSpan,
    failure_notes,
    row_images,
    summarize,
    training_rows,
)
from agentfly_train.rollout.judging import JudgeRewards
from agentfly_train.rollout.sync import run_rollouts
from agentfly_train.rollout.turn_table import TurnTable, context_key, turn_table

__all__ = [
    "FINISH_REASONS",
    "AgentRollout",
    "ChatCodec",
    "EngineTime",
    "InfrastructureFailureRate",
    "JudgeRewards",
    "RolloutBudgets",
    "TemplateError",
    "Trajectory",
    "TurnSpan",
    "TurnTable",
    "context_key",
    "failure_notes",
    "row_images",
    "run_rollouts",
    "run_rollouts_async",
    "summarize",
    "training_rows",
    "trajectory_record",
    "turn_table",
]
