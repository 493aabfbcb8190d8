"""The training configuration: its schema, how it is loaded and how it is checked.

- :mod:`~agentfly_train.config.errors`: :class:`ConfigError` and the one-value checks (the bottom layer);
- :mod:`~agentfly_train.config.constraints`: what a field's values must be, declared on the field;
- :mod:`~agentfly_train.config.schema`: the sections as dataclasses and their defaults (standard library only);
- :mod:`~agentfly_train.config.loading`: YAML files and ``key=value`` overrides merged onto the schema;
- :mod:`~agentfly_train.config.validation`: the checks the types cannot make;
- :mod:`~agentfly_train.config.reference`: every key with its default, type, constraint and help.

This module only hands their names on; the package's own modules import from the module that defines a name.
"""

from agentfly_train.config.actor_rollout_ref import (
    DTYPES,
    ActorConfig,
    ActorRolloutRefConfig,
    FSDPConfig,
    ModelConfig,
    OptimConfig,
    RefConfig,
    RolloutConfig,
)
from agentfly_train.config.agent import AgentConfig, ContextConfig
from agentfly_train.config.constraints import (
    CHECK,
    AtLeast,
    Constraint,
    NonNegative,
    OneOf,
    Positive,
    Registered,
    Within,
    constraint_of,
    setting,
)
from agentfly_train.config.errors import (
    ConfigError,
    check_choice,
    check_non_negative,
    check_positive,
    registered,
)
from agentfly_train.config.loading import (
    PRESETS_DIR,
    QUICKSTART,
    TYPE_NAMES,
    WHOLE_MAPPINGS,
    config_keys,
    load_config,
    load_user_code,
    resolve_config_file,
)
from agentfly_train.config.schema import (
    FILES_ENV,
    LOGGERS,
    RESUME_MODES,
    SFT_SCHEDULES,
    TINY_MODEL,
    TINY_QWEN3_VL_MODEL,
    TINY_VL_MODEL,
    AlgorithmConfig,
    AsyncTrainingConfig,
    CriticConfig,
    CriticModelConfig,
    CustomRewardFunctionConfig,
    DataConfig,
    EvalConfig,
    GiGPOConfig,
    KLControlConfig,
    RolloutCorrectionConfig,
    SFTWarmupConfig,
    TrainConfig,
    TrainerConfig,
)
from agentfly_train.config.validation import (
    check_fields,
    ignored_settings,
    validate,
)

__all__ = [
    "CHECK",
    "DTYPES",
    "FILES_ENV",
    "LOGGERS",
    "PRESETS_DIR",
    "QUICKSTART",
    "RESUME_MODES",
    "SFT_SCHEDULES",
    "TINY_MODEL",
    "TINY_QWEN3_VL_MODEL",
    "TINY_VL_MODEL",
    "TYPE_NAMES",
    "WHOLE_MAPPINGS",
    "ActorConfig",
    "ActorRolloutRefConfig",
    "AgentConfig",
    "AlgorithmConfig",
    "AsyncTrainingConfig",
    "AtLeast",
    "ConfigError",
    "Constraint",
    "ContextConfig",
    "CriticConfig",
    "CriticModelConfig",
    "CustomRewardFunctionConfig",
    "DataConfig",
    "EvalConfig",
    "FSDPConfig",
    "GiGPOConfig",
    "KLControlConfig",
    "ModelConfig",
    "NonNegative",
    "OneOf",
    "OptimConfig",
    "Positive",
    "RefConfig",
    "Registered",
    "RolloutConfig",
    "RolloutCorrectionConfig",
    "SFTWarmupConfig",
    "TrainConfig",
    "TrainerConfig",
    "Within",
    "check_choice",
    "check_fields",
    "check_non_negative",
    "check_positive",
    "config_keys",
    "constraint_of",
    "ignored_settings",
    "load_config",
    "load_user_code",
    "registered",
    "resolve_config_file",
    "setting",
    "validate",
]
