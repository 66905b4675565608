"""The Compare flow: every method does the same work, warmed up and repeated; cut, stopped and failed methods are
marked and never a baseline; the sentence leads; files are written; a Stop while waiting in line runs nothing."""

from __future__ import annotations

import csv
import json
import re
import threading
from html import unescape

import pytest
from app_fakes import BAD, GOOD, FakeEngine
from compare_fakes import CompareFakeEngine

from app.compare_run import compare_budget, compare_repeats, compare_views
from app.problems import load_problems
from app.session import EngineSession
from app.settings import METHOD_LABELS, UserError, parse_settings
from bass.eval.compare import SEEDED_DRAFT_LENGTH, WARM_TOKENS


def settings(k=2, tests=True, budget=0, stop_first=False):
    p = load_problems()[0]
    return parse_settings(p.prompt, p.editable_tests() if tests else "", "auto", k, 0.8, 1.0, 32, budget,
                          METHOD_LABELS["bass"], "ngram", "torch", None, 3, stop_first)


def session_of(engine_cls=CompareFakeEngine, **kwargs) -> EngineSession:
    session = EngineSession(env={}, factory=lambda config, progress: engine_cls(config, **kwargs))
    session.ensure()
    return session


def sentence_of(view) -> str:
    return unescape(re.sub(r"<[^>]+>", "", view.sentence))


def run(session, s, cancel=None, **kw):
    return list(compare_views(session, s, cancel or threading.Event(), **kw))


def test_same_work_for_every_method_whatever_the_generate_tab_says():
    session = session_of()
    views = run(session, settings(budget=5, stop_first=True))  # Generate's budget and first-pass stop
    final = views[-1]
    assert final.error is None, final.status
    calls = session.engine.calls
    warm, timed, normal = calls[:3], calls[3:6], calls[6:]
    assert [c["method"] for c in calls] == ["bass", "regular", "single"] * 3
    assert all(c["params"].max_new_tokens == WARM_TOKENS for c in warm)  # untimed, short on a CPU
    assert all(c["params"] == timed[0]["params"] and c["k"] == 2 for c in timed)
    assert timed[0]["params"].time_budget_s is None and timed[0]["params"].seed == 3
    assert timed[0]["params"].ignore_eos and not any(c["params"].ignore_eos for c in normal)
    assert session.engine.exclusive == [True] * 9
    assert list(final.table["method"]) == ["BASS", "regular", "single-seq"]
    assert list(final.table["status"]) == ["complete"] * 3 and "bass-ok" in final.status
    assert list(final.table["tokens"]) == ["64"] * 3  # every candidate ran to the 32-token limit
    assert all(p.endswith("2 untested") is False for p in final.table["passing"])  # all were tested
    assert any(len(v.table) == 1 for v in views) and any(len(v.table) == 2 for v in views)  # it grew
    seen = " ".join(v.status for v in views)
    assert "Warming up BASS (untimed)" in seen and "timed run 1 of 1" in seen and "first pass" in seen


def test_a_seed_uses_the_fixed_draft_length():
    session = session_of()
    run(session, settings())
    assert session.engine.draft_lengths == [SEEDED_DRAFT_LENGTH] * 9


def test_sentence_leads_and_files_hold_it():
    final = run(session_of(texts=[BAD, GOOD]), settings())[-1]
    text = sentence_of(final)
    assert re.match(r"BASS wrote the 2 candidates \(64 tokens, the same for every method\) [\d.]+x faster than "
                    r"regular decoding \([\d.]+ m?s vs [\d.]+ m?s\)", text), text
    assert "in wall time; in a normal run with stop strings its first passing candidate came at" in text
    assert "(which candidate passes first depends on the texts sampled)" in text
    with open(final.csv_path) as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["comparison"] and rows[1] == [text]
    with open(final.json_path) as f:
        data = json.load(f)
    assert data["sentence"] == text and [r["state"] for r in data["runs"].values()] == ["complete"] * 3
    assert data["settings"]["equal_work"] and [c["text"] for c in data["runs"]["BASS"]["candidates"]] == [BAD, GOOD]
    assert [r["tokens"] for r in data["summary"]] == [64] * 3
    assert "bass-cmp-charts" in final.charts and final.charts.count("bass-cmp-bar") >= 9


