"""Advantage estimators: the registry, the estimators themselves, and :func:`compute_advantage`.

Each estimator takes the ``(B, T)`` token rewards and mask and returns ``(advantages, returns)``, both 0 on
masked tokens; its registry entry (:class:`AdvantageEstimator`) also says what the trainer must provide and checks
the configuration the estimator needs (:meth:`AdvantageEstimator.check`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from agentfly_envs.registry import Registry
from agentfly_train.algorithms.common import (
    Fn,
    _check_shape,
    _discounted_valid_sum,
    _masked_whiten,
    _next_valid,
)
from agentfly_train.algorithms.turns import Turns
from agentfly_train.config.errors import ConfigError

if TYPE_CHECKING:
    from agentfly_train.config.schema import TrainConfig


@dataclass(frozen=True)
class AdvantageEstimator:
    """A registered advantage estimator.

    ``fn(token_level_rewards, mask, **inputs) -> (advantages, returns)`` takes the ``(B, T)`` rewards and
    the ``(B, T)`` 0/1 mask (in the rewards' dtype) positionally and returns two ``(B, T)`` tensors that are 0
    wherever the mask is. ``inputs`` names its keyword-only parameters, drawn from :data:`ESTIMATOR_INPUTS`,
    which :func:`compute_advantage` passes in. What the trainer must provide follows from them (a critic for
    ``values``, greedy rollouts for ``reward_baselines``); ``compares_responses`` says the estimator learns nothing
    from a group of one response per prompt (``agent.num_chains >= 2``), ``reads_anchors`` that it reads the anchor
    states of its ``turns`` (the rollout hashes every turn's context only then).
    """

    fn: Callable[..., tuple[Tensor, Tensor]]
    inputs: tuple[str, ...]
    compares_responses: bool = False
    reads_anchors: bool = False

    @property
    def trains_critic(self) -> bool:
        """It takes a critic's ``values``: the trainer builds and trains a value model."""
        return "values" in self.inputs

    @property
    def needs_greedy_baseline(self) -> bool:
        """It takes ``reward_baselines``: the trainer rolls out a greedy response per prompt (ReMax)."""
        return "reward_baselines" in self.inputs

    def check(self, config: TrainConfig) -> None:
        """Checks what this estimator asks of the rest of the configuration (``config`` is all of it): two or more
        responses per prompt when it compares them, advantages of whole responses when each turn is its own row, a
        greedy episode per group that asynchronous training does not keep, and a critic's ``critic.*`` and
        ``trainer.critic_warmup`` (a critic does not see images).

        Raises:
            ConfigError: naming the key, the bad value and what would be valid.
        """
        agent, algorithm, name = config.agent, config.algorithm, config.algorithm.adv_estimator
        if self.trains_critic and agent.sees_images:
            raise ConfigError(
                f"algorithm.adv_estimator={name} trains a critic, which does not see the "
                "screenshots (agent.env_kwargs.obs=screenshot); use an estimator without one (grpo, rloo, "
                "reinforce_plus_plus)"
            )
        if self.compares_responses and agent.num_chains < 2:
            alone = ", ".join(other for other, entry in ADVANTAGE_ESTIMATORS.items() if not entry.compares_responses)
            raise ConfigError(
                f"algorithm.adv_estimator={name} compares the responses to one prompt: set "
                f"agent.num_chains >= 2, or use an estimator that needs no group ({alone})"
            )
        if agent.trains_turn_rows and (not self.compares_responses or algorithm.use_kl_in_reward):
            whole = ", ".join(other for other, entry in ADVANTAGE_ESTIMATORS.items() if entry.compares_responses)
            raise ConfigError(
                f"{agent.turn_rows_setting} trains each turn as its own sample, which needs an estimator that "
                f"compares whole responses ({whole}) and algorithm.use_kl_in_reward=false; got "
                f"adv_estimator={name}, use_kl_in_reward={algorithm.use_kl_in_reward}"
            )
        if self.needs_greedy_baseline and config.async_training.enable:
            raise ConfigError(
                f"algorithm.adv_estimator={name} needs a greedy episode of the policy that "
                "sampled each group, which async_training.enable=true does not keep; use grpo, rloo or "
                "reinforce_plus_plus"
            )
        for key, value, default, needs in (
            ("algorithm.gigpo.*", algorithm.gigpo, type(algorithm.gigpo)(), "omega"),
            ("algorithm.turn_gamma", algorithm.turn_gamma, type(algorithm)().turn_gamma, "turn_gamma"),
        ):
            if needs not in self.inputs and value != default:
                users = ", ".join(other for other, entry in ADVANTAGE_ESTIMATORS.items() if needs in entry.inputs)
                raise ConfigError(
                    f"{key} is used by algorithm.adv_estimator={users} only; got adv_estimator={name}: leave it at "
                    "its default or pick one of those"
                )
        if self.trains_critic:
            _check_critic(config)
        elif config.trainer.critic_warmup:
            critics = ", ".join(other for other, entry in ADVANTAGE_ESTIMATORS.items() if entry.trains_critic)
            raise ConfigError(
                f"trainer.critic_warmup warms up PPO's critic; only algorithm.adv_estimator={critics} has one"
            )


def _check_critic(config: TrainConfig) -> None:
    """``critic.*`` for an estimator that trains a critic: its mini-batches divide the rollout batch, and its
    learning rate is constant (the ranges of ``critic.*`` are its fields' own constraints, checked for every run)."""
    critic = config.critic
    if config.data.train_batch_size % (critic.ppo_mini_batch_size or config.data.train_batch_size):
        raise ConfigError(
            f"data.train_batch_size={config.data.train_batch_size} must be a multiple of "
            f"critic.ppo_mini_batch_size={critic.ppo_mini_batch_size}"
        )
    if critic.optim.lr_scheduler_type != "constant" or critic.optim.lr_warmup_steps_ratio:
        raise ConfigError(
            "the critic's learning rate is constant: leave critic.optim.lr_scheduler_type and "
            "critic.optim.lr_warmup_steps_ratio at their defaults"
        )


ESTIMATOR_INPUTS = (
    "group",
    "values",
    "reward_baselines",
    "turns",
    "gamma",
    "lam",
    "norm_adv_by_std_in_grpo",
    "epsilon",
    "omega",
    "turn_gamma",
)
"""What an estimator may ask for. ``group`` is ``compute_advantage``'s ``index`` as ``(B,)`` int64 ids 0..G-1;
``turns`` the batch's :class:`~agentfly_train.algorithms.turns.Turns`."""

ADVANTAGE_ESTIMATORS: Registry[AdvantageEstimator] = Registry(
    "advantage estimator", where="agentfly_train/algorithms/estimators.py", how="@register_advantage_estimator(name)"
)
"""Estimator name (``algorithm.adv_estimator``) -> estimator."""


def register_advantage_estimator(
    name: str, *, compares_responses: bool = False, reads_anchors: bool = False
) -> Callable[[Fn], Fn]:
    """Decorator that files an estimator under ``name``; its keyword-only parameters say what it needs,
    ``compares_responses`` that it needs two or more responses per prompt, ``reads_anchors`` that it reads
    ``turns.anchors`` (:class:`AdvantageEstimator`).

    Raises:
        ValueError: ``name`` is taken, or the function asks for an input not in :data:`ESTIMATOR_INPUTS`.
    """

    def decorator(fn: Fn) -> Fn:
        params = inspect.signature(fn).parameters.values()
        inputs = tuple(p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY)
        unknown = sorted(set(inputs) - set(ESTIMATOR_INPUTS))
        if unknown:
            raise ValueError(f"estimator {name!r} asks for {unknown}; estimators can take {ESTIMATOR_INPUTS}.")
        ADVANTAGE_ESTIMATORS.add(name, AdvantageEstimator(fn, inputs, compares_responses, reads_anchors))
        return fn

    return decorator


def get_advantage_estimator(name: str) -> AdvantageEstimator:
    """The estimator registered as ``name``; raises ``UnknownNameError`` naming the closest known one."""
    return ADVANTAGE_ESTIMATORS.get(name)


# ---------------------------------------------------------------------------------------------------------------------
# Groups of responses to one prompt (``index``): vectorised per-group statistics.
# ---------------------------------------------------------------------------------------------------------------------


def _group_ids(index: Sequence[Hashable] | Tensor, batch_size: int, device: torch.device) -> Tensor:
    """(B,) int64 ids 0..G-1, equal for rows with equal labels; labels are any hashables or a 1-D tensor."""
    if isinstance(index, Tensor):
        ids = torch.unique(index.reshape(-1), return_inverse=True)[1]
    else:
        first_seen: dict[Hashable, int] = {}
        ids = torch.tensor([first_seen.setdefault(label, len(first_seen)) for label in index], dtype=torch.long)
    if ids.numel() != batch_size:
        raise ValueError(f"index has {ids.numel()} group labels for a batch of {batch_size} rows; give one per row.")
    return ids.to(device)


def _group_sum(x: Tensor, group: Tensor) -> Tensor:
    """(G,) sums of ``x`` (B,) within each group."""
    return torch.zeros(int(group.max()) + 1, dtype=x.dtype, device=x.device).index_add_(0, group, x)


def _per_row(per_group: Tensor, group: Tensor) -> Tensor:
    """(B,) each row's entry of a (G,) per-group tensor."""
    return per_group.index_select(0, group)


def _group_reduce(x: Tensor, group: Tensor, reduce: str) -> Tensor:
    """(B,) for each row, the ``reduce`` ("amax" or "amin") of ``x`` (B,) over the row's group."""
    per_group = torch.empty(int(group.max()) + 1, dtype=x.dtype, device=x.device)
    return _per_row(per_group.scatter_reduce_(0, group, x, reduce, include_self=False), group)


def _group_mean_std(scores: Tensor, group: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Per row: mean, unbiased std and size of its group, float64 (B,) each. A group of one: mean 0, std 1."""
    s = scores.double()
    size = torch.bincount(group).to(s.dtype)  # (G,)
    mean = _group_sum(s, group) / size
    std = (_group_sum((s - _per_row(mean, group)).square(), group) / (size - 1).clamp(min=1)).sqrt()
    single = size == 1
    mean, std = mean.masked_fill(single, 0.0), std.masked_fill(single, 1.0)
    return _per_row(mean, group), _per_row(std, group), _per_row(size, group)


def _outcome_scores(token_level_rewards: Tensor) -> Tensor:
    """(B,) one score per response: the sum of its token rewards over all T positions, masked ones included.

    Counting masked positions (as verl does) keeps the reward of an empty response, which has no valid token
    to carry it, in its group's statistics.
    """
    return token_level_rewards.sum(-1)


def _per_token(advantage: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """A (B,) per-response advantage on every valid token, (B, T) in ``mask``'s dtype, as (advantages, returns)."""
    per_token = advantage.to(mask.dtype)[:, None] * mask
    return per_token, per_token


# ---------------------------------------------------------------------------------------------------------------------
# Advantage estimators. Each returns (advantages, returns), (B, T), both 0 on masked tokens.
# s_i is response i's outcome score (see _outcome_scores), g its group, n its group's size.
# ---------------------------------------------------------------------------------------------------------------------


@register_advantage_estimator("gae")
def gae(
    token_level_rewards: Tensor, mask: Tensor, *, values: Tensor, gamma: float, lam: float
) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation (Schulman et al., 2016, arXiv:1506.02438), whitened over the batch.

    δ_t = r_t + γ V_t' − V_t and A_t = δ_t + γλ A_t', where t' is the next valid token after t (V = A = 0 past
    the last one); returns R_t = A_t + V_t are taken before whitening A over all valid tokens of the batch.
    ``values``: (B, T) float, the critic's V_t for each response token.
    """
    next_values = _next_valid(values, mask)  # (B, T) V_t'
    deltas = token_level_rewards + gamma * next_values - values  # (B, T) TD errors δ_t
    advantages = _discounted_valid_sum(deltas, mask, gamma * lam)
    returns = (advantages + values) * mask
    return _masked_whiten(advantages, mask), returns


@register_advantage_estimator("grpo", compares_responses=True)
def grpo(
    token_level_rewards: Tensor, mask: Tensor, *, group: Tensor, norm_adv_by_std_in_grpo: bool, epsilon: float
) -> tuple[Tensor, Tensor]:
    """GRPO (Shao et al., 2024, arXiv:2402.03300): A_i = (s_i − mean_g s) / (std_g s + ε) on every token of i.

    With ``norm_adv_by_std_in_grpo=False`` only the mean is removed: Dr. GRPO (Liu et al., 2025,
    arXiv:2503.20783). std is unbiased (n − 1); a group of one has mean 0 and std 1, so A_i = s_i / (1 + ε).
    """
    return _per_token(_normalised(_outcome_scores(token_level_rewards), group, norm_adv_by_std_in_grpo, epsilon), mask)


def _normalised(scores: Tensor, group: Tensor, by_std: bool, epsilon: float) -> Tensor:
    """(B,) float64 (s − mean_g s) / (std_g s + ε) of ``scores`` (B,) within each ``group`` (B,), without the
    division when not ``by_std`` (a group of one: mean 0, std 1)."""
    mean, std, _ = _group_mean_std(scores, group)
    centred = scores.double() - mean
    return centred / (std + epsilon) if by_std else centred


@register_advantage_estimator("grpo_passk", compares_responses=True)
def grpo_passk(
    token_level_rewards: Tensor, mask: Tensor, *, group: Tensor, norm_adv_by_std_in_grpo: bool, epsilon: float
) -> tuple[Tensor, Tensor]:
    """Pass@k training (arXiv:2503.19595, as in verl): only the best response of each group is credited.

    A_best = (max_g s − second max_g s) / (std_g s + ε) (no division with ``norm_adv_by_std_in_grpo=False``);
    every other response gets 0, as do all responses of a group whose top two scores tie.

    Raises:
        ValueError: a group has fewer than two responses.
    """
    scores = _outcome_scores(token_level_rewards).double()
    _, std, size = _group_mean_std(scores, group)
    if bool((size < 2).any()):
        raise ValueError("grpo_passk needs at least two responses per prompt; sample n >= 2 per group.")
    rows = torch.arange(scores.numel(), device=scores.device)
    best = _group_reduce(scores, group, "amax")  # (B,) top score of the row's group
    is_winner = rows == _group_reduce(torch.where(scores == best, rows, scores.numel()), group, "amin")
    runner_up = _group_reduce(scores.masked_fill(is_winner, -torch.inf), group, "amax")  # (B,)
    gap = best - runner_up
    if norm_adv_by_std_in_grpo:
        gap = gap / (std + epsilon)
    return _per_token(torch.where(is_winner, gap, 0.0), mask)


@register_advantage_estimator("reinforce_plus_plus")
def reinforce_plus_plus(token_level_rewards: Tensor, mask: Tensor, *, gamma: float) -> tuple[Tensor, Tensor]:
    """REINFORCE++ (Hu, 2025, arXiv:2501.03262): discounted return-to-go, whitened over the batch.

    G_t = r_t + γ G_t' (t' the next valid token; masked tokens' rewards are ignored); A = whiten(G) over all
    valid tokens of the batch. Returns G.
    """
    returns = _discounted_valid_sum(token_level_rewards, mask, gamma) * mask
    return _masked_whiten(returns, mask), returns


@register_advantage_estimator("reinforce_plus_plus_baseline")
def reinforce_plus_plus_baseline(token_level_rewards: Tensor, mask: Tensor, *, group: Tensor) -> tuple[Tensor, Tensor]:
    """REINFORCE++-baseline (Hu, 2025, arXiv:2501.03262): A = whiten(s_i − mean_g s) over all valid tokens.

    The group mean of a group of one is 0. Whitening is per token, so long responses weigh more in the
    batch mean and variance. Returns equal advantages.
    """
    scores = _outcome_scores(token_level_rewards)
    mean, _, _ = _group_mean_std(scores, group)
    centred, _ = _per_token(scores - mean, mask)
    advantages = _masked_whiten(centred, mask)
    return advantages, advantages


@register_advantage_estimator("rloo", compares_responses=True)
def rloo(token_level_rewards: Tensor, mask: Tensor, *, group: Tensor) -> tuple[Tensor, Tensor]:
    """RLOO (Ahmadian et al., 2024, arXiv:2402.14740): A_i = s_i − mean of the other n − 1 scores of g.

    Computed as (n s_i − Σ_g s) / (n − 1). A group of one has no baseline: A_i = s_i.
    """
    scores = _outcome_scores(token_level_rewards).double()
    size = _per_row(torch.bincount(group).to(scores.dtype), group)  # (B,) n
    loo = (size * scores - _per_row(_group_sum(scores, group), group)) / (size - 1).clamp(min=1)
    return _per_token(torch.where(size > 1, loo, scores), mask)


@register_advantage_estimator("remax")
def remax(token_level_rewards: Tensor, mask: Tensor, *, reward_baselines: Tensor) -> tuple[Tensor, Tensor]:
    """ReMax (Li et al., 2023, arXiv:2310.10505): A_t = G_t − b, G_t the undiscounted return-to-go.

    G_t = Σ r_k over valid k >= t; ``reward_baselines``: (B,) float, b = the reward of a greedy rollout of the
    same prompt. Returns G (``gamma`` is not used, as in verl).
    """
    returns = (token_level_rewards * mask).flip(-1).cumsum_(-1).flip(-1).mul_(mask)  # (B, T) G_t
    return torch.addcmul(returns, reward_baselines[:, None], mask, value=-1), returns  # G_t − b on valid tokens


@register_advantage_estimator("opo", compares_responses=True)
def opo(token_level_rewards: Tensor, mask: Tensor, *, group: Tensor) -> tuple[Tensor, Tensor]:
    """OPO (Hao et al., 2025, arXiv:2505.23585): A_i = s_i − b_g, b_g the length-weighted mean score of g.

    b_g = Σ_g |y_j| s_j / Σ_g |y_j|, |y_j| the number of valid tokens of response j. A group of one, or one
    whose responses are all empty, has b_g = 0.
    """
    scores = _outcome_scores(token_level_rewards).double()
    length = mask.sum(-1).to(scores.dtype)  # (B,) |y_i|
    size = _per_row(torch.bincount(group), group)
    weighted = _per_row(_group_sum(length * scores, group), group)
    total_length = _per_row(_group_sum(length, group), group)
    baseline = torch.where((size > 1) & (total_length > 0), weighted / total_length.clamp(min=1), 0.0)
    return _per_token(scores - baseline, mask)


@register_advantage_estimator("gpg", compares_responses=True)
def gpg(token_level_rewards: Tensor, mask: Tensor, *, group: Tensor) -> tuple[Tensor, Tensor]:
    """GPG (Chu et al., 2025, arXiv:2504.02546): A_i = α (s_i − mean_g s), α = B / #{i : s_i ≠ 0}.

    α rescales for responses that carry no gradient signal (α = B when every score is 0); a group of one has
    mean 0. verl's ``f_norm`` is fixed at 1.
    """
    scores = _outcome_scores(token_level_rewards)
    mean, _, _ = _group_mean_std(scores, group)
    alpha = scores.numel() / torch.count_nonzero(scores).clamp(min=1)
    return _per_token(alpha * (scores.double() - mean), mask)


@register_advantage_estimator("gigpo", compares_responses=True, reads_anchors=True)
def gigpo(
    token_level_rewards: Tensor,
    mask: Tensor,
    *,
    group: Tensor,
    turns: Turns,
    norm_adv_by_std_in_grpo: bool,
    epsilon: float,
    omega: float,
    turn_gamma: float,
) -> tuple[Tensor, Tensor]:
    """GiGPO (Feng et al., 2025, "Group-in-Group Policy Optimization for LLM Agent Training", arXiv:2505.10978,
    Eqs. 4-7): an episode-level group advantage plus ω times a step-level one, on every token of a turn.

    A(turn t of episode i) = A_E(i) + ω A_S(i, t), where

    - A_E(i) = (s_i − mean_g s) / (std_g s + ε), GRPO's advantage of the episode's score s_i (the sum of its
      token rewards) within its group g;
    - A_S(i, t) = (R_t^i − mean_S R) / (std_S R + ε), R_t^i = Σ_{k ≥ t} γ^(k−t) r_k^i the discounted return from
      turn t over the episode's turn rewards r (``turns.rewards``, γ = ``turn_gamma``), and S the turn's anchor
      group: the turns of g's episodes whose anchor (``turns.anchors``, the context they were sampled after) is the
      turn's. A turn alone in its anchor group has A_S = 0 (the equation's R − mean; verl-agent's code gives such a
      turn R itself), so it gets A_E only.

    With ``norm_adv_by_std_in_grpo=False`` neither level divides by the std (the paper's ``mean_norm``). Stds are
    unbiased (n − 1), as in GRPO. Returns the advantages.
    """
    episode = _normalised(_outcome_scores(token_level_rewards), group, norm_adv_by_std_in_grpo, epsilon)  # (B,)
    returns = _turn_returns(turns.rewards.double(), turn_gamma)  # (B, K)
    taken = turns.taken.to(returns.device)
    keys = torch.stack([group[:, None].expand_as(turns.anchors), turns.anchors.to(group.device)], -1)[taken]  # (N, 2)
    anchor = torch.unique(keys, dim=0, return_inverse=True)[1]  # (N,) anchor group of each turn taken
    step = torch.where(
        torch.bincount(anchor)[anchor] > 1, _normalised(returns[taken], anchor, norm_adv_by_std_in_grpo, epsilon), 0.0
    )
    per_turn = episode[:, None].expand_as(returns).clone()  # (B, K)
    per_turn[taken] += omega * step
    advantages = turns.on_tokens(per_turn.to(mask.dtype), mask)
    return advantages, advantages


def _turn_returns(rewards: Tensor, gamma: float) -> Tensor:
    """(B, K) R_t = Σ_{k ≥ t} γ^(k−t) r_k of per-turn rewards ``rewards`` (B, K)."""
    k = torch.arange(rewards.shape[1], device=rewards.device)
    lag = k[None, :] - k[:, None]  # (K, K): k' − t
    discount = torch.where(lag >= 0, torch.tensor(gamma, dtype=rewards.dtype).pow(lag.clamp(min=0)), 0.0)  # (t, k')
    return rewards @ discount.T


_INPUT_ARGUMENT = {"group": "index", "values": "values", "reward_baselines": "reward_baselines", "turns": "turns"}
"""Estimator inputs that have no default, with the compute_advantage argument that supplies each."""


@torch.no_grad()
def compute_advantage(
    estimator: str,
    token_level_rewards: Tensor,
    response_mask: Tensor,
    *,
    index: Sequence[Hashable] | Tensor | None = None,
    values: Tensor | None = None,
    reward_baselines: Tensor | None = None,
    turns: Turns | None = None,
    gamma: float = 1.0,
    lam: float = 1.0,
    norm_adv_by_std_in_grpo: bool = True,
    epsilon: float = 1e-6,
    omega: float = 1.0,
    turn_gamma: float = 1.0,
) -> tuple[Tensor, Tensor]:
    """Advantages and returns of a batch of responses with the estimator registered as ``estimator``.

    Args:
        estimator: A key of :data:`ADVANTAGE_ESTIMATORS`: ``gae``, ``grpo``, ``grpo_passk``,
            ``reinforce_plus_plus``, ``reinforce_plus_plus_baseline``, ``rloo``, ``remax``, ``opo``, ``gpg``,
            ``gigpo``, and those of :mod:`~agentfly_train.algorithms.turn_estimators` (``grpo_turns``, ``rloo_turns``,
            ``reinforce_plus_plus_turns``, ``gae_turns``).
        token_level_rewards: (B, T) float, reward per response token; an outcome reward sits on the last
            sampled token of the episode. Outcome estimators score a response by the sum over all T positions.
        response_mask: (B, T) bool or 0/1, 1 = token sampled by the policy, 0 = padding or tool/env token.
        index: (B,) group labels, one per row (any hashables, e.g. prompt uids, or a 1-D tensor); rows with
            equal labels answer the same prompt and need not be adjacent. Needed by ``grpo``, ``grpo_passk``,
            ``reinforce_plus_plus_baseline``, ``rloo``, ``opo``, ``gpg``, ``gigpo`` and the critic-free ``*_turns``.
        values: (B, T) float, critic values V_t of the response tokens. Needed by ``gae`` and ``gae_turns``.
        reward_baselines: (B,) float, reward of a greedy rollout of each row's prompt. Needed by ``remax``.
        turns: Each row's turns: which of its valid tokens each owns, their rewards and anchor states
            (:class:`~agentfly_train.algorithms.turns.Turns`, B rows). Needed by ``gigpo`` and the ``*_turns``.
        gamma: Discount per valid token (masked tokens cost no discount step), for ``gae`` and
            ``reinforce_plus_plus``.
        lam: GAE's λ.
        norm_adv_by_std_in_grpo: Divide by the group std in ``grpo`` and ``grpo_passk`` (False: Dr. GRPO).
        epsilon: Added to the group std before dividing.
        omega: ``gigpo``'s weight of the step-level advantage.
        turn_gamma: Discount per turn of ``gigpo`` and the ``*_turns`` estimators.

    Returns:
        (advantages, returns), both (B, T) in ``token_level_rewards``' dtype, 0 on every masked token.
        Outcome estimators return their advantages as returns.

    Raises:
        UnknownNameError: unknown estimator (the message names the closest).
        ValueError: a missing input the estimator needs, or mismatched shapes.
    """
    entry = get_advantage_estimator(estimator)
    shape = token_level_rewards.shape
    _check_shape("response_mask", response_mask, shape)
    mask = response_mask.to(token_level_rewards.dtype)
    supplied = {
        "group": None if index is None else _group_ids(index, shape[0], token_level_rewards.device),
        "values": values,
        "reward_baselines": reward_baselines,
        "turns": turns,
        "gamma": gamma,
        "lam": lam,
        "norm_adv_by_std_in_grpo": norm_adv_by_std_in_grpo,
        "epsilon": epsilon,
        "omega": omega,
        "turn_gamma": turn_gamma,
    }
    missing = [_INPUT_ARGUMENT[name] for name in entry.inputs if supplied[name] is None]
    if missing:
        raise ValueError(f"advantage estimator {estimator!r} needs {', '.join(missing)}=...; none was given.")
    if "values" in entry.inputs:
        _check_shape("values", values, shape)
    if "reward_baselines" in entry.inputs:
        _check_shape("reward_baselines", reward_baselines, shape[:1])
    if "turns" in entry.inputs:
        _check_shape("turns.tokens", turns.tokens, torch.Size([shape[0], turns.tokens.shape[1]]))
    return entry.fn(token_level_rewards, mask, **{name: supplied[name] for name in entry.inputs})
