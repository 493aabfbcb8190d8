"""The escapes of issue #30, one test each: a closed root, bounded resources, nothing of a call outliving
it, and isolation that fails closed. Each failed on the sandbox before the fix.

Tests that change process-wide state (an open-files limit, a seccomp filter that refuses namespaces, the
once-per-process warning) run their pool in a child Python process.
"""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

from agentfly_envs.rewards import code_reward
from agentfly_envs.sandbox import ExecStatus, SandboxError, SandboxLimits, SandboxPool, linux
from agentfly_envs.tools.python_executor import describe
from tests.envs.sandbox.runtime import runtime_dirs_in_tmp
from tests.helpers.paths import REPO_ROOT
from tests.helpers.processes import stop_process

LIMITS = SandboxLimits(timeout_s=5.0, cpu_s=1, memory_bytes=256 << 20, disk_bytes=8 << 20)


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(LIMITS, workers=2, isolation="namespaces") as pool:
        yield pool


def run_python(script: str, timeout_s: float = 120) -> subprocess.CompletedProcess:
    """Runs ``script`` in a child Python (from the repository root, so ``tests`` imports)."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd=REPO_ROOT,
        check=False,
    )


# ------------------------------------------------------------------------------------------------
# A minimal root
# ------------------------------------------------------------------------------------------------


def test_host_unix_sockets_are_unreachable(pool):
    """A world-writable socket on the host (path or abstract) receives nothing from the sandbox."""
    with tempfile.TemporaryDirectory() as folder, socket.socket(socket.AF_UNIX) as path_server:
        os.chmod(folder, 0o777)
        path = os.path.join(folder, "listener.sock")
        path_server.bind(path)
        os.chmod(path, 0o777)
        path_server.listen()
        path_server.settimeout(0.5)
        abstract = f"\0agentfly-test-{os.getpid()}"
        with socket.socket(socket.AF_UNIX) as abstract_server:
            abstract_server.bind(abstract)
            abstract_server.listen()
            abstract_server.settimeout(0.5)
            code = "import socket\n" + "".join(
                f"try:\n    s = socket.socket(socket.AF_UNIX); s.connect({target!r}); s.sendall(b'leak')\n"
                "except OSError as e:\n    print(type(e).__name__)\n"
                for target in (path, abstract)
            )
            output = pool.run(code).output
            for server in (path_server, abstract_server):
                with pytest.raises(TimeoutError):
                    server.accept()
    assert output == "FileNotFoundError\nConnectionRefusedError\n", output


def test_project_data_and_host_files_are_hidden(pool):
    """The training data (with its answers), the project, home directories and the host's /tmp do not exist."""
    data_file = next((REPO_ROOT / "data").glob("*.jsonl"))
    with tempfile.NamedTemporaryFile(dir="/tmp", prefix="agentfly-host-") as host_tmp:
        code = textwrap.dedent(f"""
            import os
            for path in ({str(data_file)!r}, {str(REPO_ROOT / "README.md")!r}, "/root/.bashrc", {host_tmp.name!r}):
                print(os.path.exists(path), end=" ")
            print(os.listdir("/tmp"), os.listdir("/home"), sorted(os.listdir("/dev")))
            print(open("/etc/passwd").read().count(":x:"), os.getcwd())
        """)
        output = pool.run(code).output
    assert output.splitlines()[0] == (
        f"False False False False {runtime_dirs_in_tmp()} ['sandbox'] "
        "['fd', 'full', 'null', 'random', 'shm', 'stderr', 'stdin', 'stdout', 'urandom', 'zero']"
    ), output
    assert output.splitlines()[1] == "2 /home/sandbox"  # a synthetic passwd: root and the session's user


def test_the_runtime_still_works_inside(pool):
    """Compiled extensions load their shared libraries, and a child interpreter starts."""
    code = "import ssl, sqlite3, subprocess, sys\nprint(subprocess.run([sys.executable, '-c', 'print(7)']).returncode)"
    result = pool.run(code)
    assert result.status is ExecStatus.OK and result.output == "7\n0\n", result


# ------------------------------------------------------------------------------------------------
# Bounded resources
# ------------------------------------------------------------------------------------------------


