"""A griffe extension for the API reference, which reads the project's docstrings as they are written: they head
their doctests ``Example:``, which griffe's Google-style parser reads as an admonition (its section is
``Examples:``), so the heading is renamed and the doctests render as code; and they cross-reference with Sphinx
roles (``:class:`Tool```), which Markdown would print as they are, so a role becomes inline code."""

from __future__ import annotations

import re
from typing import Any

import griffe

_EXAMPLE_HEADING = re.compile(r"^(\s*)Example:\s*$", re.MULTILINE)
_ROLE = re.compile(r":(?:data|class|func|meth|mod|attr|obj|exc):`~?([^`]+)`")


class ExampleSections(griffe.Extension):
    """Rewrites a docstring's ``Example:`` heading as ``Examples:``, and its roles as inline code, when it loads."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            value = _EXAMPLE_HEADING.sub(r"\1Examples:", obj.docstring.value)
            obj.docstring.value = _ROLE.sub(r"``\1``", value)
