"""The configuration's schema: one dataclass per section, their defaults and the constraints on their values.

The key surface is the one AgentFly/verl users know (``agent.*``, ``algorithm.*``, ``data.*``,
``actor_rollout_ref.*``, ``critic.*``, ``trainer.*``); the dataclass defaults are those of AgentFly's training
guide and what a real model needs. Each field's constraint (> 0, within [0, 1], one of a registry's names) is
declared on it (:mod:`agentfly_train.config.constraints`) and checked by :mod:`agentfly_train.config.validation`.
Only the standard library is imported here (and :mod:`agentfly_envs`, the package below, where a property reads it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentfly_train.config.actor_rollout_ref import (
    ActorRolloutRefConfig,
    OptimConfig,
)
from agentfly_train.config.agent import JUDGE_REWARDS, AgentConfig
from agentfly_train.config.constraints import (
    AtLeast,
    NonNegative,
    OneOf,
    Positive,
    Registered,
    Within,
    setting,
)

if TYPE_CHECKING:
    from agentfly_envs.user_code import UserCode

FILES_ENV = "agentfly/Files"
"""The env built from ``data.train_files`` + ``agent.tools`` + ``agent.reward_name`` when ``agent.env`` is unset."""
TINY_MODEL = "agentfly:tiny"
"""``actor_rollout_ref.model.path`` value that builds the tiny local model and tokenizer (no download)."""
TINY_VL_MODEL = "agentfly:tiny-vl"
"""``actor_rollout_ref.model.path`` value that builds a tiny Qwen2.5-VL-architecture model, tokenizer and image
processor (no download), a vision-language policy for offline runs and tests."""
TINY_QWEN3_VL_MODEL = "agentfly:tiny-qwen3-vl"
"""``actor_rollout_ref.model.path`` value that builds a tiny Qwen3-VL-architecture model, tokenizer and image
processor (no download); :data:`agentfly_train.tiny_model.TINY_POLICIES` maps each tiny name to its builders."""

SELF_JUDGE = "rollout"
"""``reward.judge.url`` value naming the run's own vLLM server (``actor_rollout_ref.rollout.mode=server``)."""
REFERENCE_JUDGE = "reference"
"""``reward.judge.url`` value naming a vLLM server the run starts on its reference policy
(:mod:`agentfly_train.judge_server`)."""


LOGGERS = ("console", "wandb", "tensorboard")
RESUME_MODES = ("auto", "disable", "resume_path")
SFT_SCHEDULES = ("linear", "cosine", "constant")


@dataclass
class KLControlConfig:
    """The coefficient β of the KL penalty in the reward (``algorithm.kl_ctrl``); checkpointed with the run.

    Attributes:
        type: ``fixed`` (β stays ``kl_coef``) or ``adaptive`` (β steered so the KL tracks ``target_kl``;
            Ziegler et al., 2019).
        kl_coef: β at the start (> 0).
        target_kl: ``adaptive``: the KL to track, nats per token.
        horizon: ``adaptive``: episodes over which a 20 % KL error moves β by 20 %.
    """

    type: str = setting("fixed", Registered("agentfly_train.algorithms:KL_CONTROLLERS"))
    kl_coef: float = 0.001
    target_kl: float = 0.1
    horizon: int = 10_000


@dataclass
class RolloutCorrectionConfig:
    """Importance weights for the gap between the rollout engine's log-probs and the trainer's
    (``algorithm.rollout_correction``, verl's keys; :func:`agentfly_train.algorithms.rollout_is_weights`).

    Attributes:
        rollout_is: ``null`` (off: the gap is still logged as ``rollout/logprob_diff_mean``/``_max`` when the
            engine is vLLM), ``token`` or ``sequence``.
        rollout_is_threshold: A number (truncate the weights there, TIS) or ``"lower_upper"`` (zero the weights
            outside, e.g. ``"0.5_5.0"``).
    """

    rollout_is: str | None = None
    rollout_is_threshold: str = "2.0"


