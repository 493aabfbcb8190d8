"""The wheelhouse a GPU machine without network needs to run the trainer, built here; and the check, there, that what
got installed serves the trainer.

The GPU machines within this project's reach have Python 3.12, torch 2.11 (CUDA 13), transformers, accelerate,
peft, datasets' binary dependencies (pyarrow, pandas, xxhash) and the rest of a scientific stack, but no trl,
datasets, gymnasium, hydra or omegaconf, and no network: ``build`` downloads those (pure-Python wheels only, as
named in ``wheelhouse.txt``, fallbacks included) into ``.gpu/wheels`` and copies the real Qwen3 tokenizer (made by
``../shared/tools/fetch-tokenizers``) to ``.gpu/tokenizer``; ``check``, run there after installing, verifies that
every installed requirement of the trainer and of each carried package is met (the versions the machine came with
included) and exits 1 naming what is not.

    python benchmarks/gpu/wheelhouse.py build     # here: .gpu/ (git-ignored), under 60 MiB
    python benchmarks/gpu/wheelhouse.py check     # there, after benchmarks/gpu/run.sh installed .gpu/wheels
"""

from __future__ import annotations

import argparse
import importlib.metadata as metadata
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = Path(__file__).with_name("wheelhouse.txt")
WHEELS = ROOT / ".gpu" / "wheels"
TOKENIZER = ROOT / ".gpu" / "tokenizer"
FETCHED_TOKENIZER = Path.home() / ".cache" / "agentfly-tokenizers" / "qwen3-tiny"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json")
SIZE_LIMIT = 60 * 2**20
TRAINER_NEEDS = ("torch", "transformers", "accelerate", "trl", "datasets", "gymnasium", "hydra-core", "omegaconf",
                 "math-verify", "numpy")  # fmt: skip
"""The distributions a GPU benchmark run imports (the project's requirements on them are checked)."""
MACHINE_VERSIONS = {"torch": "2.11.0", "transformers": "5.17.0", "accelerate": "1.15.0", "numpy": "2.5.2",
                    "huggingface-hub": "1.33.0"}  # fmt: skip
"""What the GPU machine came with, of what the trainer needs (read by ``check`` on an H100 machine, 2026-11-27)."""
PLATFORM = ["--python-version", "3.12", "--implementation", "cp", "--platform", "manylinux_2_28_x86_64",
            "--platform", "manylinux2014_x86_64"]  # fmt: skip


def manifest(path: Path = MANIFEST) -> list[Requirement]:
    """The pinned wheels of ``wheelhouse.txt`` (``name==version`` per line; ``#`` starts a comment). A name may
    appear twice: a fallback pip picks when the machine's own packages rule the first version out."""
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [Requirement(line) for line in lines if line]


def project_requirements() -> dict[str, Requirement]:
    """The project's requirements (base and ``train`` extra) from ``pyproject.toml``, by canonical name."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    listed = [*project["dependencies"], *project["optional-dependencies"]["train"]]
    return {canonicalize_name(requirement.name): requirement for requirement in map(Requirement, listed)}


def unmet(requirements: Iterable[Requirement], versions: Mapping[str, str], needed_by: str) -> list[str]:
    """The requirements (extras and markers that do not apply left out) that ``versions`` (canonical name ->
    version) does not meet, each as ``"<needed_by> needs <requirement> (found <version or nothing>)"``."""
    problems = []
    for requirement in requirements:
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        found = versions.get(canonicalize_name(requirement.name))
        if found is None or not requirement.specifier.contains(Version(found), prereleases=True):
            problems.append(f"{needed_by} needs {requirement} (found {found or 'nothing'})")
    return problems


def installed_versions() -> dict[str, str]:
    """Every distribution this interpreter sees, by canonical name (the first on the path wins, as imports do)."""
    versions: dict[str, str] = {}
    for distribution in metadata.distributions():
        versions.setdefault(canonicalize_name(distribution.metadata["Name"]), distribution.version)
    return versions


def check_installed() -> list[str]:
    """What the installed packages lack: the project's requirements on :data:`TRAINER_NEEDS`, and each carried
    package's own requirements."""
    versions = installed_versions()
    wanted = project_requirements()
    problems = unmet([wanted[canonicalize_name(name)] for name in TRAINER_NEEDS], versions, "agentfly")
    for name in sorted({canonicalize_name(requirement.name) for requirement in manifest()}):
        if name in versions:
            own = [Requirement(line) for line in metadata.distribution(name).requires or []]
            problems += unmet(own, versions, f"{name} {versions[name]}")
    return problems


def build(wheels: Path = WHEELS, tokenizer: Path = TOKENIZER) -> int:
    """Downloads (or, for a package published as source only, builds) every wheel of the manifest into ``wheels``
    and copies the fetched Qwen3 tokenizer to ``tokenizer``; returns the wheels' total size in bytes.

    Raises:
        SystemExit: a wheel is not pure Python, the total is over :data:`SIZE_LIMIT`, or the tokenizer was not
            fetched (one line naming the fix).
    """
    if not (FETCHED_TOKENIZER / "tokenizer.json").exists():
        raise SystemExit(f"no Qwen3 tokenizer at {FETCHED_TOKENIZER}: run ../shared/tools/fetch-tokenizers first")
    shutil.rmtree(wheels, ignore_errors=True)
    wheels.mkdir(parents=True)
    pip = [sys.executable, "-m", "pip", "-q"]
    for requirement in manifest():
        download = [*pip, "download", "--no-deps", "--only-binary=:all:", *PLATFORM, "-d", str(wheels)]
        if subprocess.run([*download, str(requirement)], capture_output=True, check=False).returncode != 0:
            subprocess.run([*pip, "wheel", "--no-deps", "-w", str(wheels), str(requirement)], check=True)
    impure = [path.name for path in wheels.glob("*.whl") if not path.stem.endswith("-none-any")]
    if impure:
        raise SystemExit(f"not pure-Python wheels: {', '.join(impure)}")
    total = sum(path.stat().st_size for path in wheels.glob("*.whl"))
    if total > SIZE_LIMIT:
        raise SystemExit(f"the wheelhouse is {total / 2**20:.1f} MiB, over {SIZE_LIMIT / 2**20:.0f} MiB")
    shutil.rmtree(tokenizer, ignore_errors=True)
    tokenizer.mkdir(parents=True)
    for name in TOKENIZER_FILES:
        if (FETCHED_TOKENIZER / name).exists():
            shutil.copy(FETCHED_TOKENIZER / name, tokenizer / name)
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("build", "check"))
    args = parser.parse_args()
    if args.action == "build":
        total = build()
        count = len(list(WHEELS.glob("*.whl")))
        print(f"{count} wheels, {total / 2**20:.1f} MiB, in {WHEELS}; tokenizer in {TOKENIZER}")
        return
    problems = check_installed()
    for problem in problems:
        print(problem)
    if problems:
        raise SystemExit(1)
    versions = installed_versions()
    print("installed: " + ", ".join(f"{name} {versions[canonicalize_name(name)]}" for name in TRAINER_NEEDS))


if __name__ == "__main__":
    main()
