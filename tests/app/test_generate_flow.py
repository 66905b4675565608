"""The Generate flow end to end without a browser: a scripted engine, the real sandbox, the real views."""

from __future__ import annotations

import json
import math
import threading
import time

import pytest
from app_fakes import BAD, GOOD, FakeEngine, fake_session
from flow_cases import badges, settings

from app.generate import generate_views
from app.problems import load_problems
from app.ranking import TestReport
from app.session import EngineSession
from app.settings import METHOD_LABELS, parse_settings


def test_humaneval0_four_candidates_ranked_with_pass_metrics(session):
    views = list(generate_views(session, settings(), threading.Event()))
    final = views[-1]
    assert final.error is None, final.status
    assert "Done." in final.status
    assert badges(final.candidates) == ["PASS", "PASS", "FAIL", "FAIL"]  # GOOD for even seqs, BAD for odd
    assert "tests 7/7" in final.candidates and "tests 3/7" in final.candidates
    assert "Pass@First" in final.summary and "2/4" in final.summary
    assert final.best_code.startswith(load_problems()[0].prompt) and final.best_code.endswith(GOOD)
    with open(final.download) as f:
        data = json.load(f)
    assert len(data["candidates"]) == 4 and data["pass"]["passed"] == 2
    assert data["settings"]["k"] == 4
    # the live views streamed before the final one, with chart data
    assert any(len(v.speed) and len(v.accept) for v in views[:-1])
    assert "time to first pass" in final.summary and data["pass"]["time_to_first_pass_s"] is not None


def test_greedy_candidates_are_said_to_be_one_text():
    """At temperature 0 every candidate is the same text: the ranked list says so, and how to get different ones."""
    for temperature, k, said in ((0.0, 2, True), (0.8, 2, False), (0.0, 1, False)):
        final = list(generate_views(fake_session(), settings(k=k, temperature=temperature), threading.Event()))[-1]
        assert final.error is None, final.status
        assert ("Temperature 0 decodes greedily, so the 2 candidates are one text" in final.candidates) is said


def test_free_prompt_without_tests_only_runs_code():
    session = fake_session(texts=["Here:\n```python\ndef f():\n    return 1\n```", "```python\ndef f(:\n```"])
    final = list(generate_views(session, settings("Write f returning 1", tests="", k=2), threading.Event()))[-1]
    assert badges(final.candidates) == ["RUNS · NO TESTS", "ERROR"]
    assert "no tests" in final.summary and "Pass@" not in final.summary
    assert final.best_code == "def f():\n    return 1"


def test_engine_value_error_becomes_readable_error_box():
    session = fake_session(fail_with=ValueError("k must be an integer in 1 .. 64, got 99"))
    final = list(generate_views(session, settings(), threading.Event()))[-1]
    assert "bass-error" in final.status and "k must be an integer" in final.status
    assert "Traceback" not in final.status and final.error


def test_engine_crash_becomes_error_box_not_traceback():
    session = fake_session(fail_with=RuntimeError("CUDA out of memory"))
    final = list(generate_views(session, settings(), threading.Event()))[-1]
    assert "Generation failed: RuntimeError: CUDA out of memory" in final.status


def test_sandbox_failure_keeps_every_candidate_on_screen(session):
    def broken(programs, tests):
        raise OSError("no space left on device")

    final = list(generate_views(session, settings(), threading.Event(), tester=broken))[-1]
    assert badges(final.candidates) == ["ERROR"] * 4
    assert "sandbox failed" in final.candidates


def test_one_failing_candidate_does_not_hide_the_others():
    session = fake_session(texts=[GOOD, "    while True:\n        pass\n", BAD])

    def quick(programs, tests):
        from app.checks import run_tests
        return run_tests(programs, tests, timeout_s=2.0)

    final = list(generate_views(session, settings(k=3), threading.Event(), tester=quick))[-1]
    assert badges(final.candidates) == ["PASS", "FAIL", "TIMEOUT"]


def test_stop_ends_with_partial_untested_candidates():
    session = fake_session(texts=[GOOD * 20] * 2, chunk=4, round_s=0.02)
    cancel = threading.Event()
    views = []
    for view in generate_views(session, settings(k=2), cancel):
        views.append(view)
        if len(views) == 3:
            cancel.set()
    final = views[-1]
    assert "Stopped." in final.status
    assert badges(final.candidates) == ["STOPPED · UNTESTED", "STOPPED · UNTESTED"]
    assert "not tested" in final.candidates


def test_stop_while_the_last_tests_run_ends_the_run():
    session = fake_session(texts=[GOOD, GOOD], chunk=8, round_s=0.005)
    release, cancel = threading.Event(), threading.Event()

    def stuck(programs, tests):  # a sandbox that takes its time
        release.wait(30)
        return [TestReport("passed", 1, 1, "", 0.01) for _ in programs]

    try:
        t0, views = time.monotonic(), []
        for view in generate_views(session, settings(k=2), cancel, tester=stuck):
            views.append(view)
            if "Testing the last" in view.status:
                cancel.set()
        assert time.monotonic() - t0 < 20, "the Stop button waited for the sandbox"
        assert any("Testing the last" in v.status for v in views[:-1])
        assert "Stopped." in views[-1].status and "PASS" not in badges(views[-1].candidates)
    finally:
        release.set()


