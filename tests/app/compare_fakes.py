"""A scripted engine with what Compare relies on beyond `app_fakes.FakeEngine`: the time budget, the
exclusive flag, and "queued" events while another request holds the engine."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

from app_fakes import FakeEngine
from scripted import cancelled_result

from bass.events import GenerationEvent


class _Deadline(threading.Event):
    """Reads as set once `budget_s` has passed since it was made, or when `cancel` is set."""

    def __init__(self, budget_s: float | None, cancel: threading.Event | None):
        super().__init__()
        self.t0, self.budget_s, self.cancel = time.monotonic(), budget_s, cancel

    def expired(self) -> bool:
        return self.budget_s is not None and time.monotonic() - self.t0 >= self.budget_s

    def is_set(self) -> bool:
        return (self.cancel is not None and self.cancel.is_set()) or self.expired()


class CompareFakeEngine(FakeEngine):
    """FakeEngine whose rounds stop at `params.time_budget_s` (finish reason "budget", as the engine's), and
    which first waits `queued_s` in line, yielding "queued" events (a Stop then ends it with every candidate
    cancelled and empty, as the engine's scheduler does). Records each call's `exclusive` and `draft_length`."""

    def __init__(self, *args, queued_s: float = 0.0, **kwargs):
        super().__init__(*args, **kwargs)
        self.queued_s = queued_s
        self.exclusive: list[bool] = []
        self.draft_lengths: list = []

    def stream(self, prompts, *, k, params, method="bass", drafter=None, backend=None, draft_length=None,
               chat=False, cancel=None, look_ahead=None, exclusive=False):
        self.exclusive.append(exclusive)
        self.draft_lengths.append(draft_length)
        t0 = time.monotonic()
        while time.monotonic() - t0 < self.queued_s:
            if cancel is not None and cancel.is_set():
                yield self._cancelled_in_line(prompts, k, params, method)
                return
            yield GenerationEvent("queued", 0, time.monotonic() - t0, 0)
            time.sleep(0.05)
        deadline = _Deadline(params.time_budget_s, cancel)
        for event in super().stream(prompts, k=k, params=replace(params, time_budget_s=None), method=method,
                                    drafter=drafter, backend=backend, draft_length=draft_length, chat=chat,
                                    cancel=deadline):
            yield self._budget(event) if deadline.expired() and not (cancel and cancel.is_set()) else event

    def _cancelled_in_line(self, prompts, k, params, method) -> GenerationEvent:
        for _ in super().stream(prompts, k=k, params=params, method=method, cancel=_Deadline(0.0, None)):
            pass  # recorded in `calls` as a request the engine was given, every row cut at once
        return GenerationEvent("done", 0, 0.0, 0, (), ("",) * k, cancelled_result(k, method))

    @staticmethod
    def _budget(event: GenerationEvent) -> GenerationEvent:
        """The fake's cancels past the deadline, reported as the engine reports a budget cut."""
        updates = tuple(replace(u, finish_reason="budget") if u.finish_reason == "cancelled" else u
                        for u in event.updates)
        result = event.result
        if result is not None:
            result = replace(result, candidates=tuple(replace(c, finish_reason="budget")
                                                      if c.finish_reason == "cancelled" else c
                                                      for c in result.candidates))
        return replace(event, updates=updates, result=result)
