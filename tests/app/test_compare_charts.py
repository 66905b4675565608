"""The Compare tab's bar charts and note (`app.compare_html`): bars from 0, a reason where a bar is missing,
partial runs hatched and named, titles short enough to fit."""

from __future__ import annotations

import re
from dataclasses import replace

from test_compare_export import one_run, result

from app.compare_html import charts_html, note_html, sentence_html
from bass.eval.compare_report import table_rows
from bass.eval.compare_results import Comparison, MethodResult, MethodRun


def widths(html: str, chart: int) -> list[float]:
    figure = html.split("<figure")[chart + 1]
    return [float(w) for w in re.findall(r'style="width:([\d.]+)%"', figure)]


def rows(regular_reason="stop", passed=(True, False)):
    """Three methods; BASS's first pass (from its normal run) at 0.3 s of prefill + 1 s, when it passed."""
    tested = passed is not None
    bass_res = result("bass", [50.0, 70.0], 20, 15)
    bass = one_run("bass", bass_res, 3.0, passed=passed, tested=tested, first_run=MethodRun("bass", bass_res, 3.0),
                   first_passed=passed)
    reg = result("regular", [120.0, 120.0])
    reg = replace(reg, candidates=tuple(replace(c, finish_reason=regular_reason) for c in reg.candidates))
    regular = MethodResult("regular", (MethodRun("regular", reg, 6.0, budget_s=6.0),), passed=(None, None) if tested
                           else None, tested=tested)
    single = one_run("single", result("single", [40.0, 40.0], 20, 15), 9.0, passed=(False, False) if tested else None,
                     tested=tested)
    return table_rows(Comparison({"bass": bass, "regular": regular, "single": single}))


def test_bars_start_at_zero_and_scale_to_the_largest():
    html = charts_html(rows())
    assert widths(html, 0) == [33.3, 66.7, 100.0]  # wall 3, 6, 9 s
    assert widths(html, 2) == [50.0, 100.0, 33.3]  # ms/token 60, 120, 40


def test_a_missing_bar_says_why():
    html = charts_html(rows(regular_reason="budget"))
    first_pass = html.split("<figure")[2]
    assert len(widths(html, 1)) == 1  # only BASS has a passing candidate
    assert "none tested (cut before the end)" in first_pass and "none passed" in first_pass
    assert "no tests given" in charts_html(rows(passed=None)).split("<figure")[2]


def test_a_cut_run_is_hatched_and_named():
    html = charts_html(rows(regular_reason="budget"))
    wall = html.split("<figure")[1]
    assert wall.count("bass-cmp-partial") == 1 and "6.0 s · cut at 6 s" in wall


def test_titles_are_short_and_the_note_explains_the_metrics():
    titles = re.findall(r'aria-label="([^"]+)"', charts_html(rows()))
    assert titles == ["Wall time", "First passing candidate", "ms per token"]
    note = note_html()
    for topic in ("wall time", "ms/token", "acceptance", "tokens/round", "single-seq", "cut / stopped"):
        assert topic in note
    assert "&lt;b&gt;" in sentence_html("<b>") and charts_html([]) == ""
