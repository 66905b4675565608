"""Streaming verdicts: test each candidate the moment it finishes, while its siblings keep decoding.

How the sandbox stays off the engine's critical path: the thread that consumes the engine's events only
calls `VerdictWorker.submit`, which puts the finished candidate on a queue and returns at once (no I/O, no
lock the tester holds while it works). One background thread takes whatever has queued up and hands it,
as one batch, to `check` (in the app and the eval: the sandbox, which runs the programs in child
processes on the CPU cores, several at a time). Verdicts come back through a second queue that the
consumer drains with `poll`; `on_verdicts`, when given, is called (on the testing thread) each time new
verdicts are ready, so a consumer waiting on something else (the app's page) can wake up and show them
at once instead of at the next round. The engine thread never waits for a verdict; on a GPU the only
shared resource is CPU time, and the testing thread spends it waiting on child processes.

Stop at the first pass: when a verdict passes, the worker sets `first_pass`, an event the engine sees
through `either(user_cancel, first_pass)`; the engine ends the run after its current round and the
sequences still decoding keep their partial text with finish reason "cancelled".
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from bass.events import FINISHED_IN_TIME, GenerationEvent

log = logging.getLogger("bass.eval.verdicts")

V = TypeVar("V")
# check([(seq, text), ...]) -> one verdict per item, in order
Checker = Callable[[Sequence[tuple[int, str]]], Sequence[V]]


@dataclass(frozen=True)
class Verdict(Generic[V]):
    """The test result of one candidate and when it was known (seconds on the worker's clock)."""

    seq: int
    value: V
    passed: bool
    at_s: float


class _Either(threading.Event):
    """An event that reads as set when any of its parts is set (the engine only calls `is_set`)."""

    def __init__(self, events: Sequence[threading.Event]):
        super().__init__()
        self._parts = tuple(events)

    def is_set(self) -> bool:
        return super().is_set() or any(e.is_set() for e in self._parts)


def either(*events: threading.Event | None) -> threading.Event:
    """One cancel event for the engine from several sources (the Stop button, the first pass, ...)."""
    return _Either([e for e in events if e is not None])


class VerdictWorker(Generic[V]):
    """A background thread that tests finished candidates in batches; see the module docstring.

    `check` returns one verdict per (seq, text); `passed(verdict)` says whether it passed every test.
    With `stop_at_first_pass`, the first passing verdict sets `first_pass`. `on_verdicts()` runs on the
    testing thread after each batch of verdicts is ready to `poll` (it must return quickly).
    """

    def __init__(self, check: Checker, passed: Callable[[V], bool], *, stop_at_first_pass: bool = False,
                 clock: Callable[[], float] = time.perf_counter, on_error: Callable[[Exception, int], V] | None = None,
                 on_verdicts: Callable[[], None] | None = None):
        self._check, self._passed, self._clock, self._on_error = check, passed, clock, on_error
        self._on_verdicts = on_verdicts
        self.stop_at_first_pass = stop_at_first_pass
        self.first_pass = threading.Event()
        self._todo: queue.Queue[tuple[int, str] | None] = queue.Queue()
        self._done: queue.Queue[Verdict[V]] = queue.Queue()
        self._submitted: set[int] = set()
        self._verdicts: dict[int, Verdict[V]] = {}
        self._skipped: set[int] = set()  # not tested: a sibling had passed already (stop at the first pass)
        self._handled = 0  # submissions answered (verdict published or skipped), under _idle
        self._idle = threading.Condition()
        self._thread = threading.Thread(target=self._work, name="bass-verdicts", daemon=True)
        self._thread.start()

    # ---- the consumer's side (the thread reading engine events) ----------------------------------
    def submit(self, seq: int, text: str) -> None:
        """Queue one finished candidate for testing; returns at once. A sequence is tested once."""
        if seq in self._submitted:
            return
        self._submitted.add(seq)
        self._todo.put((seq, text))

    @property
    def submitted(self) -> frozenset[int]:
        return frozenset(self._submitted)

    def poll(self) -> list[Verdict[V]]:
        """The verdicts that arrived since the last poll, in the order they were reached."""
        new = []
        while True:
            try:
                v = self._done.get_nowait()
            except queue.Empty:
                return new
            self._verdicts[v.seq] = v
            new.append(v)

    @property
    def verdicts(self) -> dict[int, Verdict[V]]:
        """Every verdict polled so far, by sequence."""
        return dict(self._verdicts)

    @property
    def pending(self) -> int:
        """Candidates submitted whose verdict has not been polled yet."""
        return len(self._submitted) - len(self._verdicts) - len(self._skipped)

    def wait_idle(self, timeout_s: float = 30.0) -> bool:
        """Block until every candidate submitted so far is answered (tests use it to make races exact)."""
        with self._idle:
            return self._idle.wait_for(lambda: self._handled >= len(self._submitted), timeout_s)

    def drain(self, cancel: threading.Event, poll_s: float) -> Iterator[tuple[int, float]]:
        """After `close`: (candidates still pending, seconds waited) every `poll_s`, until every verdict is
        polled or `cancel` is set (a Stop: the candidates still in the sandbox stay untested)."""
        t0 = time.perf_counter()
        while True:
            self.poll()
            if self.pending <= 0 or cancel.is_set():
                return
            yield self.pending, time.perf_counter() - t0
            self.wait_idle(poll_s)

    def close(self, timeout_s: float | None = None) -> list[Verdict[V]]:
        """No more submissions: wait (up to `timeout_s`) for the queued tests, then return the new verdicts."""
        self._todo.put(None)
        self._thread.join(timeout_s)
        return self.poll()

    # ---- the testing thread ----------------------------------------------------------------------
    def _work(self) -> None:
        closing = False
        while not closing:
            batch = [self._todo.get()]
            while True:  # everything that finished while the previous batch ran goes in one batch
                try:
                    batch.append(self._todo.get_nowait())
                except queue.Empty:
                    break
            closing = None in batch
            items = [b for b in batch if b is not None]
            if not items:
                continue
            if self.stop_at_first_pass and self.first_pass.is_set():
                self._skipped.update(seq for seq, _ in items)
                continue  # a sibling already passed: the rest stay untested
            try:
                values = list(self._check(items))
                if len(values) != len(items):
                    raise RuntimeError(f"the tester returned {len(values)} verdicts for {len(items)} candidates")
            except Exception as exc:  # a tester crash must not kill the thread and hang the caller
                log.exception("testing candidates failed")
                if self._on_error is None:
                    self._skipped.update(seq for seq, _ in items)
                    self._answered(len(items))
                    continue
                values = [self._on_error(exc, seq) for seq, _ in items]
            now = self._clock()
            for (seq, _), value in zip(items, values, strict=True):
                ok = bool(self._passed(value))
                self._done.put(Verdict(seq, value, ok, now))
                if ok and self.stop_at_first_pass:
                    self.first_pass.set()
            self._answered(len(items))
            if self._on_verdicts is not None:
                try:
                    self._on_verdicts()
                except Exception:  # a consumer's hook must not kill the testing thread
                    log.exception("on_verdicts failed")

    def _answered(self, n: int) -> None:
        with self._idle:
            self._handled += n
            self._idle.notify_all()


def submit_finished(worker: VerdictWorker, event: GenerationEvent) -> None:
    """Queue every sequence this event finished by itself (EOS, a stop string, its token limit); those cut
    by the time budget or a cancel stay untested, in the app as in the eval."""
    for u in event.updates:
        if u.finished and u.finish_reason in FINISHED_IN_TIME and u.seq < len(event.texts):
            worker.submit(u.seq, event.texts[u.seq])
