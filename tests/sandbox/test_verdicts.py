"""Verdicts a candidate cannot forge: every trick a wrong candidate may try to make its failing tests pass,
in one batch with an honest candidate, each reported as failed with a message that says what happened."""

import marshal
import math
import textwrap

import pytest

from sandbox import Status, run_candidates
from sandbox.bridge import rebuild_exception
from sandbox.plain import MAX_BYTES, MAX_DEPTH, NotPlainDataError, check, decode, encode

# f(x) = 2x + 1; only an honest candidate gets these right.
TESTS = """
def check(candidate):
    assert candidate(2) == 5
    assert candidate(3) == 7
    assert abs(candidate(4) - 9) < 1e-9
    try:
        candidate(-1)
    except ValueError as exc:
        assert type(exc) is ValueError and str(exc) == "negative"
    else:
        assert False, "no ValueError"
"""
HONEST = """
def f(x):
    if x < 0:
        raise ValueError("negative")
    return 2 * x + 1
"""
UNSAFE = "which cannot be compared safely"


def returning(setup: str, value: str) -> str:
    """A wrong candidate: `setup` at module level, then f returns `value` for every input."""
    return textwrap.dedent(setup) + f"\ndef f(x):\n    return {value}\n"


FORGERIES = {
    "eq_always": (returning("class Yes:\n    def __eq__(self, other):\n        return True", "Yes()"),
                  "returned an instance of `Yes`"),
    "int_subclass": (returning("class Int(int):\n    __eq__ = lambda self, other: True\n"
                               "    __sub__ = lambda self, other: 0", "Int(0)"), "returned an instance of `Int`"),
    "str_subclass": (returning("class Str(str):\n    __eq__ = lambda self, other: True", "Str()"),
                     "returned an instance of `Str`"),
    "list_subclass": (returning("class List(list):\n    __eq__ = lambda self, other: True", "List()"),
                      "returned an instance of `List`"),
    "class_impostor": (returning("class Fake:\n    __class__ = int\n    __eq__ = lambda self, other: True",
                                 "Fake()"), "returned an instance of `Fake`"),
    "nested": (returning("class Yes:\n    __eq__ = lambda self, other: True", "(Yes(),)"),
               "returned a tuple containing an instance of `Yes`"),
    "recursive": (returning("loop = []\nloop.append(loop)", "loop"), "contains itself"),
    "huge": (returning("", "b'x' * (40 << 20)"), "more than the 32 MB"),
    "generator": (returning("", "(i for i in range(x))"), "returned an instance of `generator`"),
    "lambda": (returning("", "lambda *a: True"), "returned an instance of `function`"),
}


@pytest.fixture(scope="module")
def batch():
    hostile = {
        # Patch builtins and shadow them at module level: the tests' `abs` stays the real one.
        "patch_builtins": returning("import builtins\nbuiltins.abs = lambda x: 0\nbuiltins.len = lambda x: 1\n"
                                    "builtins.isinstance = lambda *a: True\ndef abs(x):\n    return 0", "0"),
        # Find the harness's reporting code, its nonce and every open descriptor but its own channel (fd 3,
        # see channel_garbage), and report passes.
        "gc_report": returning("""
            import gc, os
            nonces = [o["nonce"] for o in gc.get_objects() if type(o) is dict and "nonce" in o] + ["guess"]
            reporters = [o for o in gc.get_objects() if callable(o) and getattr(o, "__name__", "") in
                         ("report", "_reporter")]
            for fd in (0, 1, 2, *range(4, 64)):
                for nonce in nonces:
                    for i in range(4):
                        line = repr({"k": "unit", "i": i, "ok": True, "n": nonce}) + "\\n"
                        try:
                            os.write(fd, line.encode())
                        except OSError:
                            pass
            for report in reporters:
                try:
                    report(k="done")
                except Exception:
                    pass
            print("found", len(nonces) - 1, "nonces")
            """, "0"),
        # Print verdict lines, then exit mid-test as if the tests were over.
        "exit_with_fake_verdict": "import os\ndef f(x):\n    print(\"{'k': 'done', 'n': 'x'}\")\n"
                                  "    os.write(1, b'passed 4/4\\n')\n    os._exit(0)\n",
        # Reach into the tests' process through /proc, ptrace-style access and signals.
        "proc_peek": returning("""
            import os, signal
            parent = os.getppid()
            for what in [f"fd/{n}" for n in range(3, 8)] + ["mem", "environ"]:
                try:
                    os.close(os.open(f"/proc/{parent}/{what}", os.O_RDWR if what == "mem" else os.O_WRONLY))
                    print(what, "opened")
                except OSError as exc:
                    print(what, type(exc).__name__)
            try:
                os.kill(parent, signal.SIGSTOP)
                print("stopped it")
            except OSError as exc:
                print("signal", type(exc).__name__)
            """, "0"),
        # Write forged frames into its own channel to the tests' process.
        "channel_garbage": "import os\nos.write(3, b'{\"k\": \"done\"}\\n' * 4)\n" + HONEST,
        # Raise a custom subclass of the expected exception: it arrives as the builtin, same message.
        "custom_exception": HONEST.replace("raise ValueError", "raise Odd") + textwrap.dedent("""
            class Odd(ValueError):
                def __eq__(self, other):
                    return True
            """),
    }
    candidates = {"honest": HONEST, **{name: program for name, (program, _) in FORGERIES.items()}, **hostile}
    outcomes = run_candidates(list(candidates.values()), TESTS, entry_point="f", timeout_s=8, memory_mb=512,
                              workers=2)
    return dict(zip(candidates, outcomes))