@dataclass
class GiGPOConfig:
    """The turn-level credit of ``algorithm.adv_estimator=gigpo`` (``algorithm.gigpo``; Feng et al., 2025,
    arXiv:2505.10978).

    Attributes:
        omega: Weight ω of the step-level advantage added to the episode-level one (the paper's 1). Its discount per
            turn is ``algorithm.turn_gamma``.
    """

    omega: float = setting(1.0, NonNegative())


@dataclass
class AlgorithmConfig:
    """Advantage estimation and KL-in-reward (``algorithm.*``).

    Attributes:
        adv_estimator: ``grpo``, ``rloo``, ``reinforce_plus_plus``, ``reinforce_plus_plus_baseline``,
            ``remax`` (a greedy rollout per prompt is the baseline), ``gae`` (PPO, trains ``critic.*``),
            ``grpo_passk``, ``opo``, ``gpg`` (``agentfly_train/algorithms/estimators.py``), and with an advantage per
            turn: ``gigpo`` (``algorithm.gigpo``), ``grpo_turns``, ``rloo_turns``, ``reinforce_plus_plus_turns``
            (discounted per-turn returns minus a leave-one-out baseline per turn index) and ``gae_turns`` (GAE over
            turns, trains ``critic.*``) (``agentfly_train/algorithms/turn_estimators.py``).
        gamma: Discount per sampled token (``gae``, ``reinforce_plus_plus``); tool tokens cost no step.
        turn_gamma: Discount γ per turn of the estimators with an advantage per turn: their returns
            R_t = Σ_{k≥t} γ^(k−t) r_k over the episode's turn rewards r_k (GiGPO's 0.95); setting it for another
            estimator is a config error. (It was ``algorithm.gigpo.gamma``.)
        lam: λ of GAE (``gae``, per token) and of ``gae_turns`` (per turn).
        norm_adv_by_std_in_grpo: Divide GRPO advantages by the group's std (``false``: Dr. GRPO).
        use_kl_in_reward: Subtract β · KL(π_old ‖ π_ref) from every sampled token's reward (verl's
            ``use_kl_in_reward``; loads the reference model).
        kl_penalty: The KL estimator in the reward: ``kl`` (k1), ``abs``, ``mse`` (k2), ``low_var_kl`` (k3), or
            ``full`` (exact over the vocabulary; the policy and the reference each run one more forward pass per
            rollout batch, ``per_device_train_batch_size`` rows of (rows, T, V) logits at a time).
        kl_ctrl: β and how it moves.
        rollout_correction: Importance weights between the rollout engine and the trainer.
        gigpo: ``gigpo``'s ω.
    """

    adv_estimator: str = setting("gae", Registered("agentfly_train.algorithms:ADVANTAGE_ESTIMATORS"))
    gamma: float = setting(1.0, Within(0, 1))
    turn_gamma: float = setting(0.95, Within(0, 1))
    lam: float = setting(1.0, Within(0, 1))
    norm_adv_by_std_in_grpo: bool = True
    use_kl_in_reward: bool = False
    kl_penalty: str = setting("kl", Registered("agentfly_train.algorithms:KL_PENALTIES"))
    kl_ctrl: KLControlConfig = field(default_factory=KLControlConfig)
    rollout_correction: RolloutCorrectionConfig = field(default_factory=RolloutCorrectionConfig)
    gigpo: GiGPOConfig = field(default_factory=GiGPOConfig)


@dataclass
class DataConfig:
    """Where the tasks come from (``data.*``).

    Attributes:
        train_files: A JSON list / JSONL / parquet file of task rows, or a list of them (``question``, ``answer``,
            other fields passed to the reward); ``null`` uses the env's own task source (needs ``agent.env``).
        val_files: The same for validation; ``null`` uses the env's task source built with
            ``val_env_kwargs`` (e.g. another ``task_seed`` for generated tasks), or no validation when the env
            is built from files.
        train_batch_size: Prompts per rollout step (each gets ``agent.num_chains`` rollouts).
        val_batch_size: Episodes per validation generation call.
        train_size: Use at most this many training rows; ``null`` for all.
        val_size: Use at most this many validation rows; ``null`` for all rows of ``val_files`` (256 of an env's
            own task source); ``0`` for no validation.
        val_env_kwargs: ``gymnasium.make`` overrides for the validation task source.
        shuffle: Shuffle the training rows each epoch.
    """

    train_files: Any = None
    val_files: Any = None
    train_batch_size: int = setting(8, Positive())
    val_batch_size: int = setting(64, Positive())
    train_size: int | None = None
    val_size: int | None = None
    val_env_kwargs: dict[str, Any] = field(default_factory=dict)
    shuffle: bool = True


