"""A scripted engine that serves many callers at once, as the engine's scheduler does (the engine contract):
every `stream` call is one request; one scheduler thread advances all running requests a round at a time
(they join at round boundaries and leave when they finish); a request joins while the running requests' k
sum to at most `seats` with it (admission by memory, in sequences); the others wait in line and get
"queued" events with their 1-based place and a wait estimate, again whenever the place changes and at least
every second. A cancel set while queued ends the stream at once with a "done" whose candidates are all
empty and "cancelled"; set while running, that request's rows stop after the round, the others go on.

Each request's rounds are `FakeEngine`'s (texts chosen per prompt), so every caller gets its own result.
`batches` records which requests ran in each round, so a test can see two visitors decode together; with
`record`, the most requests that ran in one round is also written to that file (for a browser test's server).
"""

from __future__ import annotations

import queue
import threading
import time

from app_fakes import FakeEngine
from scripted import cancelled_result

from bass.eval.verdicts import either
from bass.events import GenerationEvent


def queued_event(waited_s: float, position: int, estimate_s: float | None) -> GenerationEvent:
    return GenerationEvent("queued", 0, waited_s, 0, queue_position=position, wait_estimate_s=estimate_s)


class _Request:
    def __init__(self, rid: int, kwargs: dict, cancel: threading.Event | None):
        self.rid, self.kwargs, self.cancel = rid, kwargs, cancel or threading.Event()
        self.gone = threading.Event()  # the caller stopped reading
        self.events: queue.Queue = queue.Queue()
        self.t0 = time.monotonic()
        self.rounds = None  # the FakeEngine generator, once admitted
        self.shown_position, self.shown_at = 0, 0.0


class BatchingFakeEngine(FakeEngine):
    """Requests of up to `seats` sequences in all decode together, one round every `round_s`; the rest wait."""

    def __init__(self, config=None, progress=None, seats: int = 4, round_s: float = 0.05, record: str | None = None,
                 **kwargs):
        super().__init__(config, progress, **kwargs)
        self.seats, self.tick_s, self.record = seats, round_s, record
        self.batches: list[tuple[int, ...]] = []  # request ids of each round
        self._lock = threading.Lock()
        self._waiting: list[_Request] = []
        self._running: list[_Request] = []
        self._next_id = 0
        self._thread: threading.Thread | None = None

    def stream(self, prompts, *, k, params, cancel=None, exclusive=False, **kwargs):
        with self._lock:
            req = _Request(self._next_id, dict(prompts=prompts, k=k, params=params, **kwargs), cancel)
            self._next_id += 1
            self._waiting.append(req)
            if self._thread is None:
                self._thread = threading.Thread(target=self._schedule, name="fake-scheduler", daemon=True)
                self._thread.start()
        try:
            while True:
                event = req.events.get()
                if isinstance(event, Exception):
                    raise event
                yield event
                if event.kind == "done":
                    return
        finally:
            req.gone.set()

    def _schedule(self) -> None:
        while True:
            with self._lock:
                self._admit()
                running = list(self._running)
            for req in running:
                self._step(req)
            if running:
                self.batches.append(tuple(r.rid for r in running))
                if self.record and len(running) > max(map(len, self.batches[:-1]), default=0):
                    with open(self.record, "w") as f:
                        f.write(str(len(running)))
            time.sleep(self.tick_s)

    def _admit(self) -> None:
        """Under the lock: drop cancelled waiters, fill free slots in arrival order, tell the rest their place."""
        for req in [r for r in self._waiting if r.cancel.is_set() or r.gone.is_set()]:
            self._waiting.remove(req)
            req.events.put(GenerationEvent("done", 0, 0.0, 0, (), (), cancelled_result(req.kwargs["k"],
                                                                                         req.kwargs.get("method"))))
        while self._waiting and sum(r.kwargs["k"] for r in self._running) + self._waiting[0].kwargs["k"] <= self.seats:
            req = self._waiting.pop(0)
            inner = dict(req.kwargs, cancel=either(req.cancel, req.gone))
            req.rounds = FakeEngine.stream(self, inner.pop("prompts"), **inner)
            self._running.append(req)
        now = time.monotonic()
        for place, req in enumerate(self._waiting, start=1):
            if place != req.shown_position or now - req.shown_at >= 1.0:
                req.shown_position, req.shown_at = place, now
                req.events.put(queued_event(now - req.t0, place, place * 40 * self.tick_s))

    def _step(self, req: _Request) -> None:
        try:
            event = next(req.rounds)
        except Exception as exc:  # StopIteration included: the caller sees it as the stream's failure
            event = exc if not isinstance(exc, StopIteration) else RuntimeError("scripted stream ended early")
        req.events.put(event)
        if isinstance(event, Exception) or event.kind == "done":
            with self._lock:
                self._running.remove(req)
