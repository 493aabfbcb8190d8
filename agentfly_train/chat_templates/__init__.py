"""Chat templates shipped with agentfly (``<name>.jinja`` files in this package)."""

from __future__ import annotations

from pathlib import Path

TEMPLATE_DIR = Path(__file__).parent


def chat_template(name: str) -> str:
    """The Jinja source of the shipped template ``name`` (e.g. ``compact_tools``).

    Raises:
        FileNotFoundError: no such template (the message lists the shipped names).
    """
    path = TEMPLATE_DIR / f"{name}.jinja"
    if not path.is_file():
        raise FileNotFoundError(f"no chat template {name!r} in agentfly_train; shipped: {shipped_templates()}")
    return path.read_text()


def shipped_templates() -> list[str]:
    """Names of the templates in this package."""
    return sorted(path.stem for path in TEMPLATE_DIR.glob("*.jinja"))