@dataclass
class CriticModelConfig:
    """The value model (``critic.model.*``): a causal-LM backbone with a scalar value head.

    Attributes:
        path: ``null``: the policy's architecture and weights (after the SFT warm start); ``agentfly:tiny``:
            the tiny policy's configuration, random weights; else a causal-LM checkpoint (Hub id or directory).
    """

    path: str | None = None


@dataclass
class CriticConfig:
    """``critic.*``: the value model trained by PPO (``algorithm.adv_estimator=gae``); batch sizes count prompts.

    Attributes:
        model: The value model.
        optim: Its AdamW optimiser (constant learning rate).
        ppo_mini_batch_size: Prompts per critic optimiser step (``null``: ``data.train_batch_size``).
        ppo_micro_batch_size_per_gpu: Sequences per critic forward/backward on one device.
        cliprange_value: How far V may move from the rollout's values before the clipped loss takes over.
    """

    model: CriticModelConfig = field(default_factory=CriticModelConfig)
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=1e-5))
    ppo_mini_batch_size: int | None = setting(None, Positive(allow_none=True))
    ppo_micro_batch_size_per_gpu: int = setting(16, Positive())
    cliprange_value: float = setting(0.5, Positive())


@dataclass
class SFTWarmupConfig:
    """A short supervised phase on the env's golden demonstrations before RL (``sft.*``).

    Attributes:
        enable: Run it.
        steps: Optimiser steps.
        lr: Peak learning rate.
        lr_scheduler_type: ``linear`` (decay to 0), ``cosine`` or ``constant``, after the warm-up of the last
            phase. Each phase warms up; a golden phase followed by the rest holds the peak rate (warm-up, stable,
            decay). With a constant rate the last batches' mix of demonstrations moved the quickstart's
            tool-or-guess decision.
        warmup_ratio: Share of each phase's steps over which the rate rises linearly to ``lr``, in [0, 1).
        batch_size: Demonstrations per step.
        num_demos: Demonstrations to learn from (from the start of the training rows).
        guess_fraction: Share of the demonstrations, in [0, 1], in which the demonstrator skips the tools and
            answers at once with a guess (another task's answer): imperfect demonstrations, as real SFT data are,
            for RL to improve on. 0 = golden episodes only.
        golden_fraction: Share of the ``steps``, in [0, 1], that come first, on golden episodes only (using the
            tools and copying numbers); the rest are on the demonstrations with guesses. Learning both at once left
            the copying of the question's numbers into the calls unlearnt in some seeds.
    """

    enable: bool = False
    steps: int = 140
    lr: float = 3e-3
    lr_scheduler_type: str = setting("linear", OneOf(SFT_SCHEDULES))
    warmup_ratio: float = setting(0.05, Within(0, 1, high_open=True))
    batch_size: int = 16
    num_demos: int = 2048
    guess_fraction: float = setting(0.0, Within(0, 1))
    golden_fraction: float = setting(0.0, Within(0, 1))