def test_honest_candidate_and_exceptions_cross_the_boundary(batch):
    assert (batch["honest"].status, batch["honest"].tests_passed) == (Status.PASSED, 4), batch["honest"]
    # A subclass of ValueError is caught by `except ValueError` and arrives as exactly ValueError.
    custom = batch["custom_exception"]
    assert (custom.status, custom.tests_passed) == (Status.PASSED, 4), custom


@pytest.mark.parametrize("name", sorted(FORGERIES))
def test_results_that_are_not_plain_data_fail_and_say_why(batch, name):
    outcome = batch[name]
    assert (outcome.status, outcome.tests_passed) == (Status.FAILED, 0), outcome
    failure = outcome.first_failure
    assert failure.file == "tests.py" and failure.line == 3 and failure.source == "assert candidate(2) == 5"
    assert failure.message.startswith("UnsafeResult: f() ") and UNSAFE in failure.message
    assert FORGERIES[name][1] in failure.message, failure.message


def test_patched_and_shadowed_builtins_stay_in_the_candidates_process(batch):
    outcome = batch["patch_builtins"]
    assert (outcome.status, outcome.tests_passed) == (Status.FAILED, 0), outcome
    assert outcome.first_failure.message == "AssertionError"


def test_reporting_code_nonce_and_descriptors_reach_nothing(batch):
    outcome = batch["gc_report"]
    assert (outcome.status, outcome.tests_passed) == (Status.FAILED, 0), outcome
    assert "found 1 nonces" in outcome.stdout or "found 0 nonces" in outcome.stdout


def test_exit_with_a_fake_verdict_is_a_crash(batch):
    outcome = batch["exit_with_fake_verdict"]
    assert (outcome.status, outcome.tests_passed) == (Status.CRASHED, 0), outcome
    assert outcome.detail == "the candidate's process exited with code 0 before the tests finished"
    assert outcome.first_failure.message == "CandidateGone: the candidate's process exited with code 0 during this test"


def test_the_tests_process_is_out_of_reach(batch):
    outcome = batch["proc_peek"]
    assert (outcome.status, outcome.tests_passed) == (Status.FAILED, 0), outcome
    assert "opened" not in outcome.stdout and "stopped it" not in outcome.stdout
    # Its parent is the init of its PID namespace (the tests' process is not even visible there): every
    # descriptor, its memory, its environment and signals are refused.
    lines = outcome.stdout.splitlines()
    assert len(lines) == 8 and all(line.split()[1] in ("PermissionError", "OSError") for line in lines), lines


def test_garbage_on_the_channel_is_a_crash_that_says_so(batch):
    outcome = batch["channel_garbage"]
    assert (outcome.status, outcome.tests_passed) == (Status.CRASHED, 0), outcome
    assert "sent a message of" in outcome.detail and "more than the" in outcome.detail


def test_a_test_that_swallows_the_error_still_fails():
    tests = textwrap.dedent("""
        def check(candidate):
            try:
                assert candidate(2) == 5
            except BaseException:
                pass
        """)
    forged, honest = run_candidates([FORGERIES["eq_always"][0], HONEST], tests, entry_point="f")
    assert (forged.status, forged.tests_passed) == (Status.FAILED, 0) and UNSAFE in forged.first_failure.message
    assert honest.status is Status.PASSED


