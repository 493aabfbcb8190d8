"""Loading the policy model and tokenizer named by the configuration, its chat template, and the chat codec the
run talks to its env with (:func:`make_codec`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from agentfly_train.config.errors import ConfigError
from agentfly_train.config.schema import TINY_QWEN3_VL_MODEL, TINY_VL_MODEL, TrainConfig
from agentfly_train.tiny_policies import TINY_POLICIES

if TYPE_CHECKING:
    import gymnasium as gym

    from agentfly_train.rollout import ChatCodec


def resolve_chat_template(template: str | None) -> str | None:
    """The Jinja source of ``agent.template``.

    Args:
        template: ``None`` (the tokenizer's own), a path to a ``.jinja`` file, the name of a template we ship
            (``compact_tools``) or of one TRL ships (``qwen2_5``, ``llama3_1``, ``qwen3``...; ``qwen2.5`` is read
            as ``qwen2_5``).

    Returns:
        The template text, or ``None`` to keep the tokenizer's.

    Raises:
        ConfigError: no such file or template name (with the known names).
    """
    if template is None:
        return None
    path = Path(template)
    if path.suffix == ".jinja":
        if not path.is_file():
            raise ConfigError(f"agent.template: file {template!r} does not exist")
        return path.read_text()
    import trl

    from agentfly_train.chat_templates import chat_template, shipped_templates

    name = template.replace(".", "_").replace("-", "_")
    if name in shipped_templates():
        return chat_template(name)
    candidate = Path(trl.__file__).parent / "chat_templates" / f"{name}.jinja"
    if not candidate.is_file():
        raise ConfigError(
            f"agent.template={template!r} is not a shipped template name or .jinja file; known: {known_templates()}"
        )
    return candidate.read_text()


def known_templates() -> list[str]:
    """The template names ``agent.template`` accepts: ours (:mod:`agentfly_train.chat_templates`), then TRL's (those
    of ours' names left out: ours override them)."""
    import trl

    from agentfly_train.chat_templates import shipped_templates

    ours = shipped_templates()
    trl_templates = Path(trl.__file__).parent / "chat_templates"
    theirs = sorted(p.stem for p in trl_templates.glob("*.jinja") if not p.stem.endswith("_training"))
    return ours + [name for name in theirs if name not in ours]


GENERIC_TOKENIZER_CLASSES = ("TokenizersBackend", "PreTrainedTokenizerFast")
"""``tokenizer_class`` of a tokenizer saved from a plain ``tokenizers`` object (e.g. the tiny one, in a run's
``final/`` or a checkpoint)."""


def load_tokenizer(path: str, **kwargs: Any) -> Any:
    """``AutoTokenizer.from_pretrained(path)``, except for a local directory whose tokenizer declares a generic
    class: transformers would load the model type's tokenizer class (``Qwen2Tokenizer`` next to a Qwen2
    ``config.json``), whose own pre-tokenizer gives other ids than the saved ``tokenizer.json``.
    """
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    declared = Path(path) / "tokenizer_config.json"
    if declared.is_file() and json.loads(declared.read_text()).get("tokenizer_class") in GENERIC_TOKENIZER_CLASSES:
        return PreTrainedTokenizerFast.from_pretrained(path)
    return AutoTokenizer.from_pretrained(path, **kwargs)


def load_policy(config: TrainConfig) -> tuple[Any, Any]:
    """The policy model (float32 weights; mixed precision is applied by the trainer) and its tokenizer.

    ``agentfly:tiny`` builds a tiny Qwen2-architecture model and a tokenizer trained on generated task
    text (no download), ``agentfly:tiny-vl`` a tiny Qwen2.5-VL one and ``agentfly:tiny-qwen3-vl`` a tiny Qwen3-VL
    one (:data:`~agentfly_train.tiny_policies.TINY_POLICIES`); anything else is loaded with ``from_pretrained`` (a
    checkpoint whose configuration has a ``vision_config`` as an image-text-to-text model). The tokenizer is
    :func:`policy_tokenizer`'s.

    Returns:
        ``(model, tokenizer)``.
    """
    from transformers import AutoModelForCausalLM

    model_config = config.actor_rollout_ref.model
    tokenizer = policy_tokenizer(config)
    if config.model_path in TINY_POLICIES:
        model = TINY_POLICIES.get(config.model_path).model(
            tokenizer,
            hidden_size=model_config.tiny_hidden_size,
            num_layers=model_config.tiny_num_layers,
            seed=config.trainer.seed,
        )
    else:
        kwargs = {"trust_remote_code": model_config.trust_remote_code}
        auto = AutoModelForCausalLM
        if _is_vision_language(config.model_path, **kwargs):
            from transformers import AutoModelForImageTextToText as auto
        model = auto.from_pretrained(config.model_path, dtype=torch.float32, **kwargs)
    return model, tokenizer


def _is_vision_language(path: str, **kwargs: Any) -> bool:
    from transformers import AutoConfig

    return getattr(AutoConfig.from_pretrained(path, **kwargs), "vision_config", None) is not None


def policy_images(config: TrainConfig, tokenizer: Any) -> Any:
    """The image inputs (:class:`~agentfly_train.vision.ImageInputs`) of a run whose env shows screenshots
    (``agent.env_kwargs.obs=screenshot``): the model's image processor, with ``agent.image_max_pixels`` applied, and
    the tokenizer's image token; ``None`` for a text run.

    Raises:
        ConfigError: the model has no image processor or its tokenizer no image token (a text-only model).
    """
    if not config.agent.sees_images:
        return None
    from agentfly_train.vision import ImageInputs

    options = {"max_pixels": max_pixels} if (max_pixels := config.agent.image_max_pixels) else {}
    if config.model_path in TINY_POLICIES:
        build = TINY_POLICIES.get(config.model_path).image_processor
        if build is None:
            raise _no_image_processor(config.model_path, "a text model")
        processor = build(**options)
    else:
        from transformers import AutoImageProcessor

        try:  # Qwen2-VL-family processors (Qwen3-VL's too) read max_pixels as their size's longest_edge
            processor = AutoImageProcessor.from_pretrained(
                config.model_path, trust_remote_code=config.actor_rollout_ref.model.trust_remote_code, **options
            )
        except (OSError, ValueError) as error:
            raise _no_image_processor(config.model_path, " ".join(str(error).split())[:160]) from None
    try:
        return ImageInputs.from_tokenizer(processor, tokenizer)
    except ValueError as error:
        raise ConfigError(f"agent.env_kwargs.obs=screenshot needs a vision-language model: {error}") from None


def _no_image_processor(path: str, why: str) -> ConfigError:
    return ConfigError(
        f"agent.env_kwargs.obs=screenshot needs a vision-language model, but {path!r} has no image processor ({why}); "
        f"use e.g. Qwen/Qwen2.5-VL-3B-Instruct, Qwen/Qwen3-VL-2B-Instruct, {TINY_VL_MODEL} or {TINY_QWEN3_VL_MODEL}"
    )


def policy_tokenizer(config: TrainConfig) -> Any:
    """The policy's tokenizer with ``agent.template`` applied, padding on the left (no model is loaded).

    Raises:
        ConfigError: the tokenizer has no chat template and ``agent.template`` gives none.
    """

    if config.model_path in TINY_POLICIES:
        tokenizer = TINY_POLICIES.get(config.model_path).tokenizer()
    else:
        tokenizer = load_tokenizer(
            config.model_path, trust_remote_code=config.actor_rollout_ref.model.trust_remote_code
        )
    template = resolve_chat_template(config.agent.template)
    if template is not None:
        tokenizer.chat_template = template
    if tokenizer.chat_template is None:
        raise ConfigError(f"the tokenizer of {config.model_path!r} has no chat template; set agent.template")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return tokenizer


def lora_config(config: TrainConfig) -> Any:
    """A ``peft.LoraConfig`` when ``actor_rollout_ref.model.lora_rank > 0``, else ``None``."""
    model_config = config.actor_rollout_ref.model
    if model_config.lora_rank <= 0:
        return None
    from peft import LoraConfig

    return LoraConfig(
        r=model_config.lora_rank,
        lora_alpha=model_config.lora_alpha,
        target_modules=model_config.target_modules,
        task_type="CAUSAL_LM",
    )


def make_codec(config: TrainConfig, tokenizer: Any, env: gym.Env, sample_task: dict[str, Any]) -> ChatCodec:
    """The chat codec for the env's tools and format, checked on a sample episode (the task's golden episode, after a
    call of the env's first tool where it calls none; :func:`~agentfly_train.chat_templates.choice.choose_codec`).

    A run whose env shows screenshots gets the policy's image inputs (:func:`policy_images`).

    Raises:
        ConfigError: the env shows screenshots to a model that cannot see them, or the sample episode cannot be
            played (:func:`~agentfly_train.startup_episode.play_startup_episode`), or the template cannot serve the
            run (one line naming ``agent.template`` or ``agent.agent_type``), or the task's prompt and the
            completion budget do not fit ``rollout.max_model_len``.
    """
    from agentfly_envs.contract import env_contract
    from agentfly_train.chat_templates.choice import choose_codec
    from agentfly_train.startup_episode import play_startup_episode

    images = policy_images(config, tokenizer)
    rollout = config.actor_rollout_ref.rollout
    contract = env_contract(env)
    info, steps = play_startup_episode(env, contract, config.env_id, sample_task, rollout.env_step_timeout)
    drop = config.agent.past_reasoning == "drop"
    kwargs = config.agent.chat_template_kwargs
    codec = choose_codec(tokenizer, info["tools"], contract.parser, kwargs, info["messages"], steps, drop, images)
    prompt = len(codec.prompt_ids(info["messages"]))
    if rollout.max_model_len is not None and prompt + rollout.response_length > rollout.max_model_len:
        raise ConfigError(
            f"actor_rollout_ref.rollout.max_model_len={rollout.max_model_len} cannot hold a prompt of the data "
            f"({prompt} tokens) and rollout.response_length={rollout.response_length}: raise max_model_len"
        )
    return codec
