import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sandbox_cases import ADD, ADD_TESTS

from sandbox import SandboxService, SandboxServiceError, Status, load_humaneval, run_candidates


@pytest.fixture(scope="module")
def service():
    s = SandboxService(concurrent_batches=1)
    yield s
    s.close()


def test_same_outcomes_as_in_process_from_another_process(service):
    wrong = "def add(a, b):\n    return a - b\n"
    remote = service.run_candidates([wrong, ADD], ADD_TESTS, entry_point="add", timeout_s=10)
    local = run_candidates([wrong, ADD], ADD_TESTS, entry_point="add", timeout_s=10)
    assert [(o.index, o.status, o.tests_passed, o.first_failure) for o in remote] == \
        [(o.index, o.status, o.tests_passed, o.first_failure) for o in local]
    assert [o.status for o in remote] == [Status.FAILED, Status.PASSED]
    assert service._call(os.getpid) != os.getpid()  # it ran in the helper, not here


def test_humaneval_through_the_helper(service):
    problem = load_humaneval()[0]
    good, bad = problem.canonical_solution, "    return True\n"
    assert [o.all_passed for o in service.run_humaneval([problem, problem], [good, bad])] == [True, False]


def test_errors_come_back_as_themselves(service):
    with pytest.raises(ValueError, match="do not parse"):
        service.run_candidates([ADD], "def check(candidate):\n    assert (\n")


def test_a_dead_helper_is_reported_then_replaced(service):
    pid = service._call(os.getpid)
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(SandboxServiceError, match="run the tests again"):
        for _ in range(50):  # the pool may learn of the death only at the next submission
            service._call(os.getpid)
    assert service._call(os.getpid) not in (pid, os.getpid())
    [outcome] = service.run_candidates([ADD], ADD_TESTS, entry_point="add")
    assert outcome.status == Status.PASSED


def test_the_helper_does_not_outlive_a_killed_caller():
    """A caller killed without its exit hooks (SIGKILL) leaves no helper behind: it exits within a second or
    so, where before it idled on for good (found after `make demo` was stopped)."""
    caller = (
        "import os, signal\n"
        "from sandbox import SandboxService\n"
        "s = SandboxService(concurrent_batches=1)\n"
        "print(s._call(os.getpid), flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    root = Path(__file__).resolve().parents[2]
    run = subprocess.run([sys.executable, "-c", caller], capture_output=True, text=True, timeout=120, cwd=root,
                         env={**os.environ, "PYTHONPATH": str(root)})
    assert run.returncode == -signal.SIGKILL, run.stderr
    helper = int(run.stdout.split()[0])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(helper):
        time.sleep(0.1)
    assert not _alive(helper)


def _alive(pid: int) -> bool:
    """Whether pid runs (a zombie, dead but not yet reaped by init, counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
