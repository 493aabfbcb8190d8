"""Advantage estimators, KL penalties and controllers, PPO losses, rollout correction: pure tensor math.

Everything here is a function of tensors and numbers (no trainer state, no config objects, no I/O), so
each piece reads top to bottom next to its equation and is tested on hand-worked values.

Shapes: ``B`` responses in the batch, ``T`` response tokens per row (right-padded), ``V`` vocabulary
size. ``response_mask`` is ``(B, T)``, bool or 0/1 numbers: 1 marks a token the policy sampled,
0 marks padding and tool/env tokens of multi-turn episodes (``env_mask = 0``). Masked tokens never
receive advantage, return, KL or loss, and sequential quantities (returns, GAE) skip over them: the
token after a tool span follows the token before it as if the span were not there. Masks are applied
by multiplication (as in verl), so values on masked tokens must be finite.

The numbers are those of verl 0.9.1 (``verl/trainer/ppo/core_algos.py``) on every valid token, for the
same inputs. Where verl's output is an accident of its implementation we differ, always on purpose:

- Advantages and returns are 0 on every masked token (verl leaves carried values there for ``gae``
  and ``remax``, and NaN for ``opo`` groups whose responses are all empty).
- Group statistics (means, standard deviations, leave-one-out sums) are accumulated in float64, so a
  group of equal rewards always gets advantage 0. verl's float32 sums can leave a residue of ~1e-8
  that ``epsilon = 1e-6`` turns into advantages up to ~0.06 (eight rewards of 0.7 in one group).
- Whitening over fewer than two valid tokens returns zeros where verl raises ``ValueError``.
- Losses over a batch with no valid token are 0 (verl divides 0 by 0).
- ``kl_penalty`` kind ``"full"`` (exact KL over the vocabulary) exists; verl raises
  ``NotImplementedError`` for it.

One module per job, each with its registry; every public name is importable from this package:

- :mod:`~agentfly_train.algorithms.estimators`: the advantage estimators (``ADVANTAGE_ESTIMATORS``) and
  :func:`compute_advantage`;
- :mod:`~agentfly_train.algorithms.turn_estimators`: the estimators on discounted per-turn returns (``grpo_turns``,
  ``rloo_turns``, ``reinforce_plus_plus_turns``, ``gae_turns``), filed in the same registry;
- :mod:`~agentfly_train.algorithms.kl`: the KL penalties (``KL_PENALTIES``), :func:`full_kl`, the KL controllers
  (``KL_CONTROLLERS``) and the KL penalty in the reward;
- :mod:`~agentfly_train.algorithms.losses`: loss aggregation (``LOSS_AGG_MODES``), the policy and value losses;
- :mod:`~agentfly_train.algorithms.rollout_correction`: importance weights between the rollout engine and the trainer;
- :mod:`~agentfly_train.algorithms.turns`: the turns of a batch's episodes (:class:`Turns`), for the estimators that
  credit turns and per-turn rewards on tokens;
- :mod:`~agentfly_train.algorithms.common`: the masked statistics and scans they share.
"""

from agentfly_train.algorithms.common import (
    Fn,
)
from agentfly_train.algorithms.estimators import (
    ADVANTAGE_ESTIMATORS,
    ESTIMATOR_INPUTS,
    AdvantageEstimator,
    compute_advantage,
    gae,
    get_advantage_estimator,
    gigpo,
    gpg,
    grpo,
    grpo_passk,
    opo,
    register_advantage_estimator,
    reinforce_plus_plus,
    reinforce_plus_plus_baseline,
    remax,
    rloo,
)
from agentfly_train.algorithms.kl import (
    KL_CONTROLLERS,
    KL_PENALTIES,
    AdaptiveKLController,
    FixedKLController,
    KLController,
    apply_kl_penalty,
    full_kl,
    kl_penalty,
    make_kl_controller,
    subtract_kl,
)
from agentfly_train.algorithms.losses import (
    LOSS_AGG_MODES,
    agg_loss,
    policy_loss,
    value_loss,
)
from agentfly_train.algorithms.rollout_correction import (
    ROLLOUT_IS_LEVELS,
    ROLLOUT_IS_METRICS,
    parse_is_threshold,
    rollout_gap,
    rollout_gap_metrics,
    rollout_is_weights,
)
from agentfly_train.algorithms.turn_estimators import gae_turns, grpo_turns, reinforce_plus_plus_turns, rloo_turns
from agentfly_train.algorithms.turns import Turns

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "ESTIMATOR_INPUTS",
    "KL_CONTROLLERS",
    "KL_PENALTIES",
    "LOSS_AGG_MODES",
    "ROLLOUT_IS_LEVELS",
    "ROLLOUT_IS_METRICS",
    "AdaptiveKLController",
    "AdvantageEstimator",
    "FixedKLController",
    "Fn",
    "KLController",
    "Turns",
    "agg_loss",
    "apply_kl_penalty",
    "compute_advantage",
    "full_kl",
    "gae",
    "gae_turns",
    "get_advantage_estimator",
    "gigpo",
    "gpg",
    "grpo",
    "grpo_passk",
    "grpo_turns",
    "kl_penalty",
    "make_kl_controller",
    "opo",
    "parse_is_threshold",
    "policy_loss",
    "register_advantage_estimator",
    "reinforce_plus_plus",
    "reinforce_plus_plus_baseline",
    "reinforce_plus_plus_turns",
    "remax",
    "rloo",
    "rloo_turns",
    "rollout_gap",
    "rollout_gap_metrics",
    "rollout_is_weights",
    "subtract_kl",
    "value_loss",
]
