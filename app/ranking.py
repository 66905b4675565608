"""Sandbox outcomes + the engine's result → ranked candidate rows and the prompt's Pass@First / Pass@All.

The sandbox decides pass or fail; the metrics are `bass.metrics`'. This module only joins the two per
candidate and orders them for display: passing candidates first, then by the share of tests passed,
then by how early the candidate finished (the one a user would have seen first).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bass.events import FINISHED_IN_TIME, GenerationResult
from bass.metrics import pass_at_all, pass_at_first, time_to_first_pass

# Worse statuses sort later among candidates with the same share of tests passed.
STATUS_ORDER = ("passed", "ran", "failed", "untested", "error", "timeout", "memory", "crashed", "cancelled")


@dataclass(frozen=True)
class TestReport:
    """The app's view of one sandbox outcome."""

    __test__ = False  # a report, not a pytest class

    status: str
    tests_passed: int
    tests_total: int
    first_failure: str
    run_time_s: float
    detail: str = ""  # stderr tail or the sandbox's message, shown when no assertion is to blame

    @property
    def passed(self) -> bool:
        return self.status == "passed"


@dataclass(frozen=True)
class RankedCandidate:
    rank: int
    seq: int
    code: str  # the full program the sandbox ran (what a user copies)
    shown: str  # what the card shows: the generated part (a completion's body, a chat answer's code)
    report: TestReport | None  # None: not run (no tests given, or cancelled)
    tokens: int
    ms_per_token: float
    acceptance_rate: float | None  # None when nothing was drafted (regular decoding)
    finish_reason: str
    finish_time_s: float
    tests_given: bool = False  # an untested candidate was then cut or stopped, not short of tests

    @property
    def status(self) -> str:
        if self.report is not None:
            return self.report.status
        return "cancelled" if self.finish_reason == "cancelled" else "untested"

    @property
    def passed(self) -> bool:
        return self.report is not None and self.report.passed


def finish_times(result: GenerationResult) -> list[float | None]:
    """Per candidate, its finish time, or None when it was cut by the time budget or cancelled."""
    return [c.finish_time_or_none for c in result.candidates]


def rank_candidates(result: GenerationResult, programs: Sequence[str], reports: Sequence[TestReport | None],
                    shown: Sequence[str] | None = None, tests_given: bool = False) -> list[RankedCandidate]:
    """Join candidates, their programs and their test reports, best first.

    `programs[i]`, `reports[i]` (and `shown[i]`, default the program) belong to `result.candidates[i]`.
    """
    shown = programs if shown is None else shown
    if not len(result.candidates) == len(programs) == len(reports):
        raise ValueError(f"need one program and one report per candidate, got {len(result.candidates)} "
                         f"candidates, {len(programs)} programs, {len(reports)} reports")
    rows = []
    for i, (cand, code, report) in enumerate(zip(result.candidates, programs, reports)):
        stats = cand.stats
        rows.append(RankedCandidate(
            rank=0, seq=i, code=code, shown=shown[i], report=report, tokens=stats.tokens,
            ms_per_token=stats.ms_per_token, acceptance_rate=stats.acceptance_rate if stats.proposed else None,
            finish_reason=cand.finish_reason, finish_time_s=stats.finish_time_s, tests_given=tests_given))
    rows.sort(key=_sort_key)
    return [RankedCandidate(**{**row.__dict__, "rank": r}) for r, row in enumerate(rows, start=1)]


def _sort_key(row: RankedCandidate) -> tuple:
    report = row.report
    share = report.tests_passed / report.tests_total if report and report.tests_total else 0.0
    status_rank = STATUS_ORDER.index(row.status) if row.status in STATUS_ORDER else len(STATUS_ORDER)
    unfinished = row.finish_reason not in FINISHED_IN_TIME
    return (not row.passed, -share, status_rank, unfinished, row.finish_time_s, row.seq)


@dataclass(frozen=True)
class PassSummary:
    tested: bool
    pass_first: bool
    pass_all: bool
    passed: int
    total: int
    first_pass_s: float | None = None  # time to first pass (bass.metrics), None when nothing passed
    checked: int | None = None  # candidates with a verdict (None: all); the others were cut or stopped first

    @property
    def best_failed(self) -> bool:
        """Tests were given and no candidate passed them."""
        return self.tested and self.passed == 0


def pass_summary(result: GenerationResult, reports: Sequence[TestReport | None],
                 tests_given: bool | None = None) -> PassSummary:
    """Pass@First / Pass@All of this prompt (docs/design.md §5), over the candidates in engine order.

    `tests_given`: whether the visitor gave tests (default: whether any candidate has a report); with tests
    and no report at all the summary still counts as tested: nothing was checked, and nothing passed."""
    checked = sum(r is not None for r in reports)
    tested = checked > 0 if tests_given is None else tests_given
    passed = [r is not None and r.passed for r in reports]
    times = finish_times(result)
    return PassSummary(tested=tested, pass_first=pass_at_first(times, passed), pass_all=pass_at_all(times, passed),
                       passed=sum(passed), total=len(passed),
                       first_pass_s=time_to_first_pass(result.stats.prefill_s, times, passed), checked=checked)


def table_rows(rows: Sequence[RankedCandidate]) -> list[list]:
    """Rows for a plain table / CSV export of the ranking."""
    out = []
    for row in rows:
        rep = row.report
        out.append([
            row.rank, row.seq, row.status,
            f"{rep.tests_passed}/{rep.tests_total}" if rep else "",
            (rep.first_failure if rep else ""),
            round(rep.run_time_s, 3) if rep else None,
            row.tokens, round(row.ms_per_token, 1),
            None if row.acceptance_rate is None else round(row.acceptance_rate, 3),
            row.finish_reason, round(row.finish_time_s, 2),
        ])
    return out


TABLE_HEADERS = ["rank", "seq", "status", "tests", "first failure", "test time (s)", "tokens", "ms/token",
                 "acceptance", "finish", "finished at (s)"]
