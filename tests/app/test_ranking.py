"""Outcomes + result → ranked rows, Pass@First / Pass@All."""

from __future__ import annotations

import pytest

from app.ranking import TABLE_HEADERS, TestReport, pass_summary, rank_candidates, table_rows
from bass.events import BatchStats, Candidate, GenerationResult, SequenceStats


def result_of(specs):
    """specs: (finish_reason, finish_time_s, tokens, proposed, accepted) per candidate."""
    cands = tuple(Candidate(0, i, f"text{i}", (), reason, SequenceStats(tok, 3, prop, acc, t))
                  for i, (reason, t, tok, prop, acc) in enumerate(specs))
    return GenerationResult(cands, BatchStats("bass", "ngram", "torch", len(cands), 0.1, 2.0, 0, 0, 0, 0, 0.0))


def rep(status, passed, total, first=""):
    return TestReport(status, passed, total, first, 0.1)


def test_order_passed_then_share_then_finish_time():
    result = result_of([("stop", 1.0, 10, 8, 4), ("stop", 0.5, 10, 8, 4), ("stop", 2.0, 10, 8, 4),
                        ("stop", 0.2, 10, 8, 4), ("stop", 0.1, 10, 0, 0)])
    reports = [rep("failed", 3, 7), rep("passed", 7, 7), rep("passed", 7, 7), rep("error", 0, 7), rep("failed", 6, 7)]
    rows = rank_candidates(result, [f"p{i}" for i in range(5)], reports)
    assert [r.seq for r in rows] == [1, 2, 4, 0, 3]
    assert [r.rank for r in rows] == [1, 2, 3, 4, 5]
    assert rows[0].code == "p1" and rows[0].shown == "p1"
    assert rows[2].acceptance_rate is None  # nothing proposed: regular decoding
    assert rows[3].acceptance_rate == pytest.approx(0.5)


def test_budget_cut_candidates_rank_after_finished_ones_with_equal_results():
    result = result_of([("budget", 0.1, 5, 0, 0), ("stop", 3.0, 5, 0, 0)])
    rows = rank_candidates(result, ["a", "b"], [rep("failed", 1, 2), rep("failed", 1, 2)])
    assert [r.seq for r in rows] == [1, 0]


def test_untested_candidates_keep_finish_order_and_status():
    result = result_of([("stop", 2.0, 5, 0, 0), ("cancelled", 1.0, 5, 0, 0), ("eos", 1.0, 5, 0, 0)])
    rows = rank_candidates(result, ["a", "b", "c"], [None, None, None], shown=["A", "B", "C"])
    assert [r.seq for r in rows] == [2, 0, 1]
    assert [r.status for r in rows] == ["untested", "untested", "cancelled"]
    assert rows[0].shown == "C"


def test_pass_summary_first_to_finish_decides_pass_at_first():
    result = result_of([("stop", 1.0, 5, 0, 0), ("stop", 0.4, 5, 0, 0), ("budget", 0.1, 5, 0, 0)])
    # the budget-cut seq 2 "passing" does not count; seq 1 finished first and fails
    s = pass_summary(result, [rep("passed", 2, 2), rep("failed", 1, 2), rep("passed", 2, 2)])
    assert (s.pass_first, s.pass_all, s.passed, s.total, s.tested) == (False, True, 2, 3, True)
    s2 = pass_summary(result, [rep("failed", 0, 2), rep("passed", 2, 2), rep("failed", 0, 2)])
    assert (s2.pass_first, s2.pass_all) == (True, True)
    s3 = pass_summary(result, [None, None, None])
    assert (s3.tested, s3.pass_all) == (False, False)


def test_table_rows_match_headers():
    result = result_of([("stop", 1.0, 10, 8, 6)])
    rows = table_rows(rank_candidates(result, ["p"], [rep("failed", 2, 5, "tests.py:3: assert f(1) == 2")]))
    assert len(rows[0]) == len(TABLE_HEADERS)
    row = dict(zip(TABLE_HEADERS, rows[0]))
    assert row["tests"] == "2/5" and row["status"] == "failed" and row["acceptance"] == 0.75
    assert row["ms/token"] == 100.0 and row["first failure"].startswith("tests.py:3")


def test_lengths_must_match():
    with pytest.raises(ValueError, match="one program and one report per candidate"):
        rank_candidates(result_of([("stop", 1.0, 1, 0, 0)]), ["a", "b"], [None])
