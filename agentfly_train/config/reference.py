"""Every configuration key with its default, type and help text, read from the config dataclasses themselves.

The help of a key is its entry in the ``Attributes:`` section of the docstring of the dataclass that owns the field
(:mod:`agentfly_train.config`), so the documentation's key reference (``docs/reference/keys.md``, generated at build
time) and ``python -m agentfly_train list keys`` cannot drift from the schema. Only the standard library is imported.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, fields, is_dataclass
from typing import Any

from agentfly_train.config.constraints import constraint_of
from agentfly_train.config.schema import TrainConfig

_ROLE = re.compile(r":(?:data|class|func|meth|mod|attr|obj|exc):`~?([^`]+)`")
_ENTRY = re.compile(r"(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?: \([^)]*\))?:\s*(?P<text>.*)")
_SENTENCE_END = re.compile(r"(?<!e\.g)(?<!i\.e)(?<!etc)(?<!vs)(?<!Dr)(?<!al)\.(?=\s)")


@dataclass(frozen=True)
class KeyDoc:
    """One configuration key.

    Attributes:
        key: The dotted key, e.g. ``actor_rollout_ref.rollout.name``.
        default: Its default value (a fresh copy for mutable defaults).
        type: Its annotation as written in the dataclass, e.g. ``int | None``.
        help: The first sentence of its docstring entry, on one line (empty when the dataclass documents no such
            attribute).
        description: The whole docstring entry, on one line.
        constraint: What its values must be (:meth:`~agentfly_train.config.constraints.Constraint.describe`, e.g.
            ``> 0``), or ``""`` when the types say it all.
    """

    key: str
    default: Any
    type: str
    help: str
    description: str
    constraint: str = ""


def _plain(text: str) -> str:
    """Docstring markup as Markdown: Sphinx roles dropped and ````literal```` as ```literal```."""
    return _ROLE.sub(r"`\1`", text).replace("``", "`")


def attribute_docs(cls: type) -> dict[str, str]:
    """The entries of the ``Attributes:`` section of a class's (Google-style) docstring, each joined to one line.

    An entry starts at ``name: text`` one level below ``Attributes:`` and goes on over the lines indented deeper.

    Example:
        >>> class Point:
        ...     '''A point.
        ...
        ...     Attributes:
        ...         x: Across, in
        ...             metres.
        ...         y: Up.
        ...     '''
        >>> attribute_docs(Point)
        {'x': 'Across, in metres.', 'y': 'Up.'}
    """
    entries: dict[str, list[str]] = {}
    section_indent: int | None = None
    entry_indent: int | None = None
    current: list[str] | None = None
    for line in inspect.cleandoc(cls.__doc__ or "").splitlines():
        indent = len(line) - len(line.lstrip())
        if section_indent is None:
            if line.strip() == "Attributes:":
                section_indent = indent
            continue
        if not line.strip():
            continue
        if indent <= section_indent:
            break
        if entry_indent is None:
            entry_indent = indent
        match = _ENTRY.fullmatch(line.strip())
        if indent == entry_indent and match:
            current = entries.setdefault(match["name"], [])
            current.append(match["text"])
        elif indent > entry_indent and current is not None:
            current.append(line.strip())
    return {name: " ".join(" ".join(parts).split()) for name, parts in entries.items()}


def first_sentence(text: str) -> str:
    """The first sentence of ``text``: up to a period followed by a space, outside literals, parentheses and
    abbreviations.

    Example:
        >>> first_sentence("Nodes (e.g. 2; see Dr. GRPO. Or not). With Ray, the workers.")
        'Nodes (e.g. 2; see Dr. GRPO. Or not).'
    """
    inside_literal, depth = False, 0
    for position, character in enumerate(text):
        if character == "`":
            inside_literal = not inside_literal
        elif inside_literal:
            continue
        elif character in "([":
            depth += 1
        elif character in ")]":
            depth = max(depth - 1, 0)
        elif depth == 0 and _SENTENCE_END.match(text, position):
            return text[: position + 1]
    return text


def key_reference(schema: Any = None, prefix: str = "") -> list[KeyDoc]:
    """Every key of the configuration, in schema order, with its default, type and help.

    Args:
        schema: A config dataclass instance whose fields are walked (default: a fresh :class:`TrainConfig`, whose
            values are the defaults); nested dataclass fields are recursed into.
        prefix: The dotted prefix of ``schema``'s keys.

    Example:
        >>> doc = next(doc for doc in key_reference() if doc.key == "trainer.total_training_steps")
        >>> doc.default, doc.type, doc.help
        (None, 'int | None', 'Rollout steps to run; `null` runs `total_epochs` over the data.')
    """
    schema = TrainConfig() if schema is None else schema
    helps = attribute_docs(type(schema))
    keys: list[KeyDoc] = []
    for item in fields(schema):
        key = f"{prefix}{item.name}"
        value = getattr(schema, item.name)
        if is_dataclass(value):
            keys += key_reference(value, f"{key}.")
            continue
        description = _plain(helps.get(item.name, ""))
        type_name = item.type if isinstance(item.type, str) else getattr(item.type, "__name__", str(item.type))
        constraint = constraint_of(item)
        described = constraint.describe() if constraint is not None else ""
        keys.append(KeyDoc(key, value, type_name, first_sentence(description), description, described))
    return keys


def format_default(value: Any) -> str:
    """A default as it is written in a config file or an override (``null``, ``true``, ``[console]``, ``{}``).

    Example:
        >>> [format_default(v) for v in (None, True, 1e-06, "auto", "", ["console"], {"tools": 1})]
        ['null', 'true', '1e-06', 'auto', '""', '[console]', '{tools: 1}']
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return value or '""'
    if isinstance(value, list | tuple):
        return f"[{', '.join(format_default(v) for v in value)}]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {format_default(v)}" for k, v in value.items()) + "}"
    return repr(value)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def key_reference_markdown() -> str:
    """The key reference as Markdown: one table per top-level section (``agent``, ``algorithm``, ...), each key
    with its default, type and description."""
    sections: dict[str, list[KeyDoc]] = {}
    for doc in key_reference():
        sections.setdefault(doc.key.split(".", 1)[0], []).append(doc)
    config = TrainConfig()
    parts = []
    for section, docs in sections.items():
        summary = _plain(inspect.cleandoc(type(getattr(config, section)).__doc__ or "").split("\n\n", 1)[0])
        rows = [
            f"| `{doc.key}` | `{_cell(format_default(doc.default))}` | `{_cell(doc.type)}` | "
            f"{_cell(doc.constraint)} | {_cell(doc.description)} |"
            for doc in docs
        ]
        parts.append(
            "\n".join(
                [
                    f"## `{section}`",
                    "",
                    " ".join(summary.split()),
                    "",
                    "| key | default | type | values | description |",
                    "| --- | --- | --- | --- | --- |",
                    *rows,
                ]
            )
        )
    return "\n\n".join(parts) + "\n"
