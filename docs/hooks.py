"""MkDocs hooks: the configuration key reference is generated from the config dataclasses at build time.

``docs/reference/keys.md`` holds :data:`MARKER`; :func:`on_page_markdown` replaces it with
``agentfly_train.config.reference.key_reference_markdown()``, so the page lists every key with its default and help
as the code has them.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
MARKER = "<!-- key-reference -->"
"""Where a page gets the generated key tables."""


def on_page_markdown(markdown: str, page, config, files) -> str:
    """Replaces :data:`MARKER` with the generated key reference (this checkout's, whatever is installed)."""
    if MARKER not in markdown:
        return markdown
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    from agentfly_train.config.reference import key_reference_markdown

    return markdown.replace(MARKER, key_reference_markdown())