def test_methods_cut_by_the_compare_budget_are_marked_and_untested_not_failed():
    # rounds of 50 ms and ~30 rounds for the long texts: a 0.3 s budget cuts every method
    session = session_of(texts=[GOOD * 4, BAD * 12], round_s=0.05)
    final = run(session, settings(), budget_s=0.3)[-1]
    assert list(final.table["status"]) == ["cut at 0.3 s"] * 3, final.table
    assert list(final.table["passing"]) == ["2 untested"] * 3 and list(final.table["first pass"]) == ["none"] * 3
    assert set(final.table["× regular (wall)"]) == {"—"}
    assert sentence_of(final).startswith("No speed-up is claimed: BASS was cut at 0.3 s")
    assert "bass-ok" not in final.status and "cut by the time budget" in final.status
    assert "none tested (cut before the end)" in final.charts and "bass-cmp-partial" in final.charts


def test_stop_during_regular_is_marked_and_never_the_baseline():
    session = session_of(texts=[GOOD * 3, BAD * 10], round_s=0.02)
    cancel = threading.Event()
    views = []
    for view in compare_views(session, settings(), cancel):
        views.append(view)
        if "Running regular" in view.status and re.search(r"round [1-9]", view.status):  # it has decoded
            cancel.set()
    final = views[-1]
    assert [c["method"] for c in session.engine.calls] == ["bass", "regular", "single", "bass", "regular"]
    assert "Stopped: partial comparison." in final.status and "bass-ok" not in final.status
    by = {r["method"]: r for r in final.table.to_dict("records")}
    assert by["regular"]["status"].startswith("stopped at") and by["BASS"]["status"] == "complete"
    assert by["BASS"]["× regular (wall)"] == "—" and by["BASS"]["× regular (ms/token)"] == "—"
    text = sentence_of(final)
    assert "faster" not in text and "regular decoding was stopped at" in text, text


def test_stop_while_waiting_in_line_runs_nothing():
    session = session_of(queued_s=30.0)
    cancel = threading.Event()
    views = []
    for view in compare_views(session, settings(), cancel):
        views.append(view)
        if "waiting in line" in view.status:
            cancel.set()
    assert "Stopped before any method ran." in views[-1].status and views[-1].table.empty
    assert [c["method"] for c in session.engine.calls] == ["bass"]


def test_a_failing_method_is_named_and_the_others_compared():
    class NoSingle(FakeEngine):
        def stream(self, prompts, **kw):
            if kw.get("method") == "single":
                raise ValueError("drafter 'model' is not available here")
            yield from super().stream(prompts, **kw)

    final = run(session_of(NoSingle), settings())[-1]
    assert list(final.table["method"]) == ["BASS", "regular"]
    assert "bass-error" in final.status and "single-seq" in final.status
    assert "not compared: single-sequence speculative decoding failed" in sentence_of(final)


def test_no_tests_reads_no_tests_and_no_first_pass():
    final = run(session_of(), settings(tests=False))[-1]
    assert set(final.table["passing"]) == {"no tests"} and set(final.table["first pass"]) == {"—"}
    assert "first pass" not in sentence_of(final) and "no tests given" in final.charts


def test_natural_stops_speak_of_tokens_per_second():
    final = run(session_of(texts=[BAD, GOOD]), settings(), equal_work=False)[-1]
    text = sentence_of(final)
    # the fake writes more tokens a round with drafts: the methods' token counts differ, and the sentence says so
    assert re.match(r"BASS wrote its 2 candidates [\d.]+x faster than regular decoding", text), text
    assert "in tokens per second of wall time (stop strings ended them at different lengths" in text
    assert len(set(final.table["tokens"])) > 1


def test_repeats_show_the_median_and_spread():
    session = session_of(round_s=0.01)
    final = run(session, settings(tests=False), repeats=2)[-1]
    timed = [c["method"] for c in session.engine.calls[3:]]
    assert timed == ["bass", "regular", "single", "single", "regular", "bass"]  # the order alternates
    assert all(re.fullmatch(r"\d+\.\d% of 2", s) for s in final.table["spread"]), final.table
    assert "(median of 2 runs each)" in sentence_of(final) and "2 timed run(s) each" in final.status


def test_compare_repeats_names_its_field():
    assert compare_repeats(3) == 3 and compare_repeats("1") == 1
    for bad in (0, 2.5, "abc", None, 99):
        with pytest.raises(UserError, match="Timed runs per method must be a whole number from 1 to 20"):
            compare_repeats(bad)


def test_compare_budget_names_its_field():
    assert compare_budget(0) is None and compare_budget("") is None and compare_budget(2.5) == 2.5
    for bad in (-5, "abc", 1e9):
        with pytest.raises(UserError, match="Time budget per method must be between 0 and 3600 seconds"):
            compare_budget(bad)