@dataclass
class TrainerConfig:
    """``trainer.*``: the run: length, logging, validation, checkpoints.

    Attributes:
        project_name: wandb project; part of the default run directory.
        experiment_name: wandb run name; part of the default run directory.
        logger: Any of ``console`` (always on), ``wandb`` (offline without an API key), ``tensorboard``.
        total_training_steps: Rollout steps to run; ``null`` runs ``total_epochs`` over the data.
        total_epochs: Passes over the training rows when ``total_training_steps`` is ``null``.
        nnodes: Nodes (checked against the Accelerate launch; with Ray, workers = ``nnodes x n_gpus_per_node``).
        n_gpus_per_node: Devices per node (checked against the Accelerate launch on GPUs; with Ray on CPUs, the
            CPU workers per node).
        launcher: A launcher of :data:`agentfly_train.launchers.LAUNCHERS`: ``local`` (this process / the
            Accelerate launch) or ``ray`` (Ray Train workers on the cluster at ``RAY_ADDRESS``, the one ``ray start``
            left on this machine, or a new one-machine cluster; :mod:`agentfly_train.launchers.ray_train`), or
            ``auto`` (``ray`` when ``RAY_ADDRESS`` is set, else ``local``).
        cpus_per_worker: CPUs Ray reserves for each training worker.
        save_freq: Checkpoint every this many steps (``-1``: never).
        max_ckpt_to_keep: Complete checkpoints to keep (>= 1); after each save the oldest beyond it are deleted
            (``null``: keep all).
        test_freq: Validate every this many steps (``-1``: never).
        val_before_train: Validate before the first step.
        resume_mode: ``auto`` (latest checkpoint in the run directory), ``resume_path``, ``disable``.
        resume_from_path: The checkpoint for ``resume_mode=resume_path``.
        default_local_dir: The run directory (checkpoints, ``metrics.jsonl``, samples). A run locks it; it holds
            one run, which the same configuration resumes (``docs/training.md``, run directories).
        overwrite: Delete everything in ``default_local_dir`` (a previous run) before this run starts in it; without
            it, a run stops with one line where the directory holds a different run, or any run's files with
            ``resume_mode=disable``.
        seed: Seed of data order, sampling and initialisation.
        device: ``auto``, ``cpu`` or ``cuda``.
        critic_warmup: Rollout steps at the start that train only the critic (PPO); the policy starts moving
            at step ``critic_warmup + 1``.
        log_val_generations: Validation trajectories written to the run directory per validation.
        log_train_generations: Training trajectories written to the run directory per step
            (``train_samples/step_<N>.jsonl``, shown by ``python -m agentfly_train report``); 0: none.
    """

    project_name: str = "agentfly"
    experiment_name: str = "default"
    logger: list[str] = setting(check=OneOf(LOGGERS), factory=lambda: ["console"])
    total_training_steps: int | None = setting(None, Positive(allow_none=True))
    total_epochs: int = setting(1, Positive())
    nnodes: int = setting(1, Positive())
    n_gpus_per_node: int = setting(8, NonNegative(" (0: a CPU run)"))
    launcher: str = setting("auto", Registered("agentfly_train.launchers.base:LAUNCHERS", also=("auto",)))
    cpus_per_worker: int = setting(1, Positive())
    save_freq: int = -1
    max_ckpt_to_keep: int | None = setting(
        None, AtLeast(1, allow_none=True, note=" (or null to keep every checkpoint)")
    )
    test_freq: int = -1
    val_before_train: bool = True
    resume_mode: str = setting("auto", OneOf(RESUME_MODES))
    resume_from_path: str | None = None
    default_local_dir: str = "runs/${trainer.project_name}/${trainer.experiment_name}"
    overwrite: bool = False
    seed: int = 0
    device: str = "auto"
    critic_warmup: int = setting(0, NonNegative())
    log_val_generations: int = 8
    log_train_generations: int = setting(0, NonNegative())


@dataclass
class CustomRewardFunctionConfig:
    """A reward function from a file (``custom_reward_function.*``, verl's keys).

    Attributes:
        path: A ``.py`` file holding the function (``null``: none). It replaces the env's scoring, as
            ``agent.reward_name`` would.
        name: The function's name in the file (verl's default ``compute_score``), also the reward's registered name.
            verl's signature ``compute_score(data_source, solution_str, ground_truth, extra_info=None)`` returning
            a number or a dict with a ``score``, or agentfly's ``fn(response, ground_truth)``.
    """

    path: str | None = None
    name: str = "compute_score"


