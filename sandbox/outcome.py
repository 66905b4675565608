"""What running one candidate produced, and the order in which the app shows candidates."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass


class Status(enum.StrEnum):
    """How a candidate's run ended.

    `ran` is for a run with no tests at all: the program loaded and ran to its end without an error, and
    nothing more is claimed. A test counts as passed only when the harness saw it complete, so a program
    that exits early (`sys.exit`, `os._exit`, killing itself) never reaches `passed`.
    """

    PASSED = "passed"  # every test ran and passed (at least one test)
    FAILED = "failed"  # the program loaded; at least one test failed
    ERROR = "error"  # syntax, import or runtime error outside a test, or no entry point
    TIMEOUT = "timeout"  # wall-clock or CPU limit reached
    MEMORY = "memory"  # the address-space limit was hit (MemoryError)
    CRASHED = "crashed"  # the process died or exited before the harness saw the tests finish
    RAN = "ran"  # no tests: the program ran to its end without an error


@dataclass(frozen=True)
class TestFailure:
    """The first thing that went wrong: where (line in the tests, or in the candidate) and why."""

    __test__ = False  # not a pytest class

    file: str  # "tests.py" or "candidate.py"
    line: int | None
    source: str
    message: str


@dataclass(frozen=True)
class Outcome:
    """The result of one candidate, in the input order of the batch."""

    index: int
    status: Status
    tests_passed: int
    tests_total: int
    first_failure: TestFailure | None
    stdout: str
    stderr: str
    wall_s: float
    isolation: str  # e.g. "strict(netns+ipcns+mountns-ro+pidns+rlimits+uid+seccomp+verdict)": the layers in effect
    detail: str = ""  # a sentence for a human when the status alone does not say enough

    @property
    def all_passed(self) -> bool:
        return self.status in (Status.PASSED, Status.RAN)

    def summary(self) -> dict[str, object]:
        """The JSON-ready fields the CLI prints for one candidate."""
        failure = self.first_failure
        return {"index": self.index, "status": str(self.status), "tests_passed": self.tests_passed,
                "tests_total": self.tests_total, "wall_s": round(self.wall_s, 4), "isolation": self.isolation,
                "first_failure": None if failure is None else f"{failure.file}:{failure.line}: {failure.source} "
                                                              f"-> {failure.message}",
                "detail": self.detail}


def rank_outcomes(outcomes: Iterable[Outcome]) -> list[Outcome]:
    """Best first: all tests passed, then most tests passed, then fastest."""
    return sorted(outcomes, key=lambda o: (not o.all_passed, -o.tests_passed, o.wall_s))
