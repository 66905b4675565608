"""What the Generate page waits on: the engine's next event or a new test verdict, whichever comes first.

The engine's stream runs on its own thread (`bass-feed`), which only iterates it and puts each event on a
queue; the verdict worker's `on_verdicts` hook (`Feed.wake`) puts a wake-up mark on the same queue. The
page's generator waits on that queue with a timeout, so a verdict that lands in the middle of a round
(seconds long on a CPU) is drawn at once rather than with the next round, and updates held back by the
throttle still go out. The feed knows nothing of rounds or sequences: the engine decides everything, the
feed only moves its events from one thread to another.

Closing the feed (the run failed, or the browser went away) sets `abandon`, which the engine sees as a
cancel at its next round, and waits for the thread, so that when `close` returns the engine is free for
the next request. A page that got the "done" event does not close it: the thread reads the stream to its
end, where the engine captures the CUDA graphs the request queued (`bass.runtime.graphs`), while the page shows
the result. An exception raised by the stream reaches the page after the events before it,
so what was generated up to the failure stays on screen.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

from bass.events import GenerationEvent

log = logging.getLogger("bass.app")

_WAKE = object()  # verdicts are ready to poll
_END = object()  # the stream is over


@dataclass(frozen=True)
class _Failed:
    error: Exception


@dataclass(frozen=True)
class Arrivals:
    """What arrived since the last `Feed.next`, in order: engine events, then how the wait ended."""

    events: list[GenerationEvent] = field(default_factory=list)
    woken: bool = False  # the verdict worker posted verdicts
    ended: bool = False  # the stream is over (after these events)
    error: Exception | None = None  # the stream raised this after these events


class Feed:
    """An engine stream read on a background thread, merged with wake-ups from the verdict worker."""

    def __init__(self) -> None:
        self.abandon = threading.Event()  # give to the engine as (part of) its cancel event
        self._queue: queue.Queue[object] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._over = False

    def wake(self) -> None:
        """Make a waiting `next` return now (thread-safe; the verdict worker's `on_verdicts`)."""
        self._queue.put(_WAKE)

    def start(self, stream: Iterator[GenerationEvent]) -> None:
        """Begin reading `stream` (a generator: the engine runs on the feed's thread from here on)."""
        if self._thread is not None:
            raise RuntimeError("a feed reads one stream")
        self._thread = threading.Thread(target=self._pump, args=(stream,), name="bass-feed", daemon=True)
        self._thread.start()

    def _pump(self, stream: Iterator[GenerationEvent]) -> None:
        try:
            for event in stream:
                self._queue.put(event)
                if self.abandon.is_set():
                    break
        except Exception as exc:  # handed to the page's thread, which reports it
            self._queue.put(_Failed(exc))
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                try:
                    close()  # releases the engine when the stream was abandoned mid-way
                except Exception:
                    log.exception("closing the engine's stream failed")
            self._queue.put(_END)

    def next(self, timeout_s: float) -> Arrivals:
        """Wait up to `timeout_s` for anything to arrive, then take everything that has arrived."""
        if self._over:
            return Arrivals(ended=True)
        items: list[object] = []
        try:
            items.append(self._queue.get(timeout=timeout_s))
            while True:
                items.append(self._queue.get_nowait())
        except queue.Empty:
            pass
        events: list[GenerationEvent] = []
        woken, error = False, None
        for item in items:
            if item is _WAKE:
                woken = True
            elif item is _END:
                self._over = True
            elif isinstance(item, _Failed):
                error = item.error
            else:
                events.append(item)  # type: ignore[arg-type]
        return Arrivals(events, woken, self._over, error)

    def close(self, timeout_s: float | None = None) -> None:
        """Abandon the stream (the engine stops after its current round) and wait for the thread."""
        self.abandon.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                log.warning("the engine's stream did not end within %s s of being abandoned", timeout_s)
