"""A run composed from its parts, in turn (:func:`prepare_run`): the envs and their rows (:mod:`~agentfly_train.data`),
the launch and TRL's arguments, the policy and its chat codec (:mod:`~agentfly_train.models`), the SFT warm start,
and the trainer (:func:`assemble_trainer`: the env pool, the rollout driver, the critic and the rollout schedule).
Each part is built once, by its own module, and handed to those that need it. ``train.run``, ``evaluate`` and the
dry run build with these."""

from __future__ import annotations

import functools
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentfly_envs.runtime import ENV_RUNTIMES, EnvPool, PoolSettings, RemoteEnvError
from agentfly_train.config.errors import ConfigError
from agentfly_train.config.judge import judge_of
from agentfly_train.config.schema import TrainConfig, TrainerConfig
from agentfly_train.context_policies import context_policy
from agentfly_train.data import RunData, run_data
from agentfly_train.generation.base import GENERATION_BACKENDS, SamplingParams
from agentfly_train.models import make_codec
from agentfly_train.prompt_dataset import opening_prompt, trl_dataset
from agentfly_train.rollout import AgentRollout, ChatCodec, JudgeRewards, RolloutBudgets
from agentfly_train.run_dir import REFERENCE_DIR, RunResult
from agentfly_train.tiny_policies import TINY_POLICIES

if TYPE_CHECKING:
    from agentfly_train.critic import CriticSettings
    from agentfly_train.programs import ProgramSettings
    from agentfly_train.trl_args import RLSettings
    from agentfly_train.vllm_process import VLLMServer


def env_pool(config: TrainConfig, kwargs: dict[str, Any]) -> EnvPool:
    """The envs of the rollouts, made with ``kwargs``, on the runtime ``actor_rollout_ref.rollout.env_runtime`` names
    (``local``: in this process; ``ray``: on ``env_workers`` Ray actors).

    Raises:
        ConfigError: the runtime cannot host them (e.g. the Ray cluster lacks, or cannot free within a while, the
            CPUs or resources the actors reserve).
    """
    rollout = config.actor_rollout_ref.rollout
    settings = PoolSettings(
        workers=rollout.env_workers,
        worker_cpus=rollout.env_worker_cpus,
        worker_resources=rollout.env_worker_resources,
        step_timeout=rollout.env_step_timeout,
        user_code=config.user_code,
    )
    try:
        return ENV_RUNTIMES.get(rollout.env_runtime).from_settings(config.env_id, kwargs, settings)
    except (ValueError, RemoteEnvError) as error:
        raise ConfigError(f"actor_rollout_ref.rollout.env_workers / env_worker_*: {error}") from None


def rollout_budgets(config: TrainConfig, truncation_reward: float = 0.0) -> RolloutBudgets:
    """The configured agent's episode limits (an episode they cut short gets ``truncation_reward``), its context
    policy (``agent.context``) and whether it trains step-wise
    (:attr:`~agentfly_train.config.AgentConfig.trains_turn_rows`)."""
    return RolloutBudgets(
        max_turns=config.agent.turns,
        max_tokens_per_turn=config.agent.max_tokens_per_turn,
        response_length=config.actor_rollout_ref.rollout.response_length,
        max_images=config.agent.max_images,
        truncation_reward=truncation_reward,
        context=context_policy(config.agent.context),
        step_wise=config.agent.trains_turn_rows,
    )


def agent_rollout(
    config: TrainConfig,
    codec: ChatCodec,
    kwargs: dict[str, Any],
    async_episodes: bool,
    truncation_reward: float,
    judge_server: VLLMServer | None = None,
) -> AgentRollout:
    """The rollout driver of the configured agent: an env pool made with ``kwargs`` (:func:`env_pool`), the
    budgets (an episode they cut short gets the env's ``truncation_reward``), training and validation sampling, and
    the env-stepping threads (with Ray envs, enough threads to wait on every env of every actor), each episode at its
    own pace where the generation backend serves that (``async_episodes``:
    :meth:`~agentfly_train.generation.base.BackendRegistry.async_episodes`), and the LLM judge if one scores the
    episodes (:func:`judge_rewards`, on ``judge_server`` when the run started one); the caller closes it
    (:meth:`~agentfly_train.rollout.AgentRollout.close`)."""
    judge = judge_rewards(config, judge_server)
    pool = env_pool(config, kwargs)
    rollout = config.actor_rollout_ref.rollout
    threads = rollout.env_workers * pool.steps_per_worker  # with Ray envs, a thread for each env an actor steps
    return AgentRollout(
        pool=pool,
        codec=codec,
        budgets=rollout_budgets(config, truncation_reward),
        train_params=SamplingParams(rollout.temperature, rollout.top_p, rollout.top_k),
        val_params=SamplingParams(rollout.val_temperature, rollout.top_p, rollout.top_k),
        executor=ThreadPoolExecutor(max_workers=threads),
        async_episodes=async_episodes,
        retries=rollout.retries,
        max_infra_failure_rate=rollout.max_infra_failure_rate,
        judge=judge,
        program=agent_program(config),
    )


