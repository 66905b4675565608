"""The Compare button: the same prompt, seed, k and token limit under BASS, regular and single-sequence decoding.

The comparison is `bass.eval.compare`'s, streamed as views: an untimed warm-up, then each method's timed runs (by
default every candidate runs to the token limit and is cut at its first stop afterwards; "natural stops" lets stop
strings end them), the table growing as runs end, then the candidates shown tested and, with unit tests, one normal
run of each method whose candidates are tested as they finish (`app.checks`), for the time to the first pass. The
Generate tab's time budget and "stop at the first pass" do not apply: every method writes all k candidates unless
the visitor sets the Compare tab's own time budget, and a method it cuts is marked "cut at N s", its unfinished
candidates untested. A method that fails (an unsupported drafter, say) is named in the sentence and the others still
run. A Stop ends the run in progress (its method marked stopped, never a baseline) and skips the rest; a Stop while
waiting in line runs nothing. Results are written as CSV and JSON for download.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import pandas as pd

from app import render
from app.charts import LiveRun
from app.checks import run_tests
from app.compare import display_table, empty_display_table, numbers_table, per_sequence_table
from app.compare_html import charts_html, sentence_html
from app.export import write_comparison
from app.generate import wait_for_engine
from app.live_tests import TestRunner
from app.programs import build_program
from app.session import EngineSession
from app.settings import RunSettings, UserError
from app.throttle import STATUS_INTERVAL_S
from bass.eval.compare import COMPARE_METHODS, MAX_REPEATS, CompareRequest, Step, compare_steps
from bass.eval.compare_report import method_name, sentence, table_rows
from bass.eval.compare_results import Comparison

log = logging.getLogger("bass.app")

MAX_BUDGET_S = 3600


@dataclass(frozen=True)
class CompareView:
    status: str
    sentence: str = ""  # HTML of the comparison's one sentence
    table: pd.DataFrame = field(default_factory=empty_display_table)
    charts: str = ""
    csv_path: str | None = None
    json_path: str | None = None
    error: str | None = None


def compare_budget(value) -> float | None:
    """The Compare tab's time budget per method: None for none (0 or blank); a clear error otherwise."""
    if value in (None, ""):
        return None
    try:
        budget = float(value)
    except (TypeError, ValueError):
        budget = float("nan")
    if not 0 <= budget <= MAX_BUDGET_S:
        raise UserError(f"Time budget per method must be between 0 and {MAX_BUDGET_S} seconds, got {value!r}.",
                        "set it to 0 to let every method write all its candidates", "bass-compare-budget")
    return budget or None


def compare_repeats(value) -> int:
    """The Compare tab's timed runs per method: a whole number from 1 to `MAX_REPEATS`; a clear error otherwise."""
    try:
        repeats = float(value)
    except (TypeError, ValueError):
        repeats = float("nan")
    if not (1 <= repeats <= MAX_REPEATS and repeats == int(repeats)):
        raise UserError(f"Timed runs per method must be a whole number from 1 to {MAX_REPEATS}, got {value!r}.",
                        "3 reads a GPU's median steadily; on a CPU each run takes minutes, so 1",
                        "bass-compare-repeats")
    return int(repeats)


def compare_views(session: EngineSession, settings: RunSettings, cancel: threading.Event,
                  methods: tuple[str, ...] = COMPARE_METHODS, tester: TestRunner = run_tests,
                  budget_s: float | None = None, repeats: int | None = None,
                  equal_work: bool = True) -> Iterator[CompareView]:
    """Run the comparison and stream its views; `repeats` None: `bass.eval.compare.default_repeats`."""
    try:
        req = CompareRequest(settings.engine_prompt, settings.k, replace(settings.params, time_budget_s=budget_s),
                             methods, drafter=settings.drafter, backend=settings.backend, chat=settings.chat,
                             equal_work=equal_work, repeats=repeats)
        yield from wait_for_engine(session, settings.pair_label, cancel, lambda s: CompareView(status=s))
        yield from _compare(session, settings, req, cancel, tester)
    except UserError as exc:
        yield CompareView(status=render.error_html(exc.message, exc.hint), error=exc.message)
    except Exception as exc:
        log.exception("comparison failed")
        msg = f"Comparison failed: {type(exc).__name__}: {exc}"
        yield CompareView(status=render.error_html(msg, "the details are in the server log"), error=msg)


def _views(cmp: Comparison) -> dict:
    return {"sentence": sentence_html(sentence(cmp)) if cmp.results else "", "table": display_table(cmp),
            "charts": charts_html(table_rows(cmp))}


