"""Hostile code is contained by the sandbox, and the next call on the pool works.

Limits here are tight (1 s, 256 MiB, 16 processes, 1 MiB of output) so that nothing a snippet does can
strain the machine. Guarantees that need namespaces are skipped where the kernel does not offer them;
the fork bomb runs only where ``RLIMIT_NPROC`` is known to hold it (namespaces or a uid of its own).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from agentfly_envs.sandbox import ExecStatus, SandboxLimits, SandboxPool
from tests.envs.sandbox.runtime import runtime_dirs_in_tmp
from tests.helpers.paths import REPO_ROOT

LIMITS = SandboxLimits(timeout_s=1.0, cpu_s=5, memory_bytes=256 << 20, processes=16, file_bytes=1 << 20)
CANARY = "AGENTFLY_TEST_SECRET_KEY"


@pytest.fixture(scope="module", params=["auto", "none"])
def pool(request):
    """A pool with namespaces where available, and one with resource limits only."""
    os.environ[CANARY] = "sk-do-not-leak"  # set before the fork server starts
    with SandboxPool(LIMITS, workers=2, isolation=request.param) as pool:
        pool.isolation  # noqa: B018  (starts the fork server)
        yield pool
    os.environ.pop(CANARY, None)


def needs_namespaces(pool: SandboxPool) -> None:
    if not pool.isolation.namespaces:
        pytest.skip(f"no namespace isolation here: {pool.isolation.note}")


def run_then_check_alive(pool: SandboxPool, code: str):
    """Runs ``code`` in a session, then checks that the session (or its replacement) and the pool still work."""
    with pool.session() as session:
        session.run("marker = 'kept'")
        result = session.run(code)
        after = session.run("print('alive'); marker if 'marker' in globals() else 'reset'")
        assert after.status is ExecStatus.OK and after.output.startswith("alive\n"), after
        assert after.output == ("alive\n'reset'\n" if result.restarted else "alive\n'kept'\n")
    assert pool.run("print(6 * 7)").output == "42\n"
    return result


# (name, code, expected status, text the output or detail must contain)
HOSTILE = [
    ("infinite loop", "while True: pass", ExecStatus.TIMEOUT, "ran longer than 1 s"),
    ("sleep forever", "import time; time.sleep(10**6)", ExecStatus.TIMEOUT, "ran longer than 1 s"),
    (
        "loop that ignores the interrupt",
        "import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\nwhile True: pass",
        ExecStatus.TIMEOUT,
        "did not stop at its time limit",
    ),
    ("memory bomb", "x = bytearray(8 * 1024**3)", ExecStatus.ERROR, "MemoryError"),
    ("growing memory bomb", "chunks = []\nwhile True: chunks.append(bytes(10**7))", ExecStatus.ERROR, "MemoryError"),
    ("1 GB of output", "for _ in range(10**6): print('x' * 1000)", ExecStatus.OUTPUT_LIMIT, "bytes of output cut"),
    ("1 GB through fd 1", "import os\nfor _ in range(10**6): os.write(1, b'y' * 1000)", ExecStatus.OUTPUT_LIMIT, "yyy"),
    (
        "1 GB from a child process",
        "import os\nif os.fork() == 0:\n    while True: os.write(1, b'z' * 4096)\nos.wait()",
        ExecStatus.OUTPUT_LIMIT,
        "cut",
    ),
    ("sys.exit", "import sys; sys.exit(3)", ExecStatus.EXIT, "3"),
    ("SystemExit with a message", "raise SystemExit('bye')", ExecStatus.EXIT, "bye"),
    ("os._exit", "import os; os._exit(0)", ExecStatus.CRASHED, "died"),
    ("deep recursion", "def f(n): return f(n + 1)\nf(0)", ExecStatus.ERROR, "RecursionError"),
    ("reading /dev/zero", "data = open('/dev/zero', 'rb').read()", ExecStatus.ERROR, "MemoryError"),
    ("reading 10 GB", "data = open('/dev/urandom', 'rb').read(10**10)", ExecStatus.ERROR, "MemoryError"),
    ("ctypes crash", "import ctypes; ctypes.string_at(0)", ExecStatus.CRASHED, "Segmentation fault"),
    ("non-UTF-8 output", "import os; os.write(1, b'ok \\xff\\xfe')", ExecStatus.OK, "ok \ufffd\ufffd"),
    (
        "garbage on the session socket",
        "import os, struct\nfor fd in map(int, os.listdir('/proc/self/fd')):\n"
        "    if os.readlink(f'/proc/self/fd/{fd}').startswith('socket:'):\n"
        "        os.write(fd, struct.pack('>I', 5) + b'junk!')",
        ExecStatus.CRASHED,
        "died",
    ),
]


@pytest.mark.parametrize(("name", "code", "status", "fragment"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_code_is_contained(pool, name, code, status, fragment):
    result = run_then_check_alive(pool, code)
    assert result.status is status, result
    assert fragment in result.output + result.detail, result
    assert len(result.output) <= LIMITS.output_bytes + 100
    assert result.seconds < LIMITS.timeout_s + 3


def test_fork_bomb_is_contained(pool):
    if not (pool.isolation.namespaces or pool.isolation.separate_user):
        pytest.skip("RLIMIT_NPROC would count all of this user's processes; no fork bomb without namespaces")
    bounded = "import os, time\nfor n in range(100):\n    if os.fork() == 0:\n        time.sleep(5); os._exit(0)"
    result = pool.run(bounded)  # first check, with a bounded loop, that the limit holds
    assert result.status is ExecStatus.ERROR and "Resource temporarily unavailable" in result.output
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    assert run_then_check_alive(pool, bomb).status is ExecStatus.TIMEOUT


def test_no_host_environment_variables(pool):
    code = "import os; print(sorted(os.environ)); print(open('/proc/self/environ', 'rb').read())"
    output = pool.run(code).output
    assert CANARY not in output and "sk-do-not-leak" not in output
    assert "'HOME'" in output and "'PATH'" in output


def test_network_is_unreachable(pool):
    needs_namespaces(pool)
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        code = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2)"
        result = pool.run(code)
    assert result.status is ExecStatus.ERROR and "Network is unreachable" in result.output


def test_writes_outside_the_work_dir_fail(pool):
    needs_namespaces(pool)
    with tempfile.TemporaryDirectory() as open_dir:
        os.chmod(open_dir, 0o777)  # so that only the sandbox, not file permissions, can stop the write
        targets = [Path(open_dir) / "evil", REPO_ROOT / "evil", Path("/tmp/agentfly-evil")]
        code = "".join(f"\ntry:\n    open({str(t)!r}, 'w')\nexcept OSError as e:\n    print(e)" for t in targets)
        code += "\ntry:\n    open(sys.prefix + '/evil', 'w')\nexcept OSError as e:\n    print(e)"
        output = pool.run("import os, sys; open('inside.txt', 'w').write('ok'); print(os.listdir('.'))" + code).output
        # The host's open dir does not exist in the session's root, the interpreter is read-only, and /tmp is the
        # session's own. The project shows only where the interpreter's virtual environment is inside it, as the
        # read-only (or, under the host's /tmp, root-owned) directories that lead to the interpreter; a checkout
        # elsewhere is not there at all.
        lines = output.splitlines()
        assert lines[0] == "['inside.txt']" and "No such file or directory" in lines[1], output
        inside = Path(sys.prefix).resolve().is_relative_to(REPO_ROOT.resolve())
        project_refusal = "Permission denied" if runtime_dirs_in_tmp() else "Read-only file system"
        assert (project_refusal if inside else "No such file or directory") in lines[2], output
        assert "Read-only file system" in lines[3] and len(lines) == 4, output
        assert not any(target.exists() for target in targets)


def test_work_dir_is_per_session_and_removed(pool):
    with pool.session() as first, pool.session() as second:
        workdir = Path(first.run("import os; open('mine.txt', 'w').write('1'); print(os.getcwd())").output.strip())
        assert second.run("import os; os.listdir('.')").output == "[]\n"
        if pool.isolation.namespaces:  # the work dir lives in the session's own memory, never on the host
            assert workdir == Path("/home/sandbox") and not list(Path(pool._fork_server.root).rglob("mine.txt"))
            return
        assert workdir.exists()
    deadline = time.monotonic() + 5
    while workdir.exists() and time.monotonic() < deadline:  # the fork server removes it when it reaps the session
        time.sleep(0.05)
    assert not workdir.exists()


def test_processes_outside_the_sandbox_cannot_be_signalled(pool):
    if not (pool.isolation.namespaces or pool.isolation.separate_user):
        pytest.skip("without namespaces or a uid of its own, the code could kill this test process")
    code = f"import os, signal\nfor pid in ({os.getpid()}, os.getppid(), -1):\n"
    code += "    try:\n        os.kill(pid, signal.SIGKILL)\n    except OSError as e:\n        print(type(e).__name__)"
    result = run_then_check_alive(pool, code)
    assert result.output.count("Error") >= 2  # the test process and its parent are out of reach


def test_private_proc_shows_only_the_session(pool):
    needs_namespaces(pool)
    output = pool.run("import os; print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))").output
    assert output == "[1]\n"


def test_state_does_not_leak_between_sessions(pool):
    with pool.session() as first:
        first.run("import math, json; math.pi = 3; json.secret = 'leak'; x = 1")
        assert first.run("math.pi, x").output == "(3, 1)\n"
    with pool.session() as second:
        assert second.run("import math, json; math.pi, hasattr(json, 'secret'), 'x' in globals()").output == (
            "(3.141592653589793, False, False)\n"
        )


SETPRIV, SYSTEM_PYTHON = shutil.which("setpriv"), "/usr/bin/python3"


@pytest.mark.skipif(os.geteuid() != 0 or SETPRIV is None, reason="needs root and setpriv to become another user")
def test_as_an_ordinary_user_in_a_user_namespace():
    """The pool run by an unprivileged user (here nobody, with the system's Python) isolates with a user namespace."""
    probe = subprocess.run(
        [SETPRIV, "--reuid=65534", "--regid=65534", "--clear-groups", SYSTEM_PYTHON, "-c",
         f"import sys, os; assert sys.version_info >= (3, 11); os.listdir({str(REPO_ROOT / 'agentfly_envs')!r})"],
        capture_output=True, check=False,
    )  # fmt: skip
    if probe.returncode != 0:
        pytest.skip(f"{SYSTEM_PYTHON} (>= 3.11) cannot read the repository as nobody: {probe.stderr[-200:]!r}")
    script = textwrap.dedent(f"""
        import json, os, socket, sys, types
        for name, path in (("agentfly_envs", {str(REPO_ROOT / "agentfly_envs")!r}),):
            module = types.ModuleType(name); module.__path__ = [path]; sys.modules[name] = module
        from agentfly_envs.sandbox import SandboxLimits, SandboxPool
        limits = SandboxLimits(timeout_s=1.0, memory_bytes=256 << 20, processes=16, file_bytes=1 << 20)
        with SandboxPool(limits, workers=1) as pool, socket.create_server(("127.0.0.1", 0)) as server:
            bounded = "import os, time\\nfor n in range(100):\\n"
            bounded += "    if os.fork() == 0:\\n        time.sleep(5); os._exit(0)"
            port = server.getsockname()[1]
            results = dict(
                isolation=pool.isolation.namespaces,
                forks=pool.run(bounded).output,
                kill=pool.run(f"import os; os.kill({{os.getpid()}}, 9)").output,
                net=pool.run(f"import socket; socket.create_connection(('127.0.0.1', {{port}}))").output,
                write=pool.run("import sys; open(sys.prefix + '/agentfly-nobody-evil', 'w')").output,
                uid=pool.run("import os; print(os.getuid(), os.geteuid())").output,
            )
        print(json.dumps(results))
    """)
    result = subprocess.run(
        [SETPRIV, "--reuid=65534", "--regid=65534", "--clear-groups", SYSTEM_PYTHON, "-c", script],
        capture_output=True, text=True, timeout=120, check=False, cwd="/",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads(result.stdout.splitlines()[-1])
    if not results["isolation"]:
        pytest.skip("unprivileged user namespaces are not allowed on this machine")
    assert "Resource temporarily unavailable" in results["forks"]
    assert "ProcessLookupError" in results["kill"]
    assert "Network is unreachable" in results["net"]
    assert "Read-only file system" in results["write"]
    assert results["uid"] == "0 0\n"  # root of its own user namespace, without capabilities
    assert not Path(sys.prefix, "agentfly-nobody-evil").exists() and not Path("/usr/agentfly-nobody-evil").exists()


def test_isolation_is_reported(pool):
    isolation = pool.isolation
    assert isolation.separate_user is (os.geteuid() == 0)
    if pool._fork_server.config["isolation"] == "none":
        assert not isolation.namespaces and "isolation='none'" in isolation.note
    else:
        assert isolation.namespaces == (isolation.note == "")