def test_model_load_failure_is_reported():
    def factory(config, progress):
        progress("downloading", 0.1)
        raise FileNotFoundError("no model at /nowhere")

    session = EngineSession(env={"BASS_TARGET": "/nowhere"}, factory=factory)
    views = list(generate_views(session, settings(), threading.Event()))
    assert "Loading the model failed: FileNotFoundError: no model at /nowhere" in views[-1].status


def test_progress_is_shown_while_the_model_loads():
    gate = threading.Event()

    def slow(config, progress):
        progress("dequantizing layer 3/28", 0.3)
        gate.wait(5)
        return FakeEngine(config)

    session = EngineSession(env={}, factory=slow)
    views = generate_views(session, settings(k=2), threading.Event())
    first = next(views)
    assert "Preparing the model" in first.status
    time.sleep(0.1)
    second = next(views)
    assert "dequantizing layer 3/28" in second.status and "width:30.0%" in second.status
    gate.set()
    assert "Done." in list(views)[-1].status


@pytest.mark.parametrize("method", ["regular", "single"])
def test_methods_pass_through(method):
    session = fake_session()
    final = list(generate_views(session, settings(k=2, method=method), threading.Event()))[-1]
    assert session.engine.calls[-1]["method"] == method
    assert len(badges(final.candidates)) == 2


def test_chat_prompts_are_sent_with_chat_template():
    session = fake_session(texts=["```python\ndef f():\n    return 2\n```"])
    list(generate_views(session, settings("Write f returning 2", tests="assert f() == 2", k=1), threading.Event()))
    call = session.engine.calls[-1]
    assert call["chat"] is True and call["params"].stop == ()


def test_report_list_from_custom_tester_is_used(session):
    def all_pass(programs, tests):
        return [TestReport("passed", 1, 1, "", 0.01) for _ in programs]

    final = list(generate_views(session, settings(k=2), threading.Event(), tester=all_pass))[-1]
    assert badges(final.candidates) == ["PASS", "PASS"]


def test_a_verdict_is_drawn_in_the_middle_of_a_long_round():
    # After seq 0 finishes, the next round holds for up to 60 s (a slow CPU round): seq 0's PASS must reach
    # the page while the engine is still inside that round, not when the round ends.
    session = fake_session(texts=[GOOD, GOOD * 4], chunk=8, pause_after_first_finish_s=60)
    engine = session.engine
    cancel = threading.Event()
    views = generate_views(session, settings(k=2), cancel)
    t0 = time.monotonic()
    live = next(v for v in views if "PASS" in badges(v.candidates))
    assert engine.paused, "the PASS badge waited for the end of the round"
    assert time.monotonic() - t0 < 30
    assert badges(live.candidates) == ["PASS", "running"]
    assert f"round {math.ceil(len(GOOD) / 8)} ·" in live.status and "1 tested, 1 pass" in live.status
    cancel.set()  # the Stop button ends the held round; the ranking keeps both candidates
    final = list(views)[-1]
    assert "Stopped." in final.status
    assert badges(final.candidates) == ["PASS", "STOPPED · UNTESTED"]
    assert "time to first pass" in final.summary


def test_stop_at_first_pass_cancels_the_others_and_keeps_their_text():
    session = fake_session(texts=[BAD, GOOD, GOOD * 30], chunk=8, round_s=0.01)
    s = parse_settings(load_problems()[0].prompt, load_problems()[0].editable_tests(), "auto", 3, 0.8, 0.95, 64, 0,
                       METHOD_LABELS["bass"], "ngram", "torch", None, 0, True)
    final = list(generate_views(session, s, threading.Event()))[-1]
    assert "stopped at the first pass" in final.status
    assert badges(final.candidates) == ["PASS", "FAIL", "STOPPED · UNTESTED"]
    assert "untested" in final.candidates
    with open(final.download) as f:
        data = json.load(f)
    stopped = [c for c in data["candidates"] if c["finish_reason"] == "cancelled"]
    assert len(stopped) == 1 and stopped[0]["tests"] is None
    assert len(load_problems()[0].prompt) < len(stopped[0]["code"]) < len(load_problems()[0].prompt + GOOD * 30)
    assert data["pass"]["time_to_first_pass_s"] is not None and data["settings"]["stop_at_first_pass"] is True


def test_without_stop_at_first_pass_every_candidate_finishes():
    session = fake_session(texts=[GOOD, GOOD * 3], chunk=8, round_s=0.005)
    final = list(generate_views(session, settings(k=2), threading.Event()))[-1]
    assert badges(final.candidates) == ["PASS", "PASS"]
