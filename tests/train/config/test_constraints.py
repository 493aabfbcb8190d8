"""A field's constraint is declared on the schema and checked for every field, whatever section holds it."""

import dataclasses

import pytest

from agentfly_train.config import (
    AtLeast,
    ConfigError,
    NonNegative,
    OneOf,
    Positive,
    Registered,
    TrainConfig,
    Within,
    check_fields,
    constraint_of,
    setting,
)


@pytest.mark.parametrize(
    ("constraint", "good", "bad", "message"),
    [
        (Positive(), [1, 0.5], [0, -1, None], "k must be > 0, got 0"),
        (Positive(allow_none=True), [1, None], [0], "k must be > 0, got 0"),
        (NonNegative(" (0: off)"), [0, 3, None], [-1], "k must be >= 0 (0: off), got -1"),
        (AtLeast(1, allow_none=True, note=" (or null)"), [1, None], [0], "k must be >= 1 (or null), got 0"),
        (Within(0, 1), [0, 1, 0.5], [1.5, -0.1], "k must be in [0, 1], got 1.5"),
        (Within(0, 1, low_open=True, high_open=True), [0.5], [0, 1], "k must be in (0, 1), got 0"),
        (OneOf(("keep", "drop")), ["keep", ["keep", "drop"]], ["kep"], "k='kep' is not one of ['keep', 'drop']"),
        (Registered("agentfly_envs.rewards:REWARDS"), [None, "math_equal"], ["math_equl"], "k: reward 'math_equl'"),
    ],
)
def test_a_constraint_passes_good_values_and_names_the_key_for_bad_ones(constraint, good, bad, message):
    for value in good:
        constraint.check("k", value)
    for value in bad:
        with pytest.raises(ConfigError):
            constraint.check("k", value)
    with pytest.raises(ConfigError) as error:
        constraint.check("k", bad[0])
    assert str(error.value).startswith(message)


def test_registered_accepts_its_extra_names_and_imports_its_registry_only_when_checking():
    launcher = Registered("agentfly_train.launchers.base:LAUNCHERS", also=("auto",))
    launcher.check("trainer.launcher", "auto")
    launcher.check("trainer.launcher", "ray")
    with pytest.raises(ConfigError, match=r"trainer\.launcher: launcher 'rya' is not registered; did you mean 'ray'"):
        launcher.check("trainer.launcher", "rya")


def test_check_fields_walks_nested_sections_and_reports_the_dotted_key():
    config = TrainConfig()
    config.actor_rollout_ref.actor.optim.lr = 0.0
    with pytest.raises(ConfigError, match=r"^actor_rollout_ref\.actor\.optim\.lr must be > 0, got 0\.0$"):
        check_fields(config)


def test_a_section_of_ones_own_declares_constraints_the_same_way():
    @dataclasses.dataclass
    class Section:
        size: int = setting(4, Positive())
        share: float = setting(0.5, Within(0, 1))
        names: list[str] = setting(check=OneOf(("a", "b")), factory=lambda: ["a"])  # noqa: RUF009
        free: str = "anything"

    check_fields(Section())
    assert [constraint_of(item) is not None for item in dataclasses.fields(Section)] == [True, True, True, False]
    with pytest.raises(ConfigError, match=r"^run\.names='c' is not one of \['a', 'b'\]"):
        check_fields(Section(names=["a", "c"]), "run.")
