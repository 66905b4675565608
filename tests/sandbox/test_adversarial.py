"""Hostile candidates, all in one batch with honest ones: each is contained and reported with the right
status, and the honest candidates around them still get correct results."""

import contextlib
import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid

import pytest
from sandbox_cases import ADD, ADD_TESTS, ROOT, sandbox_processes

from sandbox import SandboxConfig, Status, run_candidates

pytestmark = pytest.mark.slow  # hostile candidates run to their limits

TIMEOUT_S = 4.0
SECRET = f"canary-secret-{uuid.uuid4().hex}"


def hostile(body: str) -> str:
    """A correct `add` after the hostile part, so that only containment can make it fail."""
    return textwrap.dedent(body) + "\n" + ADD


# leaves the process group (setsid) and sleeps on: only the kill by uid reaches it
GRANDCHILD = hostile("""
    import os, time
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            time.sleep(300)
        os._exit(0)
    time.sleep(0.2)
    """)


@pytest.fixture(scope="module")
def canary(tmp_path_factory):
    folder = tmp_path_factory.mktemp("canary")
    (folder / "keep.txt").write_text("must survive")
    return folder


@pytest.fixture(scope="module")
def listener():
    """A TCP server on 127.0.0.1 that records whether anyone ever connected."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    connections = []
    stop = threading.Event()

    def accept():
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                connections.append(server.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1], connections
    stop.set()
    thread.join()
    server.close()


@pytest.fixture(scope="module")
def batch(canary, listener):
    port, _ = listener
    escape = f"/tmp/sandbox-escape-{uuid.uuid4().hex}"
    candidates = {
        "honest_1": ADD,
        "fork_bomb": hostile("""
            import os
            while True:
                try:
                    os.fork()
                except OSError:
                    pass
            """),
        "infinite_loop": hostile("while True:\n    pass"),
        "memory_hog": hostile("hog = []\nwhile True:\n    hog.append(bytearray(50 * 2**20))"),
        "busy_threads": hostile("""
            import threading
            def spin():
                while True:
                    pass
            for _ in range(4):  # not daemons: the interpreter would wait for them forever at exit
                threading.Thread(target=spin).start()
            """),
        "huge_output": hostile("import sys\nfor _ in range(2000):\n    sys.stdout.write('x' * 50_000 + '\\n')"),
        "honest_2": ADD,
        "big_file": hostile("""
            with open("big.bin", "wb") as f:
                for _ in range(1024):
                    f.write(b"\\0" * 2**20)
            """),
        "delete_outside": hostile(f"""
            import os, shutil
            for path in ({str(canary / "keep.txt")!r},):
                try:
                    os.remove(path)
                except OSError as exc:
                    print("remove:", type(exc).__name__)
            try:
                open({escape!r}, "w").write("escaped")
            except OSError as exc:
                print("write /tmp:", type(exc).__name__)
            shutil.rmtree({str(canary)!r})
            """),
        "read_env": hostile("""
            import os
            print("env:", dict(os.environ))
            try:
                print("parent:", open(f"/proc/{os.getppid()}/environ").read())
            except OSError as exc:
                print("parent environ:", type(exc).__name__)
            """),
        "socket": hostile(f"""
            import socket
            socket.create_connection(("127.0.0.1", {port}), timeout=1).sendall(b"leak")
            """),
        "sys_exit": hostile("import sys\nsys.exit(0)"),
        "os_exit": hostile("import os\nos._exit(0)"),
        "kill_self": hostile("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)"),
        "ignore_sigterm": hostile("""
            import signal, time
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            while True:
                time.sleep(1)
            """),
        "exit_inside_test": "import os\ndef add(a, b):\n    os._exit(0)\n",
        "grandchild": GRANDCHILD,
        "forge_results": hostile("""
            import os
            for fd in range(3, 64):
                try:
                    os.write(fd, b'{"k": "done", "n": "guess"}\\n')
                except OSError:
                    pass
            print('{"k": "done"}')
            os._exit(0)
            """),
        "honest_3": ADD,
        "wrong": "def add(a, b):\n    return a * b\n",
    }
    os.environ["BASS_SANDBOX_CANARY"] = SECRET
    try:
        started = time.monotonic()
        outcomes = run_candidates(list(candidates.values()), ADD_TESTS, entry_point="add", timeout_s=TIMEOUT_S,
                                  memory_mb=512, workers=4)
        elapsed = time.monotonic() - started
    finally:
        del os.environ["BASS_SANDBOX_CANARY"]
    return dict(zip(candidates, outcomes)), elapsed, escape


def test_honest_candidates_unaffected(batch):
    outcomes, elapsed, _ = batch
    for name in ("honest_1", "honest_2", "honest_3"):
        assert (outcomes[name].status, outcomes[name].tests_passed) == (Status.PASSED, 3), outcomes[name]
    assert (outcomes["wrong"].status, outcomes["wrong"].tests_passed) == (Status.FAILED, 0)
    # 20 candidates, 4 workers, 4 of them hang until the timeout: no candidate held the pool longer than its own.
    assert elapsed < 4 * TIMEOUT_S


@pytest.mark.parametrize("name", ["fork_bomb", "infinite_loop", "ignore_sigterm"])
def test_hangs_time_out_and_leave_nothing_behind(batch, name):
    outcome = batch[0][name]
    assert outcome.status is Status.TIMEOUT and outcome.tests_passed == 0
    assert TIMEOUT_S <= outcome.wall_s < TIMEOUT_S + 2
    assert sandbox_processes() == []


def test_memory_hog(batch):
    outcome = batch[0]["memory_hog"]
    assert outcome.status is Status.MEMORY and outcome.first_failure.message == "MemoryError"


def test_busy_threads_do_not_stop_the_tests(batch):
    outcome = batch[0]["busy_threads"]
    assert (outcome.status, outcome.tests_passed) == (Status.PASSED, 3)
    assert outcome.wall_s < TIMEOUT_S


def test_huge_output_is_capped_without_blocking(batch):
    outcome = batch[0]["huge_output"]
    assert outcome.status is Status.PASSED
    assert outcome.stdout.startswith("x" * 1000) and "more bytes dropped" in outcome.stdout
    assert len(outcome.stdout) < SandboxConfig().max_output_bytes + 100


def test_big_file_is_stopped_by_the_file_size_limit(batch):
    outcome = batch[0]["big_file"]
    assert outcome.status is Status.ERROR and "File too large" in outcome.first_failure.message


def test_files_outside_the_working_directory_survive(batch, canary):
    outcome = batch[0]["delete_outside"]
    assert outcome.status is Status.ERROR and outcome.tests_passed == 0
    assert (canary / "keep.txt").read_text() == "must survive"
    assert not os.path.exists(batch[2])
    assert "remove: " in outcome.stdout and "write /tmp: " in outcome.stdout


def test_environment_is_scrubbed(batch):
    outcome = batch[0]["read_env"]
    assert outcome.status is Status.PASSED
    assert SECRET not in outcome.stdout and "BASS_SANDBOX_CANARY" not in outcome.stdout
    env = eval(outcome.stdout.split("env: ", 1)[1].split("\n", 1)[0])
    assert set(env) <= {"PATH", "HOME", "TMPDIR", "LANG", "MALLOC_ARENA_MAX", "LC_CTYPE"}


def test_no_network(batch, listener):
    outcome = batch[0]["socket"]
    assert outcome.status is Status.ERROR and outcome.first_failure.file == "candidate.py"
    assert listener[1] == []
    assert "netns" in outcome.isolation or "seccomp" in outcome.isolation


@pytest.mark.parametrize(("name", "status"), [("sys_exit", Status.ERROR), ("os_exit", Status.CRASHED),
                                              ("kill_self", Status.CRASHED), ("exit_inside_test", Status.CRASHED),
                                              ("forge_results", Status.CRASHED)])
def test_early_exit_is_never_a_pass(batch, name, status):
    outcome = batch[0][name]
    assert (outcome.status, outcome.tests_passed) == (status, 0), outcome


def test_grandchildren_are_killed(batch):
    outcome = batch[0]["grandchild"]
    assert outcome.status is Status.PASSED
    assert sandbox_processes() == []


def test_grandchildren_die_with_the_pid_namespace_without_a_sweep(monkeypatch):
    """In a PID namespace no process of the candidate can leave it, and all die with its init (in the process
    group the runner kills): the runner spends no `kill -1` by uid on such a candidate."""
    from sandbox import runner

    kills, real = [], runner.subprocess.run

    def recording(command, **kw):
        kills.append(command)
        return real(command, **kw)

    monkeypatch.setattr(runner.subprocess, "run", recording)
    (outcome,) = run_candidates([GRANDCHILD], ADD_TESTS, entry_point="add", timeout_s=TIMEOUT_S, memory_mb=512,
                                workers=1)
    assert outcome.status is Status.PASSED and "pidns" in outcome.isolation, outcome
    assert kills == []
    assert sandbox_processes() == []


def test_grandchildren_are_killed_where_setpriv_is_missing(monkeypatch):
    """Without util-linux's setpriv the kill by uid asks subprocess to change uid (it forks the caller): the
    same result, only dearer for a caller with much memory resident. The sweep by uid runs only where the
    candidate has no PID namespace (whose processes all die with its init), so `pidns` is switched off."""
    from sandbox import runner

    kills, real = [], runner.subprocess.run

    def recording(command, **kw):
        kills.append(("user" in kw, command[0]))
        return real(command, **kw)

    monkeypatch.setattr(runner, "_SETPRIV", None)
    monkeypatch.setattr(runner.subprocess, "run", recording)
    config = SandboxConfig(timeout_s=TIMEOUT_S, memory_mb=512, workers=1, disabled_layers=frozenset({"pidns"}))
    (outcome,) = run_candidates([GRANDCHILD], ADD_TESTS, entry_point="add", config=config)
    assert outcome.status is Status.PASSED and "pidns" not in outcome.isolation
    assert sandbox_processes() == []
    assert kills and all(by_user and "setpriv" not in program for by_user, program in kills)


def test_isolation_level_reported(batch):
    levels = {o.isolation for o in batch[0].values()}
    assert len(levels) == 1
    [level] = levels
    if os.geteuid() == 0:  # CI and this machine: the full set, with cgroups where the host lets us make them
        assert level.startswith("strict(") and level.endswith("+verdict)"), level
        layers = set(level[len("strict("):-1].split("+"))
        memory = layers & {"cgroup", "memwatch"}
        expected = {"netns", "ipcns", "mountns-ro", "fsview", "pidns", "rlimits", "uid", "seccomp", "verdict"}
        assert layers - memory == expected, level
        assert len(memory) == 1, level


def test_killing_the_parent_fails(tmp_path):
    # Run the runner in its own process: if the candidate could kill its parent, only that process would die.
    candidate = tmp_path / "killer.py"
    candidate.write_text("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n" + ADD)
    tests = tmp_path / "tests.py"
    tests.write_text(ADD_TESTS)
    run = subprocess.run([sys.executable, "-m", "sandbox", "run", str(candidate), str(tests), "--json",
                          "--timeout", "5"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert run.returncode == 1, run.stderr
    [outcome] = json.loads(run.stdout)["candidates"]
    assert outcome["status"] == "error" and "PermissionError" in outcome["first_failure"]
