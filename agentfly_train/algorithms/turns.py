"""The assistant turns of a batch of episodes (:class:`Turns`): where each turn's tokens are among a row's valid
tokens, its reward and its anchor state, for the estimators that credit turns and for per-turn rewards on tokens."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class Turns:
    """The turns of ``B`` episodes, in ``K`` turn slots per episode (the turn budget).

    Turn ``k`` of row ``b`` owns the row's valid tokens (mask 1) numbered ``N[b, k-1] + 1 .. N[b, k]`` in order, where
    ``N = tokens.cumsum(-1)``; tool/env tokens and padding belong to no turn. This holds for a row that is a whole
    completion and for a row of an episode's sampled tokens packed together
    (:func:`~agentfly_train.batch.episode_mask`) alike.

    Attributes:
        tokens: (B, K) int64, valid tokens of each turn; 0 for a slot past the episode's turns.
        rewards: (B, K) float, each turn's reward (the env's reward of its step); 0 past the episode's turns.
        anchors: (B, K) int64, each turn's anchor state: equal for turns sampled after the same context (a hash of
            its token ids).
        taken: (B, K) bool, the slots of turns the episode took.
    """

    tokens: Tensor
    rewards: Tensor
    anchors: Tensor
    taken: Tensor

    def __post_init__(self) -> None:
        shapes = {name: tuple(getattr(self, name).shape) for name in ("tokens", "rewards", "anchors", "taken")}
        if len(set(shapes.values())) != 1 or len(shapes["tokens"]) != 2:
            raise ValueError(f"Turns needs four (B, K) tensors of one shape; got {shapes}")

    def turn_of_tokens(self, mask: Tensor) -> Tensor:
        """(B, T) int64: the turn slot each valid token of ``mask`` (B, T) belongs to (clamped to K − 1 for valid
        tokens past the last turn's; arbitrary on masked tokens)."""
        ordinal = mask.long().cumsum(-1)  # (B, T): a valid token's number in its row, from 1
        ends = self.tokens.to(mask.device).cumsum(-1).contiguous()  # (B, K): N
        return torch.searchsorted(ends, ordinal.contiguous()).clamp(max=self.tokens.shape[1] - 1)

    def on_tokens(self, per_turn: Tensor, mask: Tensor) -> Tensor:
        """(B, T): each turn's value of ``per_turn`` (B, K) on its valid tokens of ``mask`` (B, T), 0 elsewhere."""
        values = per_turn.to(mask.device).gather(1, self.turn_of_tokens(mask))
        return values * mask.to(values.dtype)

    def sums(self, x: Tensor, mask: Tensor) -> Tensor:
        """(B, K) in ``x``'s dtype: the sum of ``x`` (B, T) over each turn's valid tokens of ``mask`` (B, T); 0 for a
        turn without one (and for the slots past the episode's turns)."""
        turn = self.turn_of_tokens(mask)
        sums = torch.zeros(self.tokens.shape, dtype=x.dtype, device=x.device)
        return sums.scatter_add_(1, turn, x * mask.to(x.dtype))

    def means(self, x: Tensor, mask: Tensor) -> Tensor:
        """(B, K) in ``x``'s dtype: the mean of ``x`` (B, T) over each turn's valid tokens of ``mask`` (B, T) (for an
        advantage that is one value per turn, that value); NaN for a turn without valid tokens."""
        count = self.tokens.to(x.device)
        return torch.where(count > 0, self.sums(x, mask) / count.clamp(min=1).to(x.dtype), torch.nan)

    def first_token_values(self, values: Tensor, mask: Tensor) -> Tensor:
        """(B, K): ``values`` (B, T) at each turn's first valid token of ``mask`` (B, T). A turn without valid tokens
        takes the value of the next valid token (the next turn's first); 0 where no valid token follows (past the
        episode's last turn)."""
        ordinal = mask.long().cumsum(-1).contiguous()  # (B, T)
        first = (self.tokens.to(mask.device).cumsum(-1) - self.tokens.to(mask.device) + 1).contiguous()  # (B, K)
        position = torch.searchsorted(ordinal, first).clamp(max=mask.shape[1] - 1)  # first position with that ordinal
        reached = first <= ordinal[:, -1:]
        return torch.where(reached, values.gather(1, position), 0.0)

    def token_rewards(self, mask: Tensor) -> Tensor:
        """(B, T) float32 (or the rewards' wider dtype): each turn's reward on its last valid token of ``mask`` (B, T),
        0 elsewhere. A turn without valid tokens puts its reward where the turn before it ended (position 0 for
        the first), so the rewards of every row sum to its episode's return, over all T positions.

        Example:
            >>> turns = Turns(torch.tensor([[2, 1]]), torch.tensor([[0.5, 1.0]]), torch.zeros(1, 2, dtype=torch.long),
            ...               torch.ones(1, 2, dtype=torch.bool))
            >>> turns.token_rewards(torch.tensor([[1, 1, 0, 0, 1, 0]]))
            tensor([[0.0000, 0.5000, 0.0000, 0.0000, 1.0000, 0.0000]])
        """
        ordinal = mask.long().cumsum(-1).contiguous()  # (B, T)
        ends = self.tokens.to(mask.device).cumsum(-1).contiguous()  # (B, K)
        last = torch.searchsorted(ordinal, ends).clamp(max=mask.shape[1] - 1)  # (B, K): first position with N_k tokens
        dtype = torch.promote_types(self.rewards.dtype, torch.float32)
        rewards = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
        return rewards.scatter_add_(1, last, self.rewards.to(rewards))