def test_memory_outside_the_address_space_limit_is_refused(pool):
    """memfd and System V shared memory are refused; /tmp, /dev/shm and the work dir share ``disk_bytes``."""
    code = textwrap.dedent("""
        import ctypes, os
        shmget = ctypes.CDLL(None, use_errno=True).shmget
        for call in (lambda: os.memfd_create("hoard"), lambda: shmget(0, 1 << 20, 0o1600)):
            try:
                print(call())
            except OSError as e:
                print(type(e).__name__)
        total = 0
        try:
            for folder in ("/tmp", "/dev/shm", "."):
                with open(f"{folder}/hoard", "wb") as file:
                    for _ in range(8):
                        file.write(bytes(1 << 20)); total += 1
        except OSError as e:
            print(e.strerror, total <= 8)
    """)
    with pool.session() as session:
        result = session.run(code)
    assert result.output == "PermissionError\n-1\nNo space left on device True\n", result


def test_system_v_semaphores_message_queues_and_kernel_keyrings_are_refused(pool):
    """System V semaphores and message queues would pin kernel memory outside ``memory_bytes`` until the episode
    ends; the kernel keyrings are shared with the host's session keyring and keep their keys until reboot. Each
    call fails with ``EPERM`` (``keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING)`` reads the keyring the
    host's secrets would be in)."""
    numbers = {name: linux.syscall_number(name) for name in ("semget", "msgget", "add_key", "request_key", "keyctl")}
    code = textwrap.dedent(f"""
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        calls = {{
            "semget": lambda: libc.syscall({numbers["semget"]}, 0, 64, 0o1600),
            "msgget": lambda: libc.syscall({numbers["msgget"]}, 0, 0o1600),
            "add_key": lambda: libc.syscall({numbers["add_key"]}, b"user", b"planted", b"x", 1, -3),
            "request_key": lambda: libc.syscall({numbers["request_key"]}, b"user", b"secret", None, -3),
            "keyctl": lambda: libc.syscall({numbers["keyctl"]}, 0, -3, 0),
        }}
        for name, call in calls.items():
            print(name, call(), ctypes.get_errno())
    """)
    result = pool.run(code)
    assert result.status is ExecStatus.OK, result
    assert result.output.splitlines() == [
        f"{name} -1 {errno.EPERM}" for name in ("semget", "msgget", "add_key", "request_key", "keyctl")
    ], result


def test_no_namespaces_of_its_own(pool):
    """No new user and mount namespace, where a file system of its own (tmpfs) would hold memory unbounded."""
    code = textwrap.dedent("""
        import ctypes, os, platform, signal
        libc = ctypes.CDLL(None, use_errno=True)
        clone = {"x86_64": 56, "aarch64": 220}[platform.machine()]
        print(libc.unshare(0x10000000 | 0x00020000), os.strerror(ctypes.get_errno()))
        print(libc.syscall(clone, 0x10000000 | signal.SIGCHLD, 0, 0, 0, 0), os.strerror(ctypes.get_errno()))
        print(os.waitpid(os.fork() or os._exit(0), 0)[1])  # plain fork works
    """)
    result = pool.run(code)
    assert result.output == "-1 Operation not permitted\n-1 Operation not permitted\n0\n", result


def test_cpu_limit_cannot_be_raised(pool):
    """Code that raises its own CPU limit and ignores SIGXCPU is still stopped at ``cpu_s`` (+1 s)."""
    code = textwrap.dedent("""
        import resource, signal
        resource.setrlimit(resource.RLIMIT_CPU, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        signal.signal(signal.SIGXCPU, signal.SIG_IGN)
        while True:
            pass
    """)
    result = pool.run(code, timeout_s=60)  # the wall clock far off: on a loaded machine 2 s of CPU take long
    assert result.status is ExecStatus.CPU_LIMIT and result.restarted, result
    assert "used up its CPU time and did not stop" in result.detail, result


def test_live_sessions_are_capped():
    with SandboxPool(LIMITS, workers=1, spares=0, max_sessions=2) as pool:
        first, second, third = pool.session(), pool.session(), pool.session()
        first.run("x = 1")
        second.run("x = 2")
        with pytest.raises(SandboxError, match=r"already has 2 live sessions \(max_sessions=2\); close sessions"):
            third.run("x = 3")
        first.close()
        assert third.run("x = 3").status is ExecStatus.OK and second.run("x").output == "2\n"
        second.close()
        third.close()