def judge_rewards(config: TrainConfig, judge_server: VLLMServer | None = None) -> JudgeRewards | None:
    """The LLM judge that scores the episodes (``agent.reward_name=judge|rubric|group_rank``), checked to answer and
    to serve its model, or ``None``. ``judge_server``: the server the run started (``reward.judge.url=reference``),
    which the judge stops when it is closed.

    Raises:
        ConfigError: the ``judge`` extra is not installed, or the judge does not answer at ``reward.judge.url`` or
            does not serve ``reward.judge.model``.
    """
    import importlib.util

    from agentfly_envs.judge import JudgeUnavailableError

    judge = judge_of(config, judge_server.url if judge_server is not None else None)
    if judge is None:
        return None
    if importlib.util.find_spec("openai") is None:
        raise ConfigError(
            f"agent.reward_name={config.agent.reward_name} needs the OpenAI SDK: pip install -e '.[judge]'"
        )
    try:
        judge.client.check()
    except JudgeUnavailableError as error:
        judge.client.close()
        raise ConfigError(f"reward.judge.url: {error}") from None
    return JudgeRewards(judge, judge_server.close if judge_server is not None else None)


def agent_program(config: TrainConfig) -> ProgramSettings | None:
    """The configured agent program (``agent.program``, checked when the configuration was), or ``None``."""
    from agentfly_envs.user_code import load_function
    from agentfly_train.programs import ProgramSettings

    spec = config.agent.program
    if spec is None:
        return None
    return ProgramSettings(load_function(spec), spec, config.agent.program_timeout, config.model_path)


@dataclass(frozen=True)
class TrainerSettings:
    """What the trainer reads of the configuration, each part from its own sections.

    Attributes:
        args: TRL's ``GRPOConfig`` (:func:`~agentfly_train.trl_args.grpo_config`).
        rl: The objective's settings (:func:`~agentfly_train.trl_args.rl_settings`).
        critic: The critic's (:func:`~agentfly_train.trl_args.critic_settings`) with an estimator that trains one
            (``gae``), else ``None``.
        peft: The LoRA adapter's ``peft.LoraConfig`` (:func:`~agentfly_train.models.lora_config`; ``None``: none).
        async_episodes: Whether the rollouts play each episode at its own pace (the generation backend's
            :meth:`~agentfly_train.generation.base.BackendRegistry.async_episodes`).
    """

    args: Any
    rl: RLSettings
    critic: CriticSettings | None
    peft: Any
    async_episodes: bool


def make_trainer(
    config: TrainConfig,
    args: Any,
    model: Any,
    tokenizer: Any,
    codec: ChatCodec,
    data: RunData,
    world_size: int,
) -> Any:
    """The :class:`~agentfly_train.trainer.AgentGRPOTrainer` of a run (:func:`assemble_trainer`), its
    :class:`TrainerSettings` read from ``config`` with TRL's arguments ``args``; ``world_size``: processes in the
    launch, over which the critic's batches split."""
    from agentfly_train.algorithms import get_advantage_estimator
    from agentfly_train.models import lora_config
    from agentfly_train.trl_args import critic_settings, rl_settings

    trains_critic = get_advantage_estimator(config.algorithm.adv_estimator).trains_critic
    critic = critic_settings(config, world_size) if trains_critic else None
    async_episodes = GENERATION_BACKENDS.async_episodes(config.actor_rollout_ref.rollout, config.agent.backend)
    settings = TrainerSettings(args, rl_settings(config), critic, lora_config(config), async_episodes)
    return assemble_trainer(config, settings, model, tokenizer, codec, data)


