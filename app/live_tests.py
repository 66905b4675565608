"""Streaming verdicts in the app: each candidate goes to the sandbox the moment it finishes.

The loop that reads the engine's events (the Gradio worker thread) only hands finished candidates to a
`bass.eval.verdicts.VerdictWorker`, whose one background thread runs them through the sandbox (child
processes on the CPU cores) and posts the reports back, waking the page (`app.feed`) so that they are
drawn at once, mid-round. So the engine never waits on a test, and a card turns PASS/FAIL while its
siblings are still decoding.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from app.programs import build_program
from app.ranking import TestReport
from app.settings import RunSettings
from bass.eval.verdicts import VerdictWorker, either

TestRunner = Callable[[Sequence[str], str], list[TestReport]]


def start_tests(s: RunSettings, tester: TestRunner,
                on_verdicts: Callable[[], None] | None = None) -> VerdictWorker[TestReport]:
    """A worker that builds each finished candidate's program and runs it against the settings' tests;
    `on_verdicts` is called (on the worker's thread) whenever new verdicts are ready."""

    def check(items: Sequence[tuple[int, str]]) -> list[TestReport]:
        return tester([build_program(s.prompt, text, s.style) for _, text in items], s.tests)

    def crashed(exc: Exception, seq: int) -> TestReport:  # a sandbox crash still leaves every card on screen
        return TestReport("error", 0, 0, "", 0.0, detail=f"sandbox failed: {type(exc).__name__}: {exc}")

    # Without tests there is nothing to pass; candidates still run so that the ranking says whether they run.
    stop = s.stop_at_first_pass and bool(s.tests.strip())
    return VerdictWorker(check, lambda r: r.passed, stop_at_first_pass=stop, on_error=crashed,
                         on_verdicts=on_verdicts)


def engine_cancel(user_cancel: threading.Event, worker: VerdictWorker, *more: threading.Event) -> threading.Event:
    """The event the engine polls: the Stop button, (with stop at the first pass) a passing candidate, or
    any of `more` (the page's feed, abandoned when the browser goes away)."""
    return either(user_cancel, worker.first_pass, *more)


def reports_by_seq(worker: VerdictWorker, k: int) -> list[TestReport | None]:
    """One report per sequence, None where no verdict exists (cancelled, or not reached)."""
    got = worker.verdicts
    return [got[i].value if i in got else None for i in range(k)]
