"""The import graph of a package, read from its source (imports inside functions and under ``TYPE_CHECKING``
included): ``python -m tests.helpers.import_graph PACKAGE ...`` prints ``{package: {module: [imported modules]}}`` as
JSON. ``tests/test_structure.py`` runs it in a fresh interpreter: CPython 3.11's ``ast.parse`` can fail with
"AST constructor recursion depth mismatch" in a process whose recursion limit another test has moved."""

import ast
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _modules(package: str) -> dict[str, Path]:
    modules = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        modules[name.removesuffix(".__init__")] = path
    return modules


def _imports(package: str) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (anywhere in its body, under TYPE_CHECKING too)."""
    modules = _modules(package)

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = here.split(".")[: len(here.split(".")) - node.level + 1]
                    base = ".".join([*parts, base] if base else parts)
                targets = [f"{base}.{alias.name}" for alias in node.names]
            else:
                continue
            for target in targets:
                found = known(target) if target.startswith(package) else None
                if found is not None and found != name:
                    graph[name].add(found)
    return graph


if __name__ == "__main__":
    print(json.dumps({package: {k: sorted(v) for k, v in _imports(package).items()} for package in sys.argv[1:]}))
