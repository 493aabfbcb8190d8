"""The documented commands: the shell blocks of README.md and docs/, and running one as the docs write it."""

from __future__ import annotations

import functools
import re
import shlex
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.paths import REPO_ROOT

DOC_FILES = (REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md")))
"""The files whose shell blocks (```bash, ```sh, ```shell, ```console) hold documented commands: README.md and every
page under docs/, subfolders included."""
_SHELL_BLOCK = re.compile(
    r"^(?P<indent>[ \t]*)```(?P<lang>bash|sh|shell|console)[ \t]*\n(?P<body>.*?)^(?P=indent)```",
    re.MULTILINE | re.DOTALL,
)


def normalise_command(command: str) -> str:
    """One spelling of a shell command: line continuations joined, comments dropped, tokens re-quoted by ``shlex``
    and separated by single spaces."""
    return shlex.join(shlex.split(command.replace("\\\n", " "), comments=True))


def shell_commands(text: str, name: str) -> dict[str, str]:
    """The commands of a Markdown text's shell blocks (``$ `` lines only in ``console`` blocks), normalised, each
    with where it starts (``"README.md:42"``)."""
    commands: dict[str, str] = {}
    for block in _SHELL_BLOCK.finditer(text):
        first_line = text.count("\n", 0, block.start("body")) + 1
        lines = block["body"].splitlines()
        start = None
        logical = ""
        for number, line in enumerate(lines, first_line):
            line = line.removeprefix(block["indent"])
            if block["lang"] == "console" and start is None:
                if not line.startswith("$ "):
                    continue
                line = line[2:]
            start = number if start is None else start
            logical += line
            if line.endswith("\\"):
                logical = logical[:-1] + " "
                continue
            command = normalise_command(logical)
            if command:
                commands.setdefault(command, f"{name}:{start}")
            start, logical = None, ""
    return commands


def documented_commands() -> dict[str, str]:
    """Every shell command of :data:`DOC_FILES`, normalised, with its file and line."""
    found: dict[str, str] = {}
    for path in DOC_FILES:
        for command, where in shell_commands(path.read_text(), path.relative_to(REPO_ROOT).as_posix()).items():
            found.setdefault(command, where)
    return found


@dataclass
class ReadmeCommand:
    """A documented command as a test runs it.

    Attributes:
        argv: The program and its arguments (``python`` is this interpreter; ``accelerate`` and ``mkdocs`` the ones
            beside it).
        env: The ``NAME=value`` assignments the command starts with.
    """

    argv: list[str]
    env: dict[str, str]

    @property
    def cli_arguments(self) -> list[str]:
        """The arguments after ``-m agentfly_train``, for ``agentfly_train.__main__.main`` in this process."""
        position = self.argv.index("agentfly_train")
        if self.argv[position - 1] != "-m":
            raise ValueError(f"not a `-m agentfly_train` command: {shlex.join(self.argv)}")
        return self.argv[position + 1 :]


_RUN_README_COMMANDS: set[str] = set()


def readme_command(
    command: str, change: Mapping[str, str | Sequence[str]] | None = None, add: Sequence[str] = ()
) -> ReadmeCommand:
    """A command of the README (or docs/) as a test runs it: word for word, with only ``change`` applied (the
    model, data paths, sizes, steps, output paths) and ``add`` appended.

    Args:
        command: The command as the README writes it (continuations and comments allowed).
        change: ``key`` -> new value of its ``key=value`` argument; ``--option`` -> the value(s) after it; any
            other word -> its replacement.
        add: Arguments appended (sizes, steps, the run directory, ``--no-progress``).

    Raises:
        AssertionError: ``command`` is not in the README or docs, or a ``change`` names nothing in it.
    """
    normalised = normalise_command(command)
    assert normalised in documented_commands(), f"not a command of README.md or docs/: {normalised}"
    _RUN_README_COMMANDS.add(normalised)
    words = shlex.split(normalised)
    env = {}
    while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    for name, value in (change or {}).items():
        values = [value] if isinstance(value, str) else list(value)
        if name.startswith("-"):
            assert name in words, f"{name} is not an option of {normalised}"
            start = end = words.index(name) + 1
            while end < len(words) and not words[end].startswith("--"):
                end += 1
            words[start:end] = values
        elif any(word.startswith(f"{name}=") for word in words):
            words = [f"{name}={value}" if word.startswith(f"{name}=") else word for word in words]
        else:
            assert name in words, f"{name!r} is not in {normalised}"
            words = [value if word == name else word for word in words]
    if words[0] == "python":
        words[0] = sys.executable
    elif words[0] == "accelerate":
        words[0] = str(Path(sys.executable).with_name("accelerate"))
    elif words[0] == "mkdocs":
        words[0] = str(Path(sys.executable).with_name("mkdocs"))
    return ReadmeCommand([*words, *add], env)


def runs_readme_command(*commands: str) -> Callable[[Callable[..., Any]], Any]:
    """Marks the test that runs these README commands: it runs once per command, which it gets as its ``readme``
    argument and must build with :func:`readme_command` (checked after it ran). ``tests/test_readme.py`` reads
    these marks to check that every documented command is run by a test."""
    ids = [documented_commands().get(normalise_command(command), "not-in-readme") for command in commands]

    def mark(test: Callable[..., Any]) -> Any:
        @functools.wraps(test)
        def run_and_check(*args: Any, **kwargs: Any) -> None:
            _RUN_README_COMMANDS.clear()
            test(*args, **kwargs)
            assert normalise_command(kwargs["readme"]) in _RUN_README_COMMANDS, (
                f"{test.__name__} did not build its README command with tests.helpers.readme.readme_command"
            )

        return pytest.mark.parametrize("readme", commands, ids=ids)(run_and_check)

    return mark
