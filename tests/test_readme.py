"""The README's code and claims stay true."""

import json
import re
import shlex
import subprocess
import sys

import pytest

from tests.helpers.paths import REPO_ROOT
from tests.helpers.readme import DOC_FILES, documented_commands, normalise_command, readme_command, shell_commands

README = (REPO_ROOT / "README.md").read_text()

NOT_RUN = {
    "python3 -m venv .venv && . .venv/bin/activate && pip install torch==2.13.0 && "
    "pip install -c .ci/constraints.txt -e '.[train,dev]' && python -m agentfly_train": (
        "the setup: CI (.ci/run) installs the same way into a fresh venv, and the quickstart it ends with is "
        "tests/learning/test_quickstart.py's command"
    ),
    ". .venv/bin/activate && python -m pytest -q": "the test suite (.ci/run runs it, then the slow and long tests)",
    "accelerate launch examples/trl_grpo.py model=Qwen/Qwen2.5-0.5B-Instruct grpo.use_cpu=false": (
        "needs a GPU (grpo.use_cpu=false) and a Hub model; the CPU command above it runs in tests/e2e/test_examples.py"
    ),
    "accelerate launch --config_file configs/accelerate/fsdp.yaml -m agentfly_train "
    "--config configs/gsm8k_calc_grpo.yaml": (
        "needs GPUs (the FSDP config launches 8 GPU processes); FSDP2 on two CPU processes runs in "
        "tests/train/trainer/test_distributed.py"
    ),
    "VLLM_SERVER_DEV_MODE=1 python -m vllm.entrypoints.openai.api_server --model Qwen/Qwen2.5-3B-Instruct "
    "--logprobs-mode processed_logprobs --enforce-eager --port 8000": (
        "a 3B model from the Hub on a GPU; tests/train/generation/test_vllm_server.py starts the same server on the "
        "tiny model"
    ),
    "python -m agentfly_train ... actor_rollout_ref.rollout.name=vllm actor_rollout_ref.rollout.mode=server "
    "actor_rollout_ref.rollout.server_host=127.0.0.1 actor_rollout_ref.rollout.server_port=8000": (
        "a template (`...` is the rest of a training command) for the server above; "
        "tests/train/generation/test_vllm_server.py trains with these keys"
    ),
    "ray start --head --node-ip-address=<head_ip> --port=6379": "needs several nodes (<head_ip> is a placeholder)",
    "ray start --address=<head_ip>:6379": "needs several nodes (<head_ip> is a placeholder)",
    "RAY_ADDRESS=<head_ip>:6379 python -m agentfly_train ... trainer.nnodes=2 trainer.n_gpus_per_node=8 "
    "trainer.default_local_dir=/shared/runs/my-run": (
        "needs 2 nodes of 8 GPUs; tests/train/launchers/test_ray_launch.py runs the Ray launch on one node's CPUs"
    ),
}
"""The documented commands no test runs, each with why it cannot run here. Every other command of the shell blocks of
the README and of the pages under docs/ is run by the test marked ``@runs_readme_command`` with it."""


MARKED_COMMANDS = """
import ast, json, pathlib, sys
root = pathlib.Path(sys.argv[1])
marked, errors = {}, []
for path in sorted((root / "tests").rglob("*.py")):
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "runs_readme_command":
            for argument in node.args:
                where = f"{path.relative_to(root)}:{argument.lineno}"
                if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
                    marked[argument.value] = where
                else:
                    errors.append(f"{where}: runs_readme_command takes the README's commands as string literals")
print(json.dumps({"marked": marked, "errors": errors}))
"""


def marked_commands() -> dict[str, str]:
    """Every command named in a ``runs_readme_command(...)`` mark under tests/, normalised, with the test file.

    The test files are parsed in a child process: CPython 3.11's ``ast.parse`` shares one recursion counter between
    threads, and a thread another test left running (e.g. ScienceWorld's Java gateway) made it fail with
    ``SystemError: AST constructor recursion depth mismatch``.
    """
    found = json.loads(
        subprocess.run(
            [sys.executable, "-c", MARKED_COMMANDS, str(REPO_ROOT)], capture_output=True, text=True, check=True
        ).stdout
    )
    assert not found["errors"], "\n".join(found["errors"])
    return {normalise_command(command): where for command, where in found["marked"].items()}


def test_every_documented_command_is_run_by_a_test_or_says_why_not():
    documented = documented_commands()
    marked = marked_commands()
    not_run = {normalise_command(command): reason for command, reason in NOT_RUN.items()}
    untested = [f"{where}: {command}" for command, where in documented.items() if command not in {**marked, **not_run}]
    assert not untested, (
        "documented commands no test runs: mark the test that runs each with @runs_readme_command(...) and build it "
        "with tests.helpers.readme.readme_command, or list it in NOT_RUN with the reason:\n" + "\n".join(untested)
    )
    stale = [f"{where}: {command}" for command, where in marked.items() if command not in documented]
    stale += [f"NOT_RUN: {command}" for command in not_run if command not in documented]
    assert not stale, "commands no longer in the README or docs:\n" + "\n".join(stale)
    assert not set(marked) & set(not_run), "a command is both run and listed in NOT_RUN"


