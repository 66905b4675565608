import os
import signal

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