def assemble_trainer(
    config: TrainConfig,
    settings: TrainerSettings,
    model: Any,
    tokenizer: Any,
    codec: ChatCodec,
    data: RunData,
    judge_server: VLLMServer | None = None,
) -> Any:
    """The :class:`~agentfly_train.trainer.AgentGRPOTrainer` of a run: its rollout port (the rollout driver over a
    pool of training envs and the generation backend, :class:`~agentfly_train.trainer.port.RolloutPort`), the
    algorithm's ``settings``, the KL controller (with ``use_kl_in_reward``), the critic
    (with an estimator that trains one, ``gae``; built now, so ``critic.model.path=null`` copies the policy as it
    is after the warm start; the port's backend is built by the trainer on its policy,
    :func:`~agentfly_train.generation.build_backend`), and the rollout schedule
    (``async_training.enable``: :func:`~agentfly_train.trainer.schedules.build_schedule`).

    Args:
        config: The validated configuration.
        settings: What the trainer reads of it.
        model: The policy.
        tokenizer: Its tokenizer.
        codec: The chat codec (:func:`~agentfly_train.models.make_codec`).
        data: The run's rows, the kwargs of its envs and their contract (:func:`~agentfly_train.data.run_data`;
            its env may be closed).
        judge_server: The LLM judge's server the run started (``reward.judge.url=reference``), which the trainer
            stops when it is closed.
    """
    from agentfly_train.algorithms import make_kl_controller
    from agentfly_train.critic import build_value_model
    from agentfly_train.generation import build_backend
    from agentfly_train.trainer import AgentGRPOTrainer
    from agentfly_train.trainer.port import RolloutPort
    from agentfly_train.trainer.schedules import build_schedule

    truncation_reward = data.contract.truncation_reward
    agent = agent_rollout(config, codec, data.env_kwargs, settings.async_episodes, truncation_reward, judge_server)
    dataset = trl_dataset(data.train, opening_prompt(codec, agent.pool))
    critic_model = kl_ctrl = None
    if settings.critic is not None:
        trust_remote_code = config.actor_rollout_ref.model.trust_remote_code
        critic_model = build_value_model(config.critic.model.path, model, trust_remote_code)
    if config.algorithm.use_kl_in_reward:
        kl = config.algorithm.kl_ctrl
        kl_ctrl = make_kl_controller(kl.type, kl.kl_coef, kl.target_kl, kl.horizon)
    schedule = build_schedule(config, data.train)
    return AgentGRPOTrainer(
        port=RolloutPort(agent, functools.partial(build_backend, config)),
        rl=settings.rl,
        kl_ctrl=kl_ctrl,
        critic_model=critic_model,
        critic_settings=settings.critic,
        val_rows=data.val,
        val_batch_size=config.data.val_batch_size,
        log_val_generations=config.trainer.log_val_generations,
        log_train_generations=config.trainer.log_train_generations,
        model=model,
        args=settings.args,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=settings.peft,
        schedule=schedule,
    )


@dataclass
class PreparedRun:
    """A run ready to train (:func:`prepare_run`).

    Attributes:
        trainer: Its :class:`~agentfly_train.trainer.AgentGRPOTrainer` (the caller closes it).
        settings: ``trainer.*``: the run directory, validation and checkpoint cadence of the training loop.
        checkpoint: The checkpoint to resume from (``None``: a fresh run).
        result: The run's result so far (the warm start's loss).
    """

    trainer: Any
    settings: TrainerConfig
    checkpoint: str | None
    result: RunResult


