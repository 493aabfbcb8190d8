"""The house's rules, read from the code: imports run downhill (no circle between modules or between the rooms of a
package, imports inside functions included), no module outgrows 600 lines, and the trainer reads an env only through
its contract."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("agentfly_train", "agentfly_envs")


@pytest.fixture(scope="module")
def graphs() -> dict[str, dict[str, set[str]]]:
    """Each package's import graph (:mod:`tests.helpers.import_graph`, read in a fresh interpreter)."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.helpers.import_graph", *PACKAGES],
        cwd=ROOT, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return {package: {k: set(v) for k, v in graph.items()} for package, graph in json.loads(done.stdout).items()}


def _modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one member (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            members = []
            while not members or members[-1] != node:
                members.append(stack.pop())
            if len(members) > 1:
                circles.append(sorted(members))

    for node in graph:
        if node not in index:
            visit(node)
    return circles


def _rooms(graph: dict[str, set[str]], package: str) -> dict[str, set[str]]:
    """The graph between the package's rooms: its top-level modules and subpackages (the package itself left out)."""

    def room(module: str) -> str:
        return ".".join(module.split(".")[:2])

    rooms: dict[str, set[str]] = {}
    for module, targets in graph.items():
        if module == package:
            continue
        rooms.setdefault(room(module), set()).update(
            room(t) for t in targets if t != package and room(t) != room(module)
        )
    return rooms


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_circle_between_modules(graphs, package):
    assert _circles(graphs[package]) == []


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_circle_between_rooms(graphs, package):
    assert _circles(_rooms(graphs[package], package)) == []


def test_no_module_of_the_trainer_is_over_600_lines():
    long = {
        str(path.relative_to(ROOT)): n
        for path in _modules("agentfly_train")
        if (n := len(path.read_text().splitlines())) > 600
    }
    assert long == {}


def test_a_circle_is_found_where_there_is_one():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_trainer_never_reaches_into_an_unwrapped_env():
    reaching = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in _modules("agentfly_train")
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\.unwrapped\b", line)
    ]
    assert reaching == []