def test_running_out_of_descriptors_is_an_error_not_a_restart():
    """EMFILE fails the new session's call; live sessions keep their state (no fork-server restart)."""
    result = run_python("""
        import resource
        resource.setrlimit(resource.RLIMIT_NOFILE, (48, 48))
        from agentfly_envs.sandbox import SandboxError, SandboxLimits, SandboxPool
        pool = SandboxPool(SandboxLimits(timeout_s=5, open_files=32), workers=1, spares=1)
        sessions, error = [], None
        while error is None:
            session = pool.session()
            try:
                session.run(f"x = {len(sessions)}")
                sessions.append(session)
            except SandboxError as e:
                error = str(e)
        values = [session.run("x").output for session in sessions]
        assert values == [f"{i}\\n" for i in range(len(sessions))], values
        sessions.pop().close()
        assert pool.session().run("print('ok')").output == "ok\\n"
        print(len(sessions), error)
        pool.close()
    """)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "out of file descriptors" in result.stdout and "raise the hard limit" in result.stdout, result.stdout
    assert "fork server failed" not in result.stderr, result.stderr


def test_a_retired_fork_server_keeps_its_sessions(pool):
    """A fork server that stops answering is replaced; sessions it started keep running and keep their state."""
    with SandboxPool(LIMITS, workers=1, spares=0) as own, own.session() as healthy:
        healthy.run("x = 'kept'")
        server = own._fork_server.process
        stop_process(server.pid)  # it hangs
        own._fork_server.control.settimeout(1.0)
        try:
            assert own.run("print(6 * 7)").output == "42\n"  # from a new fork server
        finally:
            os.kill(server.pid, 18)  # SIGCONT
        assert own._fork_server.process is not server
        assert healthy.run("x").output == "'kept'\n"


# ------------------------------------------------------------------------------------------------
# Nothing of a call outlives it
# ------------------------------------------------------------------------------------------------


def test_a_thread_left_running_replaces_the_interpreter(pool):
    with pool.session() as session:
        session.run("x = 1")
        started = session.run("import threading, time\nthreading.Thread(target=time.sleep, args=(60,)).start()")
        assert started.status is ExecStatus.OK and started.restarted, started
        assert "1 thread the code started still ran" in started.restart_reason
        observation = describe(started, notebook=True)
        assert observation.startswith("Note: the interpreter was restarted (1 thread") and "are gone" in observation
        assert session.run("'x' in globals()").output == "False\n"
        joined = session.run("import threading\nt = threading.Thread(target=sum, args=([1],)); t.start(); t.join()")
        assert not joined.restarted, joined  # a thread that finished is fine


def test_a_process_left_running_with_the_sweep_switched_off_replaces_the_interpreter(pool):
    """The end-of-call sweep runs inside the session, where code can switch it off; the pool counts the processes
    left from the host and replaces the interpreter, whose namespace takes them along."""
    code = textwrap.dedent("""
        import gc, subprocess, sys
        sweeper = next(o for o in gc.get_objects() if hasattr(type(o), "_execute") and hasattr(o, "sweep"))
        sweeper.sweep = False
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    """)
    with pool.session() as session:
        left = session.run(code)
        assert left.status is ExecStatus.OK and left.restarted, left
        assert left.restart_reason == "1 process the code started still ran at the end of the call", left
        assert session.run("import os; print(os.getpid())").output == "1\n"  # a fresh interpreter, pid 1 again
        finished = session.run("import subprocess, sys; subprocess.run([sys.executable, '-c', 'pass'])")
        assert not finished.restarted, finished  # a process that ended (and was reaped) is fine


FORGER = textwrap.dedent("""
    import json, os, socket, struct, threading

    def add(a, b):
        return a - b  # wrong

    def answer_for_later_calls():
        fds = map(int, os.listdir("/proc/self/fd"))
        fd = next(fd for fd in fds if os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"))
        sock = socket.socket(fileno=os.dup(fd))
        while True:
            size = struct.unpack(">I", sock.recv(4, socket.MSG_WAITALL))[0]
            request = json.loads(sock.recv(size, socket.MSG_WAITALL))
            reply = json.dumps({"id": request["id"], "status": "ok", "detail": ""}).encode()
            sock.sendall(struct.pack(">I", len(reply)) + reply)

    threading.Thread(target=answer_for_later_calls, daemon=True).start()
""")