def test_suites_that_pass_objects_are_refused_by_name():
    tests = "def check(candidate):\n    assert candidate(1) == 3\n    assert candidate(lambda: 1) == 3\n"
    [outcome] = run_candidates([HONEST], tests, entry_point="f")
    assert (outcome.status, outcome.tests_passed) == (Status.ERROR, 1), outcome
    assert outcome.first_failure.line == 3 and "tests.py:3" in outcome.detail
    assert outcome.first_failure.message.startswith("SuiteNeedsObjects: the tests pass ")
    assert "an instance of `function` to f()" in outcome.first_failure.message


def test_helpers_values_and_modules_the_tests_name():
    program = "import math\nSCALE = 3\ndef helper(s):\n    return s[::-1]\ndef f(x):\n    return helper(x)\n"
    tests = textwrap.dedent("""
        def check(candidate):
            assert candidate(helper("abc")) == "abc"
            assert SCALE == 3 and math.sqrt(9) == SCALE
        """)
    [outcome] = run_candidates([program], tests, entry_point="f")
    assert (outcome.status, outcome.tests_passed) == (Status.PASSED, 2), outcome


def test_plain_data_round_trips_exactly():
    nan = float("nan")
    value = (None, True, -0.0, 10**40, 1 + 2j, "é", b"\0", [1, [2]], {"a": {1, 2}}, frozenset({(1, "x")}))
    assert decode(encode(value)) == value
    assert math.isnan(decode(encode(nan))) and math.copysign(1, decode(encode(-0.0))) == -1
    shared = [[0] * 3] * 40  # shared, not cyclic: allowed, and checked in linear time
    assert decode(encode(shared)) == shared


@pytest.mark.parametrize(("data", "says"), [
    (marshal.dumps((lambda: 0).__code__), "an instance of `code`"),
    (marshal.dumps(Ellipsis), "an instance of `ellipsis`"),
    (b"\xdb\x01\x00\x00\x00r\x00\x00\x00\x00", "contains itself"),  # marshal's own bytes for l = [l]
    (b"\xff\x00garbage", "malformed data"),
    (b"", "malformed data"),
])
def test_decode_refuses_whatever_the_bytes(data, says):
    with pytest.raises(NotPlainDataError, match=says):
        decode(data)


def test_check_limits_depth_and_size():
    deep: list = []
    for _ in range(MAX_DEPTH + 5):
        deep = [deep]
    with pytest.raises(NotPlainDataError, match="nested more than"):
        check(deep)
    with pytest.raises(NotPlainDataError, match="more than the"):
        decode(b"\0" * (MAX_BYTES + 1))
    with pytest.raises(NotPlainDataError, match="a dict containing an instance of `object`"):
        check({1: object()})


def test_rebuilt_exceptions_are_builtin():
    assert type(rebuild_exception("KeyError", ("k",))) is KeyError
    odd = rebuild_exception("UnicodeDecodeError", ("only one argument",))
    assert isinstance(odd, ValueError) and str(odd) == "only one argument"
    assert type(rebuild_exception("NotAnException", ("x",))) is Exception
    assert type(rebuild_exception("print", ())) is Exception


# Idioms of LLM-written suites whose iteration a StopIteration ends early: each passes a candidate that
# raises it unless the exception arrives as something else.
ITERATING_TESTS = """
def check(candidate):
    assert all(map(candidate, [2, 3, 5, 7]))
    assert not any(map(candidate, [4, 6, 8, 9]))
    for verdict in map(candidate, [11, 13]):
        assert verdict
    assert list(filter(candidate, [4, 6, 8])) == []
    assert next(iter(lambda: candidate(4), False), "ended") == "ended"
"""
IS_PRIME = "def is_prime(n):\n    return n > 1 and all(n % d for d in range(2, n))\n"


@pytest.mark.parametrize("raised", ["StopIteration", "StopAsyncIteration", "GeneratorExit", "KeyboardInterrupt",
                                    "SystemExit", "BaseException", "Quiet"])
def test_control_flow_exceptions_fail_the_test_that_iterates(raised):
    forged = f"class Quiet(BaseException):\n    pass\ndef is_prime(n):\n    raise {raised}\n"
    honest, outcome = run_candidates([IS_PRIME, forged], ITERATING_TESTS, entry_point="is_prime", workers=2)
    assert (honest.status, honest.tests_passed) == (Status.PASSED, 5), honest
    assert (outcome.status, outcome.tests_passed) == (Status.FAILED, 0), outcome
    shown = "BaseException" if raised == "Quiet" else raised  # a subclass arrives as its nearest builtin class
    assert outcome.first_failure.message.startswith(f"UnsafeException: is_prime() raised {shown}, "), outcome