def prepare_run(config: TrainConfig, show_progress: bool = False) -> PreparedRun:
    """Everything of a run before RL, in its run directory, which the caller has claimed
    (:func:`~agentfly_train.run_claim.claim_run_dir`), each part built from its own sections, in turn: its data
    (checked first: missing or malformed data fails in seconds, before transformers and TRL load), the launch checked
    against ``trainer.nnodes * n_gpus_per_node``, TRL's arguments and the trainer's settings (bad sizes fail before a
    model loads), the checkpoint to resume from, the run's ``config.json``, the policy and chat codec, the SFT warm
    start (``sft.enable``, on a fresh run), the pinned reference model (:func:`pin_reference`) and the trainer
    (:func:`assemble_trainer`).

    Args:
        config: A validated configuration.
        show_progress: Draw the warm start's console bar.

    Raises:
        ConfigError: the configuration cannot serve the run (one line naming the key).
    """
    from accelerate import PartialState
    from transformers import set_seed

    from agentfly_train.algorithms import get_advantage_estimator
    from agentfly_train.checkpoints import open_run_dir
    from agentfly_train.config.validation import check_launch, ignored_settings
    from agentfly_train.demonstrations import warm_start_phases
    from agentfly_train.devices import policy_dtype, training_device
    from agentfly_train.generation.base import backend_of
    from agentfly_train.judge_server import serve_reference, stopped_on_error
    from agentfly_train.models import load_policy, lora_config
    from agentfly_train.quiet import no_progress_bars
    from agentfly_train.sft import warm_start
    from agentfly_train.trl_args import critic_settings, grpo_config, rl_settings

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # tools may fork after the tokenizer ran
    data = run_data(config)
    try:
        no_progress_bars()
        device = training_device(config.trainer.device)
        dtype = policy_dtype(config.actor_rollout_ref.model.dtype, device)
        world_size = PartialState(cpu=device == "cpu").num_processes
        check_launch(config.trainer, world_size, device)
        main_process = PartialState().is_main_process
        for note in [*ignored_settings(config, world_size), *data.notes] if main_process else []:
            print(f"note: {note}", file=sys.stderr)
        trains_critic = get_advantage_estimator(config.algorithm.adv_estimator).trains_critic
        rl, critic = rl_settings(config), critic_settings(config, world_size) if trains_critic else None
        args = grpo_config(config, world_size, device, dtype)
        checkpoint = open_run_dir(config.trainer, json.dumps(asdict(config), indent=2), main_process)
        run_dir = Path(config.trainer.default_local_dir)
        set_seed(config.trainer.seed)
        async_episodes = GENERATION_BACKENDS.async_episodes(config.actor_rollout_ref.rollout, config.agent.backend)
        backend_of(config).preflight(config)
        peft = lora_config(config)
        model, tokenizer = load_policy(config)
        codec = make_codec(config, tokenizer, data.env, data.train[0])
        codec.stop_generation(model)
        settings = TrainerSettings(args, rl, critic, peft, async_episodes)
        if codec.note and main_process:
            print(f"note: {codec.note}", file=sys.stderr)
        result = RunResult(run_dir=str(run_dir))
        if config.sft.enable and checkpoint is None:  # the first sft.num_demos training rows' demonstrations
            sft, seed = config.sft, config.trainer.seed
            demos = data.train[: sft.num_demos]
            phases = warm_start_phases(data.env, data.contract, codec, demos, sft, seed, rollout_budgets(config))
            model, result.sft_loss = warm_start(
                model, tokenizer, phases, lr=sft.lr, batch_size=sft.batch_size, use_cpu=device == "cpu", seed=seed,
                bf16=args.bf16, warmup_ratio=sft.warmup_ratio, images=codec.images, show_progress=show_progress,
            )  # fmt: skip
    finally:
        data.env.close()  # the rollouts make their own envs; a web env's browser goes with this one, also on error
    if args.beta and config.actor_rollout_ref.model.lora_rank == 0:
        pin_reference(model, run_dir, copy=config.sft.enable or config.model_path in TINY_POLICIES)
    judge_server = serve_reference(config, model, tokenizer, device)
    with stopped_on_error(judge_server):
        trainer = assemble_trainer(config, settings, model, tokenizer, codec, data, judge_server)
    return PreparedRun(trainer, config.trainer, checkpoint, result)


def pin_reference(model: Any, run_dir: Path, copy: bool) -> None:
    """Makes the reference model of the KL terms the policy as RL starts.

    TRL builds the reference from the path in the policy's config, which holds the weights before the SFT
    warm start (and no path at all for ``agentfly:tiny``). When either applies (``copy``), or a first run made
    one, the policy is saved once to ``<run dir>/reference`` (a resumed run keeps the first run's) and its config
    points there. With LoRA, TRL's reference is the base model with the adapter off, which needs no copy.
    """
    from accelerate import PartialState

    path = run_dir / REFERENCE_DIR
    if not (copy or path.is_dir()):
        return
    state = PartialState()
    if state.is_main_process and not (path / "config.json").is_file():
        model.save_pretrained(path)
    state.wait_for_everyone()
    model.config._name_or_path = str(path)
