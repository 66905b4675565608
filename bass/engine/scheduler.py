"""Many callers, one device: requests wait in line and a single device thread runs them in batches.

Any number of threads may call `Engine.stream` at once; each call is a `Request`. One thread owns the
models: it takes the request at the head of the line and starts a `Batch` with it; between that batch's
rounds, the requests behind it join while they are of the batch's kind (method, drafter, backend, sampling
processing), fit its rows (`EngineConfig.max_batch_rows`) and the memory budget (`bass.engine.validate`),
and neither is exclusive. First come, first served: nothing overtakes the head of the line, so a request
of another kind waits for the batch to drain. The thread ends after IDLE_S seconds with nothing to do (and
on `Engine.close`), so an engine nobody holds is freed with its models.

A caller's stream yields "queued" events while its request waits (its place and an estimate of the wait),
then the request's own events. Its cancel ends a queued request at once and a running one before its next
round; the other requests of the batch go on.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator

from bass.engine.batch import Batch, cancelled_result
from bass.engine.request import Request
from bass.engine.runner import Runner
from bass.engine.single import SingleRun
from bass.events import GenerationEvent

log = logging.getLogger(__name__)

IDLE_S = 2.0  # the device thread ends after this long with no request
POLL_S = 0.1  # how often a waiting caller looks at its place in line
QUEUED_EVERY_S = 1.0  # a waiting caller hears of its place at least this often


class Scheduler:
    """The line of requests and the device thread that serves it (module docstring)."""

    def __init__(self, runner: Runner, budget: int):
        self.runner, self.budget = runner, budget  # budget: bytes the running requests may take together
        self._cv = threading.Condition()
        self._queue: deque[Request] = deque()
        self._running: list[Request] = []
        self._thread: threading.Thread | None = None
        self._closed = False
        self._prefill_s_per_token: float | None = None  # smoothed, from the requests served (`wait_estimate`)
        self._row_tokens_per_s: float | None = None
        self._served = 0  # batches run to their end (and the captures after them)

    # ---- the callers' side ------------------------------------------------------------------------------------
    def submit(self, request: Request) -> None:
        with self._cv:
            if self._closed:
                raise RuntimeError("this engine is closed: make a new Engine")
            self._queue.append(request)
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="bass-device", daemon=True)
                self._thread.start()
            self._cv.notify_all()

    def events(self, request: Request) -> Iterator[GenerationEvent]:
        """The request's events, with "queued" ones while it waits; a caller that stops reading cancels it."""
        done, told, told_at = False, None, 0.0
        try:
            while True:
                try:
                    item = request.events.get(timeout=POLL_S)
                except queue.Empty:
                    if request.cancel is not None and request.cancel.is_set() and self._withdraw(request):
                        done = True
                        yield GenerationEvent("done", 0, 0.0, 0, result=cancelled_result(request))
                        return
                    place = self.position(request)
                    now = time.perf_counter()
                    if place is not None and (place != told or now - told_at >= QUEUED_EVERY_S):
                        told, told_at = place, now
                        yield GenerationEvent("queued", 0, now - request.arrived, 0, queue_position=place,
                                              wait_estimate_s=self.wait_estimate(request))
                    continue
                if isinstance(item, BaseException):
                    done = True
                    raise item
                if item.kind == "done":
                    done = True
                yield item
                if done:
                    self._settle_alone(request)
                    return
        finally:
            if not done:
                request.abandoned.set()
                self._withdraw(request)

    def settle(self, timeout_s: float = 60.0) -> bool:
        """Wait until the line is empty and the device thread has finished its batch (and the captures after it);
        False if that took longer than `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._cv:
                busy = bool(self._queue or self._running)
            if not busy and self.runner.device_lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
                self.runner.device_lock.release()
                with self._cv:
                    if not self._queue and not self._running:
                        return True
            time.sleep(0.005)
        return False

    def _settle_alone(self, request: Request, timeout_s: float = 60.0) -> None:
        """A request that was alone gets its stream's end once its batch has ended and captured what it queued
        (`bass.runtime.graphs`), or once another request comes: a caller's next request then finds the graphs built."""
        if request.settles_at is None:
            return
        with self._cv:
            self._cv.wait_for(lambda: self._served >= request.settles_at or bool(self._queue), timeout_s)

    def position(self, request: Request) -> int | None:
        """Its place in line (1 = next), None once it has started."""
        with self._cv:
            for i, r in enumerate(self._queue):
                if r is request:
                    return i + 1
        return None

    def wait_estimate(self, request: Request) -> float | None:
        """Seconds until `request`, in line, starts: the prompts ahead of it to prefill, at the prefill rate measured
        on the requests served; and, where the rows running and ahead leave it no room, the decoding the running
        requests have left (tokens to their limits), at the measured tokens per second of a row, earliest to end
        first, until enough rows are free. None before any request has finished."""
        if self._prefill_s_per_token is None or self._row_tokens_per_s is None:
            return None
        with self._cv:
            ahead = list(itertools.takewhile(lambda r: r is not request, self._queue))
            running = list(self._running)
        wait = self._prefill_s_per_token * sum(r.prompt_tokens for r in ahead)
        short = sum(r.rows for r in running + ahead) + request.rows - self.runner.max_batch_rows
        for left_s, rows in sorted(((r.params.max_new_tokens - _generated(r)) / self._row_tokens_per_s, r.rows)
                                   for r in running):
            if short <= 0:
                break
            wait, short = max(wait, left_s), short - rows
        return wait

    def _withdraw(self, request: Request) -> bool:
        """Take a request that has not started out of the line."""
        with self._cv:
            if request in self._queue:
                self._queue.remove(request)
                return True
        return False

    def close(self, timeout_s: float = 10.0) -> None:
        """Refuse new requests, end the device thread once the line is served."""
        with self._cv:
            self._closed = True
            self._cv.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)

    # ---- the device thread's side -------------------------------------------------------------------------------
    def head_if(self, fits: Callable[[Request], bool]) -> Request | None:
        """The request at the head of the line if `fits` takes it."""
        with self._cv:
            head = self._queue[0] if self._queue else None
        return head if head is not None and fits(head) else None

    def pop_if(self, fits: Callable[[Request], bool]) -> Request | None:
        """Take the request at the head of the line if `fits` takes it."""
        with self._cv:
            if self._queue and fits(self._queue[0]):
                request = self._queue.popleft()
                self._running.append(request)
                return request
        return None

    def started(self, request: Request) -> None:
        request.started_at = time.perf_counter()

    def finished(self, request: Request) -> None:
        """`request` has its result: it leaves the running set (`Request.settles_at` is set if it was alone)."""
        with self._cv:
            if request in self._running:
                self._running.remove(request)
            if not self._running and not self._queue:
                request.settles_at = self._served + 1
        if request.ctx is not None and request.seqs:  # (not a request cancelled in line or while it prefilled)
            decode_s = time.perf_counter() - request.ctx.t0
            per_token = request.prefill_s / max(1, request.prompt_tokens)
            row_rate = _generated(request) / decode_s if decode_s > 0 else None
            self._prefill_s_per_token = _smoothed(self._prefill_s_per_token, per_token)
            if row_rate:
                self._row_tokens_per_s = _smoothed(self._row_tokens_per_s, row_rate)

    def bytes_running(self) -> int:
        with self._cv:
            return sum(r.bytes for r in self._running)

    def _serve(self) -> None:
        while True:
            with self._cv:
                deadline = time.monotonic() + IDLE_S
                while not self._queue:
                    left = deadline - time.monotonic()
                    if self._closed or left <= 0:
                        self._thread = None
                        return
                    self._cv.wait(left)
                head = self._queue[0]
            try:
                with self.runner.device_lock:
                    (SingleRun if head.kind.method == "single" else Batch)(self.runner, self, head).run()
                    if not self._queue:  # idle: a capture costs no request's latency (`bass.runtime.graphs`), and
                        self.runner.capture_queued(lambda: bool(self._queue))  # one arriving waits for one
            except BaseException as exc:  # every request the batch held gets the error; the thread goes on
                log.exception("a batch failed")
                with self._cv:
                    failed = list(self._running)
                    self._running.clear()
                    if head in self._queue and head not in failed:  # it failed before it started
                        self._queue.remove(head)
                        failed.append(head)
                for request in failed:
                    request.put(exc)
            finally:
                with self._cv:
                    self._served += 1
                    self._cv.notify_all()


def _generated(request: Request) -> float:
    """Tokens a row of `request` has generated so far, on average (read from another thread: a snapshot)."""
    seqs = list(request.seqs)
    return sum(s.num_generated for s in seqs) / len(seqs) if seqs else 0.0


def _smoothed(old: float | None, new: float, keep: float = 0.7) -> float:
    return new if old is None else keep * old + (1 - keep) * new
