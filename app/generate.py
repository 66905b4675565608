"""The Generate button: wait for the model, stream the k candidates, test each as it finishes, rank them.

Each candidate goes to the sandbox the moment it finishes, in the background (`app.live_tests`), so
its card turns PASS/FAIL while its siblings decode; with "stop at the first pass" the first passing
candidate ends the others, which keep their partial text, untested. The engine's stream is read on its
own thread (`app.feed`): the page is redrawn when an engine event or a verdict arrives, whichever is
first, so a verdict shows the moment it is known, not at the end of the round it landed in. Round updates
are throttled (`app.throttle`) so that drawing the run never takes the cores the engine needs.

`generate_views` is a plain generator of `GenerateView`s (no Gradio in it), so tests drive it with a
fake engine. Every failure ends in a view whose status is a readable error box; nothing escapes as a
traceback. Phase changes, verdicts and the final view are sent at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pandas as pd

from app import render
from app.charts import LiveRun, empty_accept_frame, empty_speed_frame
from app.checks import run_tests
from app.export import generation_payload, write_generation
from app.feed import Feed
from app.generate_status import best_label, decoding_status, final_note, queued_status, queued_then_stopped
from app.live_tests import TestRunner, engine_cancel, reports_by_seq, start_tests
from app.programs import build_program
from app.ranking import TestReport, pass_summary, rank_candidates
from app.session import EngineSession
from app.settings import METHOD_LABELS, TESTS_GO_IN_THE_BOX, RunSettings, UserError
from app.throttle import Throttle, min_interval_s
from app.timing import RunClock, RunTiming
from bass.eval.verdicts import submit_finished

log = logging.getLogger("bass.app")

POLL_S = 0.25


@dataclass(frozen=True)
class GenerateView:
    """Everything the Generate tab shows at one moment."""

    status: str
    candidates: str = ""
    speed: pd.DataFrame = field(default_factory=empty_speed_frame)
    accept: pd.DataFrame = field(default_factory=empty_accept_frame)
    summary: str = ""
    best_code: str = ""
    download: str | None = None
    error: str | None = None  # the plain message, for a toast
    best_label: str = "Best candidate"
    k: int = 0  # the run's k (0 before it starts): the charts' colours and heights follow it


def error_view(message: str, hint: str = "") -> GenerateView:
    return GenerateView(status=render.error_html(message, hint), error=message)


def wait_for_engine(session: EngineSession, pair_label: str | None, cancel: threading.Event,
                    make_view: Callable[[str], object]) -> Iterator[object]:
    """Start loading the chosen model pair if needed and yield progress views until it is ready.

    Raises UserError when the load fails or the user stops waiting.
    """
    try:
        session.ensure(session.find_pair(pair_label))
    except RuntimeError as exc:
        raise UserError(str(exc), "wait for the model that is loading, or choose it in 'Model pair'") from None
    while True:
        state = session.state()
        if state.error:
            raise UserError(f"Loading the model failed: {state.error}", session.failure_hint())
        if state.ready:
            return
        if cancel.is_set():
            raise UserError("Stopped while the model was loading.", "the model keeps loading; press Generate again")
        yield make_view(render.status_html("Preparing the model (once per process)…", state.message,
                                           state.fraction))
        time.sleep(POLL_S)


def generate_views(session: EngineSession, settings: RunSettings, cancel: threading.Event,
                   tester: TestRunner = run_tests) -> Iterator[GenerateView]:
    """The whole Generate flow as a stream of views."""
    if cancel.is_set():  # Stop came while the request waited for a free slot of the page's queue
        yield GenerateView(status=render.status_html("Stopped before it started: nothing was generated.",
                                                     "press Generate to run it", kind="ok"))
        return
    try:
        yield from wait_for_engine(session, settings.pair_label, cancel, lambda s: GenerateView(status=s))
        yield from _generate(session, settings, cancel, tester)
    except UserError as exc:
        yield error_view(exc.message, exc.hint)
    except Exception as exc:  # an engine bug must not reach the browser as a traceback
        log.exception("generation failed")
        yield error_view(f"Generation failed: {type(exc).__name__}: {exc}",
                         "try fewer tokens, another backend or drafter; the details are in the server log")


def _generate(session: EngineSession, s: RunSettings, cancel: threading.Event,
              tester: TestRunner) -> Iterator[GenerateView]:
    engine = session.engine
    run = LiveRun(s.k)
    method = METHOD_LABELS[s.method]
    first_detail = f"{method} on {engine.device}" + (f" · {TESTS_GO_IN_THE_BOX}" if s.tests_requested else "")
    yield GenerateView(status=render.status_html(f"Prefill: encoding the prompt for {render.plural(s.k, 'sequence')}…",
                                                 first_detail),
                       candidates=render.live_cards_html(run), k=s.k)
    clock = RunClock(time.perf_counter())
    throttle = Throttle(min_interval_s(engine.device))
    feed = Feed()  # the engine runs on the feed's thread; this generator wakes on its events and on verdicts
    worker = start_tests(s, tester, on_verdicts=feed.wake)
    # `cancel` is this visitor's alone: the engine stops their request, queued or running, and no other
    feed.start(_readable_errors(engine.stream(s.engine_prompt, k=s.k, params=s.params, method=s.method,
                                              drafter=s.drafter, backend=s.backend, chat=s.chat,
                                              draft_length=s.draft_length,
                                              cancel=engine_cancel(cancel, worker, feed.abandon))))
    result = None
    unsent = False
    try:
        while result is None:
            got = feed.next(timeout_s=throttle.min_interval_s)
            urgent, queued = False, None
            for event in got.events:
                if event.kind == "queued":
                    queued, urgent = event, True
                    continue
                if event.kind == "prefill":
                    clock.started(time.perf_counter(), event.time_s)
                run.add(event)
                submit_finished(worker, event)  # returns at once: the tests run on the worker's thread
                urgent = urgent or event.kind in ("prefill", "prefilling")
                if event.kind == "done":
                    result = event.result
            if got.error is not None:
                raise got.error  # after the events before it: the cards keep what was generated
            if result is None and got.ended:
                raise RuntimeError("the engine's stream ended without a result")
            new = worker.poll()
            unsent = unsent or bool(got.events)
            if result is None and queued is not None and run.phase in ("waiting", "queued"):
                throttle.sending()
                unsent = False
                yield GenerateView(status=queued_status(queued, cancel.is_set()),
                                   candidates=render.live_cards_html(run), k=s.k)
                throttle.sent()
            elif result is None and (urgent or new or (unsent and throttle.due(time.perf_counter()))):
                throttle.sending()
                unsent = False
                yield GenerateView(status=decoding_status(run, s, method, worker.verdicts, cancel.is_set()),
                                   candidates=render.live_cards_html(run, worker.verdicts),
                                   speed=run.speed_frame(), accept=run.accept_frame(), k=s.k)
                throttle.sent()
    finally:
        if result is None:
            feed.close()  # the engine stops after its round if the browser went away; it is free on return
            worker.close(timeout_s=0)
        # with the result, the feed reads the stream to its end on its own thread: the engine captures the
        # graphs this request queued (`bass.runtime.graphs`) while the page shows the result (its lock holds the next
        # request back until they are done)
    programs = [build_program(s.prompt, c.text, s.style) for c in result.candidates]
    worker.close(timeout_s=0)  # no more submissions; the worker finishes what is queued
    if queued_then_stopped(run, cancel.is_set()):
        where = "reading your prompt" if run.prefilled else "waiting in line"
        yield GenerateView(status=render.status_html(f"Stopped while {where}: nothing was generated.",
                                                     "other visitors' runs go on; press Generate to queue again",
                                                     kind="ok"), k=s.k)
        return
    yield from _wait_for_verdicts(run, worker, s, cancel)
    cancelled = cancel.is_set()  # Stop, while decoding or testing (a stop at the first pass is not the user's)
    worker.poll()
    reports = reports_by_seq(worker, len(programs))
    passes = [v.at_s for v in worker.verdicts.values() if v.passed]
    yield _final_view(run, result, programs, reports, s, clock.timing(time.perf_counter(), min(passes, default=None)),
                      cancelled, worker.first_pass.is_set())


def _wait_for_verdicts(run: LiveRun, worker, s: RunSettings, cancel: threading.Event) -> Iterator[GenerateView]:
    """Decoding is over: show the cards (live verdicts included) while the last tests run, until they are
    done or the Stop button is pressed (then the candidates still in the sandbox stay untested)."""
    for pending, waited in worker.drain(cancel, POLL_S):
        last = f"the last {render.plural(pending, 'candidate')}"
        what = (f"Testing {last} in the sandbox…" if s.tests.strip() else
                f"Running {last} in the sandbox (no tests given)…")
        yield GenerateView(status=render.status_html(what, f"{waited:.1f} s"),
                           candidates=render.live_cards_html(run, worker.verdicts), speed=run.speed_frame(),
                           accept=run.accept_frame(), k=s.k)


def _readable_errors(stream: Iterator) -> Iterator:
    """The engine validates lazily (on the first event): turn its ValueErrors into UserErrors."""
    try:
        yield from stream
    except ValueError as exc:
        raise UserError(str(exc), "change the setting it names and press Generate again") from None


def _final_view(run: LiveRun, result, programs: list[str], reports: list[TestReport | None], s: RunSettings,
                timing: RunTiming, cancelled: bool, stopped_at_pass: bool) -> GenerateView:
    shown = [c.text for c in result.candidates] if s.style == "completion" else programs
    tests_given = bool(s.tests.strip())
    rows = rank_candidates(result, programs, reports, shown, tests_given=tests_given)
    summary = pass_summary(result, reports, tests_given=tests_given)
    stats = result.stats
    acceptance = stats.acceptance_rate if stats.proposed else None
    headline = render.summary_html(summary, stats.mean_ms_per_token, acceptance, stats.tokens_per_round,
                                   timing, METHOD_LABELS[s.method])
    try:
        path = str(write_generation(generation_payload(rows, summary, stats.to_dict(), s.describe())))
    except OSError:
        log.exception("could not write the results file")
        path = None
    title = ("Stopped. (Your run only: other visitors' runs go on.)" if cancelled else
             "Done: stopped at the first pass." if stopped_at_pass else "Done.")
    detail = f"{render.plural(stats.tokens, 'token')} in {timing.wall_s:.1f} s · prefill {stats.prefill_s:.2f} s"
    if timing.waited_s >= render.WAIT_SHOWN_S:
        detail += f" · after {timing.waited_s:.1f} s in line"
    cards = render.ranked_cards_html(rows, final_note(s, cancelled, stopped_at_pass), run.per_round)
    return GenerateView(status=render.status_html(title, detail, kind="ok"), candidates=cards,
                        speed=run.speed_frame(), accept=run.accept_frame(), summary=headline,
                        best_code=rows[0].code if rows else "", download=path,
                        best_label=best_label(rows[0] if rows else None, summary), k=s.k)
