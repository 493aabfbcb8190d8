"""What of this interpreter's host paths a session's root shows, for the tests' expectations."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def runtime_dirs_in_tmp() -> list[str]:
    """The entries of a session's private ``/tmp`` that the interpreter brings: when it lives under the host's
    ``/tmp`` (a checkout or a virtual environment there), its read-only mount needs the path's first directory
    there (e.g. ``['ci1']`` for ``/tmp/ci1/.venv``); elsewhere none."""
    prefixes = {os.path.realpath(path) for path in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)}
    return sorted({Path(path).relative_to("/tmp").parts[0] for path in prefixes if path.startswith("/tmp/")})
