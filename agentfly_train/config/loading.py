"""Loading a configuration: YAML files and Hydra-style dotted overrides merged onto the schema with OmegaConf.

The embedded quickstart (a tiny local model on ``agentfly/Arith-Calc``, CPU, no network) is the packaged preset
``quickstart`` (``agentfly_train/presets/quickstart.yaml``), which ``python -m agentfly_train`` runs when given no
arguments. :func:`load_config` merges ``--config FILE`` YAML files and ``key=value`` overrides onto the schema, so an
unknown key or a value of the wrong type fails before any model is loaded, naming the key and the closest valid
ones. ``agent.init_args.<key>`` is accepted as a spelling of ``agent.<key>``.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any

from agentfly_envs.user_code import UserCodeError
from agentfly_train.config.errors import ConfigError
from agentfly_train.config.schema import TrainConfig
from agentfly_train.config.validation import validate

PRESETS_DIR = Path(__file__).parent.parent / "presets"
"""Packaged config files, named by their stem in ``--config NAME`` (e.g. ``--config quickstart``)."""
QUICKSTART = PRESETS_DIR / "quickstart.yaml"
"""The embedded default job of ``python -m agentfly_train`` with no arguments."""
TYPE_NAMES = {"Integer": "an integer", "Float": "a number", "bool": "true or false", "string": "a string"}
"""OmegaConf's type names in a conversion error -> what the one-line error says was expected."""
WHOLE_MAPPINGS = ("agent.env_kwargs", "data.val_env_kwargs")
"""Mappings that a config file, or an override of the whole key, replaces instead of merging into: the default's
keys (``level``, ``task_seed``) belong to the default env. ``agent.env_kwargs.level=...`` still sets one key."""


MOVED_KEYS = {"algorithm.gigpo.gamma": "algorithm.turn_gamma"}
"""Keys that moved: the old key -> the one that holds its value now (setting the old key is a one-line error)."""


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
        if key in MOVED_KEYS:
            raise ConfigError(f"config key {key!r} (from {source}) is now {MOVED_KEYS[key]}; set that") from None
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


def _clear_whole_mappings(config: Any, keys: Sequence[str]) -> None:
    from omegaconf import OmegaConf

    for key in keys:
        OmegaConf.update(config, key, {}, merge=False)
