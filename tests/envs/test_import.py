"""Import-time contract: fast, torch-free, and the module-qualified id works in a fresh interpreter."""

import subprocess
import sys

from tests.helpers.paths import REPO_ROOT


def run_python(code: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, timeout=120, check=True
    )
    return result.stdout.strip()


def test_import_pulls_no_heavy_libraries():
    out = run_python(
        "import sys, agentfly_envs\n"
        "heavy = ('torch', 'transformers', 'datasets', 'math_verify', 'trl', 'bm25s')\n"
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    assert out == "[]"


def test_import_is_fast():
    out = run_python("import time; t = time.perf_counter(); import agentfly_envs; print(time.perf_counter() - t)")
    assert float(out) < 2.0


def test_module_qualified_id_in_a_fresh_interpreter():
    out = run_python(
        "import gymnasium as gym\n"
        "env = gym.make('agentfly_envs:agentfly/Arith-Calc')\n"
        "obs, info = env.reset(seed=0)\n"
        "print(type(env.unwrapped).__name__, bool(obs), [t['function']['name'] for t in info['tools']])"
    )
    assert out == "ToolEnv True ['calculator']"


def test_gsm8k_module_qualified_id_with_data_files(gsm8k_sample):
    out = run_python(
        "import gymnasium as gym\n"
        f"env = gym.make('agentfly_envs:agentfly/GSM8K-Calc', data_files={str(gsm8k_sample)!r})\n"
        "print(len(env.unwrapped.tasks))"
    )
    assert out.endswith("12")


def test_base_dependencies_pull_no_torch():
    import tomllib

    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    base = " ".join(project["dependencies"]).lower()
    for heavy in ("torch", "trl", "accelerate", "vllm", "peft"):
        assert heavy not in base, heavy
    assert any(requirement.startswith("torch") for requirement in project["optional-dependencies"]["train"])
