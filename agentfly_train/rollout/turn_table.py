"""The turns of a batch of episodes as the trainer credits them: each turn's trained tokens, reward and anchor state
(the context it was sampled after, as a digest), one row per episode and one slot per turn of the budget."""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

from agentfly_train.rollout.episode import Trajectory


@dataclass(frozen=True)
class TurnTable:
    """The turns of a batch of episodes as lists, ``width`` slots per episode (what
    :class:`~agentfly_train.algorithms.Turns` holds as tensors).

    Attributes:
        tokens: Per episode and slot, the turn's trained tokens (``env_mask = 1``; 0 for an excluded episode, whose
            rows train nothing, and for slots past its turns).
        rewards: Per episode and slot, the turn's reward (:attr:`Trajectory.turn_rewards`; 0 past its turns).
        anchors: Per episode and slot, the turn's anchor state, :func:`context_key` of its context (0 past its turns,
            and everywhere in a table made without anchors).
        taken: Per episode and slot, whether the episode took that turn.
    """

    tokens: list[list[int]]
    rewards: list[list[float]]
    anchors: list[list[int]]
    taken: list[list[bool]]


def context_key(context: Sequence[int]) -> int:
    """A signed 64-bit digest of a turn's context token ids: equal for equal contexts, and the same on every
    process (unlike ``hash``, which salts strings; BLAKE2b of the ids as 64-bit integers)."""
    digest = hashlib.blake2b(array("q", context).tobytes(), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


def turn_table(trajectories: Sequence[Trajectory], width: int, anchors: bool = True) -> TurnTable:
    """The turns of ``trajectories`` in ``width`` slots each (the turn budget; turns past it are left out), with
    their anchor states where ``anchors`` (hashing every turn's context costs time in long episodes: only an
    estimator that reads anchor states, ``gigpo``, asks for them)."""
    table = TurnTable([], [], [], [])
    for t in trajectories:
        spans, pad = t.turn_spans[:width], [0] * (width - min(len(t.turn_spans), width))
        table.tokens.append([0 if t.excluded else sum(t.env_mask[s.start : s.end]) for s in spans] + pad)
        table.rewards.append([*t.turn_rewards[:width], *[0.0] * (width - len(t.turn_rewards[:width]))])
        table.anchors.append([context_key(span.context) if anchors else 0 for span in spans] + pad)
        table.taken.append([True] * len(spans) + [False] * len(pad))
    return table
