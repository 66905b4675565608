"""Run candidate programs in the sandbox and turn its outcomes into the app's `TestReport`s.

The only place the app calls `sandbox`. A sandbox failure (as opposed to a failing candidate) becomes
an `error` report per candidate with the reason, so the ranking still shows every candidate.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from app.problems import entry_point_of
from app.ranking import TestReport

log = logging.getLogger("bass.app")

TIMEOUT_S = 10.0
MEMORY_MB = 1024


def to_report(outcome) -> TestReport:
    """A `sandbox.Outcome` → the fields the app shows."""
    failure = outcome.first_failure
    first = ""
    if failure is not None:
        where = f"{failure.file}:{failure.line}" if failure.line else failure.file
        first = f"{where}: {failure.source.strip()}" + (f" → {failure.message}" if failure.message else "")
    detail = outcome.detail or _tail(outcome.stderr)
    return TestReport(status=str(outcome.status), tests_passed=outcome.tests_passed,
                      tests_total=outcome.tests_total, first_failure=first, run_time_s=outcome.wall_s,
                      detail=detail)


def run_tests(programs: Sequence[str], tests: str, *, timeout_s: float = TIMEOUT_S,
              memory_mb: int = MEMORY_MB) -> list[TestReport]:
    """One report per program, in order. Blank tests still run each program (status `ran` or an error).

    The sandbox runs in its own process (`sandbox.service`), so the engine's thread in this one never
    competes with it.
    """
    from sandbox import shared_service

    try:
        outcomes = shared_service().run_candidates(list(programs), tests if tests.strip() else None,
                                  entry_point=entry_point_of(tests), timeout_s=timeout_s, memory_mb=memory_mb)
    except ValueError as exc:  # the tests themselves are broken (e.g. do not parse): say so on every card
        return [TestReport("error", 0, 0, "", 0.0, detail=f"tests not runnable: {exc}") for _ in programs]
    except Exception as exc:
        log.exception("sandbox failed")
        return [TestReport("error", 0, 0, "", 0.0, detail=f"sandbox failed: {type(exc).__name__}: {exc}")
                for _ in programs]
    return [to_report(o) for o in outcomes]


def _tail(text: str, lines: int = 4) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])