@dataclass
class JudgeConfig:
    """The LLM judge of ``agent.reward_name=judge``, ``rubric`` or ``group_rank`` (``reward.judge.*``).

    Attributes:
        url: An OpenAI-compatible base URL (a vLLM server: ``http://host:port/v1``), checked at start-up; ``rollout``:
            the run's own vLLM server (``rollout.mode=server``), so the policy judges itself with its current weights;
            ``reference``: a vLLM server the run starts on the policy as RL starts (after the warm start), which
            keeps those weights for the whole run (:mod:`agentfly_train.judge_server`).
        model: The served model's name; ``null``: the first the server lists.
        template: The judge's prompt, a format string naming ``{task}``, ``{answer}``, ``{trajectory}`` and
            ``{reference}`` (group ranking: ``{task}``, ``{reference}``, ``{answers}``, ``{count}``); ``null``: the
            kind's default (:mod:`agentfly_envs.judge.prompts`).
        rubric: ``reward_name=rubric``: a list of ``{name, description, weight}``, a ``.yaml`` file of one, or a
            registered rubric's name (``helpful_correct``); each criterion becomes a reward component.
        max_tokens: Tokens the judge writes per answer (its reasoning is capped to fit, so the JSON always closes).
        temperature: The judge's sampling temperature (0: greedy).
        timeout_s: Seconds one judge request may take.
        retries: Further tries of a failed request; a judge still down is an infrastructure failure.
        max_concurrency: Judge requests in flight at once.
        cache_size: Verdicts kept by digest of (prompt, answer), so a repeated answer is not judged again; 0: none.
        server_args: ``url=reference``: the judge server's vLLM arguments beyond its model, host and port (e.g.
            ``[--gpu-memory-utilization,0.3]``); ``null``: the device's defaults
            (:func:`agentfly_train.judge_server.server_args`).
    """

    url: str | None = None
    model: str | None = None
    template: str | None = None
    rubric: Any = None
    max_tokens: int = setting(1024, Positive())
    temperature: float = setting(0.0, NonNegative())
    timeout_s: float = setting(60.0, Positive())
    retries: int = setting(2, NonNegative())
    max_concurrency: int = setting(64, Positive())
    cache_size: int = setting(4096, NonNegative(" (0: no cache)"))
    server_args: list[str] | None = None


@dataclass
class RewardConfig:
    """Rewards computed by the trainer after an episode ends (``reward.*``).

    Attributes:
        judge: The LLM judge (``agent.reward_name=judge``, ``rubric``, ``group_rank``).
    """

    judge: JudgeConfig = field(default_factory=JudgeConfig)


@dataclass
class EvalConfig:
    """``python -m agentfly_train eval``: how many samples per task and the k of pass@k and mean@k.

    Attributes:
        k: The k of pass@k (the chance that at least one of k samples is correct) and mean@k (the mean reward of
            k samples), estimated without bias from ``n`` samples per task (Chen et al., 2021).
        n: Samples per validation task (``null``: ``k``); at least ``k``.
        confidence: The level of the bootstrap confidence intervals (per task, and over tasks), e.g. 0.95.
    """

    k: int = setting(1, Positive())
    n: int | None = None
    confidence: float = setting(0.95, Within(0, 1, low_open=True, high_open=True))

    @property
    def samples(self) -> int:
        """Samples per task: ``n``, or ``k`` when unset."""
        return self.n if self.n is not None else self.k


