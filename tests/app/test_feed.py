"""The page's feed: engine events read on their own thread, merged with verdict wake-ups."""

from __future__ import annotations

import threading
import time

from app.feed import Feed
from bass.events import GenerationEvent


def _event(r: int) -> GenerationEvent:
    return GenerationEvent("round", r, 0.1 * r, 0, (), ("",))


def test_a_wake_up_ends_the_wait_while_the_stream_is_silent():
    gate = threading.Event()

    def stream():
        yield _event(1)
        gate.wait(30)  # a long round
        yield _event(2)

    feed = Feed()
    feed.start(stream())
    first = feed.next(timeout_s=10)
    assert [e.round for e in first.events] == [1] and not first.ended
    threading.Timer(0.05, feed.wake).start()
    t0 = time.monotonic()
    woken = feed.next(timeout_s=20)
    assert woken.woken and not woken.events and time.monotonic() - t0 < 10
    assert feed.next(timeout_s=0.01) == type(woken)()  # nothing new: an empty batch after the timeout
    gate.set()
    rest = [feed.next(timeout_s=10) for _ in range(2)]
    assert [e.round for a in rest for e in a.events] == [2] and rest[-1].ended
    feed.close(timeout_s=10)


def test_an_error_comes_after_the_events_before_it():
    def stream():
        yield _event(1)
        yield _event(2)
        raise RuntimeError("out of memory")

    feed = Feed()
    feed.start(stream())
    got = []
    while True:
        a = feed.next(timeout_s=10)
        got.append(a)
        if a.ended:
            break
    events = [e.round for a in got for e in a.events]
    errors = [a.error for a in got if a.error is not None]
    assert events == [1, 2] and len(errors) == 1 and str(errors[0]) == "out of memory"
    feed.close(timeout_s=10)


def test_close_abandons_the_stream_and_waits_for_its_thread():
    closed = threading.Event()

    def stream():
        try:
            r = 0
            while True:
                r += 1
                yield _event(r)
                time.sleep(0.01)
        finally:
            closed.set()

    feed = Feed()
    feed.start(stream())
    assert feed.next(timeout_s=10).events
    feed.close(timeout_s=10)
    assert feed.abandon.is_set() and closed.is_set()
