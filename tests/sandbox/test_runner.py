
import pytest
from sandbox_cases import ADD, ADD_TESTS

from sandbox import Outcome, SandboxConfig, Status, TestFailure, rank_outcomes, run_candidates


def _outcome(index, status, passed, total, wall):
    return Outcome(index, status, passed, total, None, "", "", wall, "strict()")


def test_ranking_all_passed_first_then_tests_passed_then_time():
    outcomes = [_outcome(0, Status.FAILED, 9, 10, 0.1), _outcome(1, Status.FAILED, 2, 10, 0.01),
                _outcome(2, Status.PASSED, 10, 10, 0.5), _outcome(3, Status.PASSED, 10, 10, 0.2),
                _outcome(4, Status.TIMEOUT, 9, 10, 0.05), _outcome(5, Status.CRASHED, 0, 10, 0.0)]
    assert [o.index for o in rank_outcomes(outcomes)] == [3, 2, 4, 0, 1, 5]


def test_partial_credit_first_failure_and_input_order():
    wrong_sign = "def add(a, b):\n    return a - b\n"
    off_by_one = "def add(a, b):\n    print('adding', a, b)\n    return a + b + (a > 5)\n"
    outcomes = run_candidates([wrong_sign, ADD, off_by_one], ADD_TESTS, entry_point="add", timeout_s=10)
    assert [o.index for o in outcomes] == [0, 1, 2]
    assert [(o.status, o.tests_passed, o.tests_total) for o in outcomes] == [
        (Status.FAILED, 0, 3), (Status.PASSED, 3, 3), (Status.FAILED, 2, 3)]
    assert outcomes[0].first_failure == TestFailure("tests.py", 3, "assert candidate(1, 2) == 3", "AssertionError")
    assert outcomes[2].first_failure.line == 5 and "adding 10 5" in outcomes[2].stdout
    assert [o.index for o in rank_outcomes(outcomes)] == [1, 2, 0]


def test_plain_asserts_no_tests_and_entry_point_rules():
    plain = "assert add(2, 2) == 4\nassert add(2, 3) == 6\nprint('after')\n"
    no_tests_ok, no_tests_broken = "print('hello')\n", "print(undefined_name)\n"
    [plain_outcome] = run_candidates([ADD], plain)
    assert (plain_outcome.status, plain_outcome.tests_passed, plain_outcome.tests_total) == (Status.FAILED, 1, 2)
    ran, broken = run_candidates([no_tests_ok, no_tests_broken], None)
    assert (ran.status, ran.tests_total, ran.stdout) == (Status.RAN, 0, "hello\n") and ran.all_passed
    assert broken.status is Status.ERROR and "NameError" in broken.first_failure.message
    assert broken.first_failure.file == "candidate.py" and broken.first_failure.line == 1
    # With check() and no entry point, the candidate's only function is used; with two, the user must say.
    [auto] = run_candidates([ADD], ADD_TESTS)
    assert auto.status is Status.PASSED
    two = ADD + "def sub(a, b):\n    return a - b\n"
    [ambiguous] = run_candidates([two], ADD_TESTS)
    assert ambiguous.status is Status.ERROR and "entry-point" in ambiguous.first_failure.message
    [missing] = run_candidates([ADD], ADD_TESTS, entry_point="plus")
    assert missing.status is Status.ERROR and "'plus'" in missing.first_failure.message


def test_errors_inside_and_outside_tests():
    syntax = "def add(a, b)\n    return a + b\n"
    raises_in_test = "def add(a, b):\n    return a + b if a != -1 else 1 / 0\n"
    import_error = "import no_such_module_xyz\n" + ADD
    outcomes = run_candidates([syntax, raises_in_test, import_error], ADD_TESTS, entry_point="add")
    assert outcomes[0].status is Status.ERROR and outcomes[0].first_failure.message.startswith("SyntaxError")
    assert (outcomes[1].status, outcomes[1].tests_passed) == (Status.FAILED, 2)
    assert outcomes[1].first_failure.message == "ZeroDivisionError: division by zero"
    assert outcomes[2].status is Status.ERROR and "ModuleNotFoundError" in outcomes[2].first_failure.message


def test_candidate_may_use_its_own_directory():
    program = """
import os, tempfile
with open("notes.txt", "w") as f:
    f.write("kept")
os.mkdir("sub")
with tempfile.NamedTemporaryFile(dir=os.environ["TMPDIR"]) as f:
    f.write(b"scratch")
print(open("notes.txt").read(), sorted(os.listdir(".")), os.getcwd() == os.environ["HOME"])
"""
    first, second = run_candidates([program, "import os\nprint(os.listdir('.'))\n"])
    assert (first.status, first.stdout) == (Status.RAN, "kept ['notes.txt', 'sub'] True\n"), first
    assert second.stdout == "[]\n"  # its own, empty directory


def test_candidates_share_no_state():
    # Each candidate is its own fork of a pristine template: no random state, globals or builtins carried over.
    program = """
import builtins, random
print(random.getrandbits(64), hasattr(builtins, "planted"))
builtins.planted = True
"""
    outcomes = run_candidates([program] * 4, None, workers=2)
    values = [o.stdout.split() for o in outcomes]
    assert all(flag == "False" for _, flag in values) and len({number for number, _ in values}) == 4


def test_config_validation_says_what_to_do():
    with pytest.raises(ValueError, match="memory_mb must be a whole number from 128 to"):
        SandboxConfig(memory_mb=16)
    with pytest.raises(ValueError, match="timeout_s must be a number of seconds above 0"):
        SandboxConfig(timeout_s=0)
    with pytest.raises(ValueError, match="choose from"):
        SandboxConfig(disabled_layers=frozenset({"chroot"}))
    with pytest.raises(ValueError, match="do not parse"):
        run_candidates([ADD], "def check(candidate):\n    assert (\n")