def test_commands_are_read_from_every_kind_of_shell_block():
    text = (
        "```bash\npython a.py --x 1 \\\n    --y 2   # comment\n\n# only a comment\nb c\n```\n"
        "- item\n\n  ```sh\n  python -m pkg key=[a,b]\n  ```\n"
        "```console\n$ echo hi\nhi\n```\n```python\nprint(1)\n```\n"
    )
    assert shell_commands(text, "doc.md") == {
        "python a.py --x 1 --y 2": "doc.md:2",
        "b c": "doc.md:6",
        "python -m pkg 'key=[a,b]'": "doc.md:11",
        "echo hi": "doc.md:14",
    }


def test_a_readme_command_is_run_with_only_the_named_changes():
    command = readme_command(
        "python -m agentfly_train report RUN_DIR --out /tmp/run.html", {"RUN_DIR": "x", "--out": "y.html"}, ["--z"]
    )
    assert command.argv[1:] == ["-m", "agentfly_train", "report", "x", "--out", "y.html", "--z"]
    assert command.cli_arguments == ["report", "x", "--out", "y.html", "--z"] and command.env == {}
    with pytest.raises(AssertionError, match=r"not a command of README\.md"):
        readme_command("python -m agentfly_train report")
    with pytest.raises(AssertionError, match="is not in"):
        readme_command("python -m agentfly_train report RUN_DIR --out /tmp/run.html", {"OTHER": "x"})


def inline_training_commands() -> dict[str, str]:
    """The ``python -m agentfly_train`` commands that the prose of README.md and docs/ quotes in inline code with
    ``key=value`` overrides (templates with ``...`` left out), whitespace normalised, each with its file."""
    found: dict[str, str] = {}
    for path in DOC_FILES:
        prose = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.MULTILINE | re.DOTALL)
        for span in re.findall(r"(?<!`)`(python -m agentfly_train\s[^`]*)`(?!`)", prose):
            command = " ".join(span.split())
            if "..." not in command and re.search(r"\s[\w.]+=", command):
                found.setdefault(command, path.relative_to(REPO_ROOT).as_posix())
    return found


@pytest.mark.parametrize("command", sorted(inline_training_commands()))
def test_the_training_commands_quoted_in_the_prose_resolve_as_written(command, monkeypatch, capsys):
    """``N`` stands for a number (``trainer.seed=N``): the command with 0 for it resolves its configuration and env
    (``--dry-run``), as ``python -m agentfly_train trainer.seed=N`` without ``--config quickstart`` did not."""
    pytest.importorskip("trl", reason="the trainer's commands need the train extra")
    from agentfly_train.__main__ import main

    monkeypatch.chdir(REPO_ROOT)
    arguments = [re.sub(r"=N$", "=0", word) for word in shlex.split(command)[3:]]
    assert main([*arguments, "--dry-run"]) == 0, capsys.readouterr().err
    assert "configuration (keys that differ from the defaults):" in capsys.readouterr().out


def test_the_prose_quotes_the_quickstart_s_seed_command():
    assert "python -m agentfly_train --config quickstart trainer.seed=N" in inline_training_commands()


@pytest.mark.parametrize("page", ["README.md", "docs/index.md"])
def test_quick_tour_runs_as_written(page, monkeypatch):
    monkeypatch.chdir(REPO_ROOT)
    block = re.search(r"```python\n(.*?)```", (REPO_ROOT / page).read_text(), re.DOTALL).group(1)
    namespace: dict = {}
    exec(compile(block, page, "exec"), namespace)
    assert namespace["reward"] == 1.0 and namespace["terminated"]
    assert namespace["info"]["reward_components"] == {"answer_found": 1.0, "correct": 1.0}