def test_a_thread_cannot_forge_the_replies_to_later_calls():
    """A wrong solution whose thread reads the session socket and answers the tests scores 0."""
    tests = [f"assert add({i}, 1) == {i + 1}" for i in range(8)]
    result = code_reward(f"```python\n{FORGER}```", tests)
    assert result.score == 0.0, result


WRITE_ON_THE_SESSION_SOCKET = textwrap.dedent("""
    import os, socket, struct
    fds = map(int, os.listdir("/proc/self/fd"))
    fd = next(fd for fd in fds if os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"))
    sock = socket.socket(fileno=os.dup(fd))
""")


@pytest.mark.parametrize(
    "forgery, why",
    [
        # A header announcing 200 MiB, then 8 MiB of it: refused at the header, before any of it is read.
        ("sock.sendall(struct.pack('>I', 200 << 20) + bytes(8 << 20))", "over the 65536-byte limit"),
        # A reply nested deeper than the decoder's stack: a broken message, not an error in the pool.
        ("body = b'[' * 20_000 + b']' * 20_000; sock.sendall(struct.pack('>I', len(body)) + body)", "not a JSON"),
    ],
    ids=["oversized", "nested"],
)
def test_a_forged_reply_is_a_crashed_call_not_data_the_pool_reads(pool, forgery, why):
    """Code that writes its own reply on the session socket gets a crashed call (and a fresh interpreter); the pool
    reads no reply larger than a real one (:data:`~agentfly_envs.sandbox.protocol.MAX_REPLY_BYTES`), and a reply it
    cannot decode is no exception of its own."""
    with pool.session() as session:
        result = session.run(WRITE_ON_THE_SESSION_SOCKET + forgery + "\nimport time; time.sleep(5)\n")
        assert result.status is ExecStatus.CRASHED and why in result.detail and result.restarted, result
        assert result.seconds < 3, result
        assert session.run("print(6 * 7)").output == "42\n"


# ------------------------------------------------------------------------------------------------
# Fail closed
# ------------------------------------------------------------------------------------------------


def test_auto_refuses_to_run_without_namespaces_and_none_warns_once():
    """Where the kernel refuses namespaces (here: a seccomp filter on unshare), "auto" raises; "none" runs
    with one warning per process."""
    result = run_python("""
        import logging, os
        from agentfly_envs.sandbox import linux
        linux.prctl(linux.PR_SET_NO_NEW_PRIVS, 1)
        linux.refuse_syscalls(("unshare",))
        logging.basicConfig(format="%(levelname)s %(message)s")
        from agentfly_envs.sandbox import SandboxPool, SandboxUnavailableError
        for isolation in ("auto", "namespaces"):
            with SandboxPool(isolation=isolation) as pool:
                try:
                    pool.run("print('ran')")
                except SandboxUnavailableError as e:
                    print("refused:", e)
        for _ in range(2):
            with SandboxPool(isolation="none") as pool:
                print(pool.run("print('ran')").output, end="")
    """)
    assert result.returncode == 0, result.stderr[-2000:]
    refused = [line for line in result.stdout.splitlines() if line.startswith("refused:")]
    assert len(refused) == 2 and all("pass SandboxPool(isolation='none')" in line for line in refused), result.stdout
    assert result.stdout.count("ran\n") == 2
    assert result.stderr.count("WARNING sandbox: isolation='none'") == 1, result.stderr


def test_a_program_run_ends_what_it_started_without_looking_for_it(pool):
    """``pool.run`` discards its interpreter after the call, so what the code left running is not counted (no
    ``restarted``) and dies with it: here a thread and a process of a name the test looks for on the host."""
    marker = f"agentfly-left-{os.getpid()}-{time.monotonic_ns()}"
    code = textwrap.dedent(f"""
        import subprocess, sys, threading, time
        threading.Thread(target=time.sleep, args=(60,)).start()
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "{marker}"], start_new_session=True)
        print("started")
    """)
    result = pool.run(code)
    assert (result.status, result.output, result.restarted) == (ExecStatus.OK, "started\n", False), result
    deadline = time.monotonic() + 5
    while _processes_named(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _processes_named(marker)


def _processes_named(marker: str) -> list[str]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as file:
                if marker.encode() in file.read():
                    found.append(pid)
        except OSError:
            continue
    return found