def _checker(s: RunSettings, tester: TestRunner):
    """[(seq, text)] -> passed each: the candidates' programs through the sandbox (None: no tests given)."""
    if not s.tests.strip():
        return None

    def check(items) -> list[bool]:
        return [r.passed for r in tester([build_program(s.prompt, text, s.style) for _, text in items], s.tests)]

    return check


def _compare(session: EngineSession, s: RunSettings, req: CompareRequest, cancel: threading.Event,
             tester: TestRunner) -> Iterator[CompareView]:
    shown, shown_of, live, last = {}, None, LiveRun(req.k), 0.0
    step = None
    for step in compare_steps(session.engine, req, _checker(s, tester), cancel):
        if step.comparison is not shown_of:  # a run ended: the table and charts change
            shown_of, shown = step.comparison, _views(step.comparison)
        event = step.event
        if event is None:  # a phase or a run begins
            live, last = LiveRun(req.k), 0.0
        elif event.kind != "queued":
            live.add(event)
            if event.kind == "round" and event.time_s - last < STATUS_INTERVAL_S:
                continue
            last = event.time_s
        if step.phase != "done":
            yield CompareView(status=_progress(step, live, req), **shown)
    if step is not None:
        yield _final(step.comparison, s, stopped=cancel.is_set())


def _progress(step: Step, live: LiveRun, req: CompareRequest) -> str:
    """The status line of a step: what runs, and how far it is."""
    name = method_name(step.method) if step.method else ""
    within = min(1.0, max(live.tokens) / req.params.max_new_tokens) if step.event is not None else 0.0
    fraction = (step.done + within) / max(step.total, 1)
    if step.event is not None and step.event.kind == "queued":
        return render.status_html(f"{name} is waiting in line…", _queue_detail(step.event))
    if step.phase == "testing":
        what = f"{name}'s last {step.pending} candidate(s)" if step.method else "the candidates shown"
        return render.status_html(f"Testing {what}…", "in the sandbox", fraction)
    title = {"warm-up": f"Warming up {name} (untimed)…",
             "first pass": f"Normal run of {name}, testing each candidate as it finishes (first pass)…"}.get(
        step.phase, f"Running {name}, timed run {_run_number(step)}…")
    detail = f"round {live.round} · {sum(f is not None for f in live.finish_reasons)}/{req.k} finished · " \
             f"{live.time_s:.1f} s" if step.event is not None else f"k={req.k}, seed {req.params.seed}"
    return render.status_html(title, detail, fraction)


def _run_number(step: Step) -> str:
    res = step.comparison.results.get(step.method)
    return f"{(len(res.runs) if res else 0) + 1} of {step.comparison.repeats}"


def _final(cmp: Comparison, s: RunSettings, stopped: bool) -> CompareView:
    runs, failures = cmp.results, cmp.failures
    if not runs:
        if stopped:
            return CompareView(status=render.status_html("Stopped before any method ran.", kind="idle"))
        raise UserError("Every method failed: " + "; ".join(f"{method_name(m)}: {why}" for m, why in failures.items()),
                        "change the settings and press Compare again")
    meta = {**s.describe(), "equal_work": cmp.equal_work, "repeats": cmp.repeats}
    try:
        csv_path, json_path = write_comparison(cmp, numbers_table(cmp), per_sequence_table(cmp), meta)
    except OSError:
        log.exception("could not write the comparison files")
        csv_path = json_path = None
    files = {"csv_path": None if csv_path is None else str(csv_path),
             "json_path": None if json_path is None else str(json_path)}
    partial = [m for m, r in runs.items() if r.state != "complete"]
    if stopped:
        status = render.status_html("Stopped: partial comparison.", "the stopped method is marked and is not a "
                                    "baseline; press Compare methods again for the whole comparison", kind="idle")
    elif failures:
        status = render.error_html("Some methods failed: " + "; ".join(f"{method_name(m)}: {why}"
                                                                       for m, why in failures.items()))
    elif partial:
        status = render.status_html("Comparison done, with methods cut by the time budget.", "a cut method is "
                                    "marked and not compared; set the time budget to 0 to let each finish",
                                    kind="idle")
    else:
        work = "ran every candidate to the token limit" if cmp.equal_work else "wrote all its candidates"
        status = render.status_html("Comparison done.", f"every method {work}, {cmp.repeats} timed run(s) each",
                                    kind="ok")
    return CompareView(status=status, error="; ".join(failures.values()) or None, **files, **_views(cmp))


def _queue_detail(event) -> str:
    place = getattr(event, "queue_position", None)
    wait = getattr(event, "wait_estimate_s", None)
    text = f"place {place} in line" if place else "another visitor's request runs first"
    return text + (f", about {wait:.0f} s to go" if wait else "") + f" · waited {event.time_s:.0f} s"
