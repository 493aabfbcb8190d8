"""The key reference is complete: every configuration key has its default, type and help from the config
dataclasses' docstrings, and the generated Markdown (docs/reference/keys.md at build time) lists every key."""

import dataclasses

from agentfly_train.config import TrainConfig, config_keys
from agentfly_train.config.reference import attribute_docs, format_default, key_reference, key_reference_markdown


def _dataclasses(schema: type = TrainConfig) -> list[type]:
    found = [schema]
    instance = schema()
    for item in dataclasses.fields(schema):
        value = getattr(instance, item.name)
        if dataclasses.is_dataclass(value):
            found += _dataclasses(type(value))
    return found


def test_the_reference_has_every_key_in_schema_order():
    assert [doc.key for doc in key_reference()] == list(config_keys())


def test_every_key_has_help():
    missing = {doc.key for doc in key_reference() if not doc.help.strip()}
    assert not missing, (
        "keys without an entry in their dataclass's Attributes: docstring section (add one in "
        f"agentfly_train/config.py): {sorted(missing)}"
    )
    assert all("\n" not in doc.help and doc.description.startswith(doc.help) for doc in key_reference())


def test_every_documented_attribute_is_a_field():
    for schema in _dataclasses():
        names = {item.name for item in dataclasses.fields(schema)}
        assert set(attribute_docs(schema)) <= names, f"{schema.__name__} documents attributes it does not have"


def test_defaults_and_types_are_the_schema_s():
    docs = {doc.key: doc for doc in key_reference()}
    config = TrainConfig()
    assert docs["actor_rollout_ref.actor.optim.lr"].default == config.actor_rollout_ref.actor.optim.lr == 1e-6
    assert docs["critic.optim.lr"].default == config.critic.optim.lr == 1e-5
    assert docs["trainer.logger"].default == ["console"] and docs["trainer.logger"].type == "list[str]"
    assert docs["data.train_size"].type == "int | None"
    assert docs["algorithm.kl_ctrl.kl_coef"].help == "β at the start (> 0)."
    assert (
        docs["algorithm.norm_adv_by_std_in_grpo"].help
        == "Divide GRPO advantages by the group's std (`false`: Dr. GRPO)."
    )


def test_the_markdown_lists_every_key_with_its_default():
    markdown = key_reference_markdown()
    for doc in key_reference():
        assert f"| `{doc.key}` | `{format_default(doc.default).replace('|', chr(92) + '|')}` |" in markdown, doc.key
    sections = [line for line in markdown.splitlines() if line.startswith("## ")]
    assert sections == [f"## `{item.name}`" for item in dataclasses.fields(TrainConfig)]


def test_each_constrained_key_shows_its_constraint():
    docs = {doc.key: doc for doc in key_reference()}
    assert docs["agent.max_turns"].constraint == "> 0"
    assert docs["algorithm.gamma"].constraint == "in [0, 1]"
    assert docs["sft.warmup_ratio"].constraint == "in [0, 1)"
    assert docs["agent.past_reasoning"].constraint == "one of keep, drop"
    assert docs["algorithm.adv_estimator"].constraint == "a name in advantage estimators"
    assert docs["trainer.launcher"].constraint == "a name in launchers or auto"
    assert docs["trainer.project_name"].constraint == ""
    assert "| `agent.max_turns` | `4` | `int` | > 0 |" in key_reference_markdown()
