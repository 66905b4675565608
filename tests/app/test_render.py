"""HTML views: escaping, badges, one card per candidate, readable errors."""

from __future__ import annotations

import re

import pytest

from app.charts import LiveRun
from app.ranking import PassSummary, RankedCandidate, TestReport
from app.render import error_html, live_cards_html, ranked_cards_html, status_html, summary_html
from app.timing import RunClock, RunTiming
from bass.events import GenerationEvent, SequenceUpdate


def test_live_cards_one_per_sequence_and_escaped():
    run = LiveRun(3)
    run.add(GenerationEvent("round", 1, 0.5, 2, (SequenceUpdate(1, (1, 2), "x", 2, 1, True, "eos"),),
                            ("", "<script>alert(1)</script>", "")))
    html = live_cards_html(run)
    assert len(re.findall(r'class="bass-card[ "]', html)) == 3
    assert "<script>" not in html and "alert" in html
    assert "done: end of text" in html and html.count('bass-badge-live">running') == 2
    assert "acc 50%" in html and "4.0 tok/s" in html


def test_long_text_is_clipped_to_its_end():
    run = LiveRun(1)
    run.add(GenerationEvent("round", 1, 0.5, 0, (), ("a" * 50 + "TAIL",)))
    html = live_cards_html(run, limit_chars=10)
    assert "TAIL" in html and "a" * 11 not in html


def row(rank, seq, status, passed, total, first="", finish="stop"):
    report = None if status in ("untested", "cancelled") else TestReport(status, passed, total, first, 0.25)
    return RankedCandidate(rank, seq, "def f(): pass", "pass", report, 12, 80.0, 0.5, finish, 1.0)


def test_ranked_cards_badges_failures_and_best():
    html = ranked_cards_html([row(1, 2, "passed", 3, 3), row(2, 0, "failed", 1, 3, "tests.py:4: assert f(2) == 3"),
                              row(3, 1, "timeout", 0, 3)], note="Ranked.")
    assert len(re.findall(r'class="bass-card[ "]', html)) == 3
    badges = re.findall(r'bass-badge-\w+">([^<]+)<', html)
    assert badges == ["PASS", "FAIL", "TIMEOUT"]
    assert "tests 3/3" in html and "tests 1/3" in html and "ran 0.25 s" in html
    assert "tests.py:4: assert f(2) == 3" in html
    assert html.count("bass-best") == 1 and "Ranked." in html


def test_summary_html_pass_badges_and_numbers():
    html = summary_html(PassSummary(True, False, True, 1, 4), 123.4, 0.625, 2.5, RunTiming(12.0, 0.0, None), "BASS")
    assert "Pass@First" in html and "Pass@All" in html
    assert re.findall(r'bass-badge-\w+">([^<]+)<', html) == ["FAIL", "PASS"]
    assert "1/4" in html and "123 ms/token" in html and "62%" in html
    untested = summary_html(PassSummary(False, False, False, 0, 2), 10, None, 1.0, RunTiming(1.0, 0.0, None), "regular")
    assert "Pass@" not in untested and "no tests" in untested and "acceptance" not in untested


def test_status_and_error_boxes():
    assert "bass-indeterminate" in status_html("Prefill…")
    assert 'style="width:40.0%"' in status_html("Loading", fraction=0.4)
    err = error_html("The prompt is empty.", "Type something <here>")
    assert "bass-error" in err and "&lt;here&gt;" in err and "Traceback" not in err


def test_live_card_shows_its_verdict_while_siblings_run_and_its_acceptance_strip():
    from bass.eval.verdicts import Verdict

    run = LiveRun(2)
    run.add(GenerationEvent("round", 1, 0.5, 3, (SequenceUpdate(0, (1, 2, 3), "ab", 3, 2, False),
                                                  SequenceUpdate(1, (1,), "x", 3, 0, False)), ("ab", "x")))
    run.add(GenerationEvent("round", 2, 1.0, 3, (SequenceUpdate(0, (4,), "c", 3, 0, True, "stop"),
                                                  SequenceUpdate(1, (1, 2, 3, 4), "y", 3, 3, False)), ("abc", "xy")))
    html = live_cards_html(run, {0: Verdict(0, TestReport("passed", 7, 7, "", 0.2), True, 1.2)})
    assert badges_of(html) == ["PASS", "running"] and "tests 7/7" in html
    # per sequence, per round: accepted draft tokens of the proposed ones
    assert re.findall(r'data-accepted="([^"]*)"', html) == ["2 0", "0 3"]
    assert "accepted/round · 2/6" in html and "accepted/round · 3/6" in html
    assert "testing…" in live_cards_html(run)  # finished, no verdict yet


def test_summary_states_time_to_first_pass_and_a_wait_in_line_apart():
    html = summary_html(PassSummary(True, False, True, 1, 4, first_pass_s=3.25), 120.0, 0.4, 1.5,
                        RunTiming(9.0, 0.1, 3.9), "BASS")
    assert "time to first pass <b>3.2 s</b>" in html and "PASS shown at 3.9 s" in html
    assert "wall 9.0 s from the start of prefill" in html and "in line" not in html
    none = summary_html(PassSummary(True, False, False, 0, 4), 120.0, None, 1.0, RunTiming(9.0, 0.0, None), "BASS")
    assert "time to first pass <b>none</b>" in none
    queued = summary_html(PassSummary(True, False, True, 1, 4, first_pass_s=3.25), 120.0, 0.4, 1.5,
                          RunTiming(9.0, 5.2, 3.9), "BASS")
    assert "PASS shown at 3.9 s" in queued and "wall 9.0 s from the start of prefill, after 5.2 s in line" in queued


def test_the_run_clock_measures_from_the_start_of_prefill():
    """A visitor who waited 5 s in line: the prefill (0.5 s) ended at 5.5 s, the PASS reached the page at 12.6 s,
    the run ended at 14 s. Times are from the start of prefill (5.0 s), the wait stated apart."""
    clock = RunClock(100.0)
    clock.started(105.5, 0.5)
    timing = clock.timing(114.0, 112.6)
    assert timing == RunTiming(wall_s=pytest.approx(9.0), waited_s=pytest.approx(5.0),
                               pass_shown_s=pytest.approx(7.6))
    assert RunClock(100.0).timing(101.0, None) == RunTiming(1.0, 0.0, None)  # stopped in line: no prefill


def badges_of(html):
    return re.findall(r'bass-badge-\w+">([^<]+)<', html)