@dataclass
class AsyncTrainingConfig:
    """Off-policy asynchronous training (``async_training.*``, verl's fully-async keys plus TRL's ``max_staleness``):
    a generator keeps producing episodes with the newest weights it holds while the trainer takes batches of
    finished groups (:mod:`agentfly_train.trainer.schedules`).

    One-step-off (verl's ``one_step_off_policy``) is ``staleness_threshold=1 partial_rollout=false max_staleness=1``:
    the generator stays exactly one batch ahead, every batch sampled whole by the weights before the last update.
    ``staleness_threshold=0`` with ``max_staleness=0`` trains on-policy (the synchronous schedule's batches).

    Attributes:
        enable: Switch the mode on.
        staleness_threshold: How far the generator may run ahead, as a share of a step's groups: at each weight sync
            it may start the groups that bring those started and not yet trained up to
            ``(1 + staleness_threshold) * data.train_batch_size`` prompts' groups, and no more until the next sync
            (``0``: none ahead, ``1``: one batch).
        trigger_parameter_sync_step: Rollout steps (updates) between two weight syncs to the generator.
        partial_rollout: An episode in flight at a weight sync goes on under the new weights (its earlier tokens keep
            their versions); ``false``: the sync waits until the episodes in flight have ended (needs a backend
            with its own weights, vLLM).
        require_batches: ``actor.ppo_mini_batch_size`` batches of groups the trainer takes at once; ``null``: those
            of one rollout step (``data.train_batch_size / ppo_mini_batch_size``), the only value accepted.
        use_rollout_log_probs: The behaviour log-probabilities (the sampler's) are PPO's old log-probs, so the clipped
            ratio is taken against the policy that sampled each token; ``false``: the trainer's log-probs before
            the update are, and ``algorithm.rollout_correction.rollout_is`` weights correct for the sampler
            (AReaL's decoupled PPO).
        max_staleness: Policy versions (updates) an episode's oldest token may lag the trainer's policy when the
            trainer takes it; older groups are dropped and counted (``async/dropped``).
    """

    enable: bool = False
    staleness_threshold: float = setting(1.0, NonNegative())
    trigger_parameter_sync_step: int = setting(1, Positive())
    partial_rollout: bool = True
    require_batches: int | None = None
    use_rollout_log_probs: bool = True
    max_staleness: int = setting(1, NonNegative(" (policy versions)"))


@dataclass
class TrainConfig:
    """The whole configuration; its defaults are the training guide's (the quickstart is the preset
    :data:`QUICKSTART`)."""

    agent: AgentConfig = field(default_factory=AgentConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    data: DataConfig = field(default_factory=DataConfig)
    actor_rollout_ref: ActorRolloutRefConfig = field(default_factory=ActorRolloutRefConfig)
    critic: CriticConfig = field(default_factory=CriticConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    sft: SFTWarmupConfig = field(default_factory=SFTWarmupConfig)
    custom_reward_function: CustomRewardFunctionConfig = field(default_factory=CustomRewardFunctionConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    async_training: AsyncTrainingConfig = field(default_factory=AsyncTrainingConfig)

    @property
    def user_code(self) -> UserCode:
        """The user's code to load wherever envs are built: ``agent.imports`` and ``custom_reward_function``."""
        from agentfly_envs.user_code import UserCode

        reward = self.custom_reward_function
        return UserCode(tuple(self.agent.imports), reward.path, reward.name)

    @property
    def reward_name(self) -> str | None:
        """The reward replacing the env's scoring: ``custom_reward_function.name`` with a ``path``, else
        ``agent.reward_name`` (``None``: the env's own)."""
        reward = self.custom_reward_function
        return reward.name if reward.path is not None else None if self.judged else self.agent.reward_name

    @property
    def judged(self) -> bool:
        """Whether an LLM judge scores the episodes (``agent.reward_name`` is one of :data:`JUDGE_REWARDS`)."""
        return self.agent.reward_name in JUDGE_REWARDS

    @property
    def env_id(self) -> str:
        """The env's Gymnasium id: ``agent.env`` (``openenv:<url>`` and ``verifiers:<module>`` resolved by
        :func:`agentfly_envs.sources.resolve_env`) if set, else :data:`FILES_ENV` over ``data.train_files``."""
        from agentfly_envs.sources import resolve_env

        return resolve_env(self.agent.env)[0] if self.agent.env else FILES_ENV

    @property
    def env_source_kwargs(self) -> dict[str, Any]:
        """The kwargs an ``agent.env`` source prefix stands for (``{"url": ...}`` for ``openenv:<url>``), else
        ``{}``."""
        from agentfly_envs.sources import resolve_env

        return resolve_env(self.agent.env)[1] if self.agent.env else {}

    @property
    def model_path(self) -> str:
        """The policy model: ``agent.model_name_or_path`` if set, else ``actor_rollout_ref.model.path``."""
        return self.agent.model_name_or_path or self.actor_rollout_ref.model.path
