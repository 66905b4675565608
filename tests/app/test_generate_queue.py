"""Many visitors on one engine: each one's place in line, their own result, and a Stop that ends theirs only.

A scripted engine that batches (`batching_fake.BatchingFakeEngine`) stands in for the engine's scheduler; the
views are the real ones, the sandbox is real.
"""

from __future__ import annotations

import re
import threading
import time

from app_fakes import GOOD, fake_session
from batching_fake import BatchingFakeEngine, queued_event
from flow_cases import ADD_GOOD, ADD_PROMPT, add, by_prompt, he0, run_in_thread, title

from app.charts import LiveRun
from app.generate import generate_views
from app.generate_status import decoding_status, queued_status
from app.ui import stop_feedback
from bass.events import GenerationEvent


def test_queued_view_says_the_place_the_wait_and_the_way_out():
    second = queued_status(queued_event(3.4, 2, 6.2))
    assert "Waiting in line: you are 2nd in line" in second
    assert "about 6 s to wait" in second and "waited 3 s" in second and "Stop leaves the line" in second
    assert "you are 1st in line" in queued_status(queued_event(0.2, 1, 0.3)) and "starting in a moment" in \
        queued_status(queued_event(0.2, 1, 0.3))
    assert "busy with other visitors" in queued_status(queued_event(1.0, 11, None)) and "11th" in \
        queued_status(queued_event(1.0, 11, None))
    assert "Stopping: leaving the line" in queued_status(queued_event(1.0, 3, 5.0), stopping=True)


def test_two_visitors_decode_in_one_batch_and_each_gets_their_own_result():
    session = fake_session(BatchingFakeEngine, texts=by_prompt(long=3), chunk=8, seats=4, round_s=0.02)
    a, views_a = run_in_thread(session, he0(), threading.Event())
    b, views_b = run_in_thread(session, add(), threading.Event())
    a.join(60)
    b.join(60)
    final_a, final_b = views_a[-1], views_b[-1]
    assert title(final_a.status) == "Done." and title(final_b.status) == "Done.", (final_a.status, final_b.status)
    assert "has_close_elements" in final_a.best_code and final_a.best_code.endswith(GOOD * 3)
    assert final_b.best_code == ADD_PROMPT + ADD_GOOD and "has_close_elements" not in final_b.candidates
    assert "1/2</b> candidates pass" in final_a.summary and "1/2</b> candidates pass" in final_b.summary
    assert (0, 1) in session.engine.batches  # both requests ran in the same rounds


def test_stop_while_running_ends_only_that_visitors_run():
    session = fake_session(BatchingFakeEngine, texts=by_prompt(long=10), chunk=4, seats=4, round_s=0.02)
    cancel_a = threading.Event()
    a, views_a = run_in_thread(session, he0(), cancel_a)
    b, views_b = run_in_thread(session, add(), threading.Event())
    while len(session.engine.batches) < 5:
        time.sleep(0.01)
    cancel_a.set()
    a.join(30)
    b.join(60)
    assert title(views_a[-1].status).startswith("Stopped. (Your run only")
    assert "STOPPED · UNTESTED" in views_a[-1].candidates
    assert title(views_b[-1].status) == "Done." and views_b[-1].best_code == ADD_PROMPT + ADD_GOOD
    assert "PASS" in views_b[-1].candidates and "STOPPED · UNTESTED" not in views_b[-1].candidates


def test_a_stop_before_the_run_left_the_pages_queue_generates_nothing():
    session = fake_session(BatchingFakeEngine, texts=by_prompt(), seats=4, round_s=0.01)
    cancel = threading.Event()
    cancel.set()
    views = list(generate_views(session, he0(), cancel))
    assert len(views) == 1 and title(views[0].status) == "Stopped before it started: nothing was generated."
    assert session.engine.calls == [] and session.engine.batches == []


def test_stop_says_on_the_page_what_it_stopped():
    """Stop's answer goes to the page (status box or the note under the buttons), not only to a log."""
    status, note = stop_feedback(True)
    assert "Stopping your run…" in status and "other visitors' runs go on" in status.replace("&#x27;", "'")
    assert note == ""
    status, note = stop_feedback(False)
    assert "Nothing is running for you right now." in note and 'role="status"' in note


def test_the_status_says_stopping_while_the_round_ends():
    run = LiveRun(2)
    assert "Generating…" in decoding_status(run, he0(), "BASS", {})
    assert "Stopping after the current round… (your run only)" in decoding_status(run, he0(), "BASS", {}, True)


def test_a_queued_visitors_summary_times_everything_from_the_start_of_their_prefill():
    """The time to first pass (the engine's, from the start of prefill) and "PASS shown at" (the page's clock) share
    one origin: the wait in line is stated apart, not folded into one of them."""
    session = fake_session(BatchingFakeEngine, texts=by_prompt(long=2), chunk=8, seats=2, round_s=0.05)
    first, _ = run_in_thread(session, he0(), threading.Event())
    while not session.engine.batches:
        time.sleep(0.01)
    second, views = run_in_thread(session, add(), threading.Event())
    first.join(60)
    second.join(60)
    summary = views[-1].summary
    numbers = re.search(r"time to first pass <b>([\d.]+) (m?s)</b> \(PASS shown at ([\d.]+) s\).*"
                        r"after ([\d.]+) s in line", summary)
    assert numbers, summary
    ttfp = float(numbers[1]) / (1000 if numbers[2] == "ms" else 1)
    shown, waited = float(numbers[3]), float(numbers[4])
    assert waited > 1.0, summary  # the first visitor's run took seconds
    assert ttfp - 0.1 <= shown < ttfp + 1.0 < waited + ttfp, summary
    assert "after" in views[-1].status and "s in line" in views[-1].status


def test_a_long_prompt_shows_how_much_of_it_the_model_has_read():
    """The engine reads a long prompt a chunk at a time between the other visitors' rounds ("prefilling" events):
    the visitor sees the count grow, not a page that looks stuck; the first round's event ends that view."""
    s = he0()
    run = LiveRun(k=2)
    for done in (512, 1024):
        run.add(GenerationEvent("prefilling", 0, done / 1000, 0, prefilled=(done, 4096)))
        html = decoding_status(run, s, "BASS", {})
        assert title(html) == "Reading your prompt…" and f"{done:,} of 4,096 prompt tokens read" in html
    assert title(decoding_status(run, s, "BASS", {}, stopping=True)).startswith("Stopping")
    run.add(GenerationEvent("prefill", 0, 1.2, 0))
    assert run.phase == "decoding" and title(decoding_status(run, s, "BASS", {})) == "Generating…"
