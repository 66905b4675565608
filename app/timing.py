"""One time origin for everything a run's summary says: the moment the engine took the request up.

The engine times a request from the start of its prefill: its time to first pass is prefill + the first
passing candidate's finish time (`bass.metrics.time_to_first_pass`). The page's own clock reads when things
reached the visitor (the PASS verdict, the end of the run), so it is moved to the same origin: the "prefill"
event arrives when the prefill ends, `prefill_s` after it began, hence origin = arrival - prefill_s. Time spent
waiting in line before that is reported on its own, never folded into the run's times.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RunTiming:
    """A finished run's times, in seconds from the start of its prefill (`waited_s`: in line before it)."""

    wall_s: float
    waited_s: float
    pass_shown_s: float | None  # when the first PASS verdict reached the page; None when nothing passed


class RunClock:
    """Perf-counter readings of one run → `RunTiming`."""

    def __init__(self, began_s: float):
        self.began_s = began_s  # the page sent the request
        self.origin_s = began_s  # until the prefill event says when the engine began

    def started(self, arrived_s: float, prefill_s: float) -> None:
        """The prefill event arrived at `arrived_s`, after a prefill of `prefill_s`."""
        self.origin_s = max(self.began_s, arrived_s - max(0.0, prefill_s))

    def timing(self, ended_s: float, first_pass_at_s: float | None) -> RunTiming:
        shown = None if first_pass_at_s is None else max(0.0, first_pass_at_s - self.origin_s)
        return RunTiming(wall_s=max(0.0, ended_s - self.origin_s), waited_s=self.origin_s - self.began_s,
                         pass_shown_s=shown)