@pytest.mark.parametrize("page", ["README.md", "docs/training.md"])
def test_the_gsm8k_files_of_the_third_training_command_are_written_as_the_page_says(page, tmp_path, monkeypatch):
    """The page's lines write ``gsm8k/train.parquet`` and ``gsm8k/test.parquet``; here ``load_dataset`` gives the rows
    of data/gsm8k_sample.jsonl (GSM8K's format) instead of the Hub's, and the GSM8K env plays golden episodes on the
    files written."""
    import datasets
    import gymnasium as gym

    import agentfly_envs  # noqa: F401  (registers the envs)

    [block] = [
        b for b in re.findall(r"```python\n(.*?)```", (REPO_ROOT / page).read_text(), re.DOTALL) if "openai/gsm8k" in b
    ]
    assert "gsm8k/train.parquet" in (REPO_ROOT / page).read_text()  # the command the lines are for
    sample = str(REPO_ROOT / "data" / "gsm8k_sample.jsonl")
    asked = []

    def load_dataset(path, name, split):
        asked.append((path, name, split))
        return datasets.Dataset.from_json(sample)

    monkeypatch.chdir(tmp_path)
    with monkeypatch.context() as patch:
        patch.setattr(datasets, "load_dataset", load_dataset)
        exec(compile(block, page, "exec"), {})
    assert asked == [("openai/gsm8k", "main", "train"), ("openai/gsm8k", "main", "test")]
    for split in ("train", "test"):
        env = gym.make("agentfly/GSM8K-Calc", data_files=f"gsm8k/{split}.parquet")
        assert len(env.unwrapped.tasks) == 12
        env.reset(options={"index": 0})
        for action in env.unwrapped.golden_actions():
            _, reward, terminated, _, _ = env.step(action)
        assert terminated and reward == 1.0


def test_first_lines_are_the_two_setup_commands():
    lines = README.splitlines()
    assert lines[3].startswith("python3 -m venv .venv") and lines[3].endswith("python -m agentfly_train")
    assert lines[4] == ". .venv/bin/activate && python -m pytest -q"
    ci = (REPO_ROOT / ".ci" / "run").read_text()
    assert "python -m pytest -q" in ci.splitlines()[-1]


@pytest.mark.parametrize("page", ["README.md", "docs/index.md"])
def test_the_install_says_which_torch_build_a_machine_gets_and_how_to_pick_the_cpu_one(page):
    """``pip install torch==V`` gives the CPU build here only through this machine's local wheels; on Linux, PyPI's
    is the CUDA build. The page says so and gives the CPU command, for the torch version the setup command and CI
    install."""
    text = " ".join((REPO_ROOT / page).read_text().split())
    version = re.search(r"^torch==(\S+)$", (REPO_ROOT / ".ci" / "constraints.txt").read_text(), re.MULTILINE)[1]
    assert f"pip install torch=={version} && pip install -c .ci/constraints.txt" in text
    assert f"`pip install torch=={version} --index-url https://download.pytorch.org/whl/cpu`" in text
    assert "on Linux x86_64 PyPI serves the CUDA build" in text and "no CUDA build is pulled" not in text


def test_the_docs_list_every_registered_component():
    from agentfly_envs import ENVIRONMENTS, PARSERS, REWARDS, TASKS, TOOLS

    envs = (REPO_ROOT / "docs" / "envs.md").read_text()
    components = (REPO_ROOT / "docs" / "tools.md").read_text()
    for name in ENVIRONMENTS:
        assert f"`{name}`" in envs, name
    for name in [*PARSERS, *REWARDS, *TOOLS, *TASKS]:
        assert f"`{name}" in components, name


def test_the_readme_links_every_docs_page_and_the_docs_nav_has_every_page():
    pages = sorted(path.relative_to(REPO_ROOT).as_posix() for path in (REPO_ROOT / "docs").rglob("*.md"))
    nav = (REPO_ROOT / "mkdocs.yml").read_text()
    for page in pages:
        assert f"]({page}" in README, f"README.md does not link {page}"
        assert f": {page.removeprefix('docs/')}\n" in nav, f"mkdocs.yml's nav lacks {page}"


def heading_anchors(markdown: str) -> set[str]:
    """The anchors of a Markdown text's headings, as MkDocs (and GitHub, for these headings) make them."""
    # a fence's info string has no backtick (CommonMark), unlike a line opening with a code span: ```` ``` ````
    text = re.sub(r"^(```+)[^`\n]*\n.*?^\1[ \t]*$", "", markdown, flags=re.MULTILINE | re.DOTALL)
    headings = re.findall(r"^#+ (.*)$", text, re.MULTILINE)
    return {re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", heading).strip().lower()) for heading in headings}


def test_the_readme_s_links_into_the_docs_resolve():
    links = re.findall(r"\]\((docs/[^)#]+)(?:#([^)]*))?\)", README)
    assert len(links) > 20
    for page, anchor in links:
        assert (REPO_ROOT / page).is_file(), page
        if anchor:
            assert anchor in heading_anchors((REPO_ROOT / page).read_text()), f"{page}#{anchor}"
    assert not [a for a in re.findall(r"\]\(#([^)]*)\)", README) if a not in heading_anchors(README)]


def test_the_readme_says_what_the_code_writes():
    # the names a run writes are checked on a run in tests/e2e/test_readme_commands.py
    documented = "\n".join(path.read_text() for path in [REPO_ROOT / "README.md", *(REPO_ROOT / "docs").rglob("*.md")])
    assert "step_N.jsonl" not in documented and "val_samples/step_000010.jsonl" in documented
    assert "not available yet" not in documented
