"""The Compare button: the same prompt, seed, k and token limit under BASS, regular and single-sequence decoding.

Methods run one after another, each alone on the engine (`bass.eval.compare.stream_method`); the table grows as
each finishes. The Generate tab's time budget and "stop at the first pass" do not apply: every method writes
all k candidates unless the visitor sets the Compare tab's own time budget, and a method it cuts is marked
"cut at N s", its unfinished candidates untested. With unit tests, each candidate is tested the moment it
finishes (`app.live_tests`), which gives every method its time to first pass. A method that fails (an
unsupported drafter, say) is named in the sentence and the others still run. A Stop ends the method in
progress (its row marked stopped, never a baseline) and skips the rest; a Stop while waiting in line runs
nothing. Results are written as CSV and JSON for download.
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
from app.compare import MethodRun, display_table, empty_display_table, numbers_table, per_sequence_table
from app.compare_html import charts_html, sentence_html
from app.export import write_comparison
from app.generate import POLL_S, UPDATE_INTERVAL_S, wait_for_engine
from app.live_tests import TestRunner, reports_by_seq, start_tests
from app.session import EngineSession
from app.settings import RunSettings, UserError
from bass.eval.compare import (
    COMPARE_METHODS,
    CompareRequest,
    engine_wall_s,
    method_name,
    sentence,
    stream_method,
    table_rows,
)
from bass.eval.verdicts import submit_finished

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
                        "set it to 0 to let every method write all its candidates")
    return budget or None


def compare_views(session: EngineSession, settings: RunSettings, cancel: threading.Event,
                  methods: tuple[str, ...] = COMPARE_METHODS, tester: TestRunner = run_tests,
                  budget_s: float | None = None) -> Iterator[CompareView]:
    """Run every method in turn and stream the growing comparison."""
    try:
        req = CompareRequest(settings.prompt, settings.k, replace(settings.params, time_budget_s=budget_s), methods,
                             drafter=settings.drafter, backend=settings.backend, chat=settings.chat)
        yield from wait_for_engine(session, settings.pair_label, cancel, lambda s: CompareView(status=s))
        yield from _compare(session, settings, req, cancel, tester)
    except UserError as exc:
        yield CompareView(status=render.error_html(exc.message, exc.hint), error=exc.message)
    except Exception as exc:
        log.exception("comparison failed")
        msg = f"Comparison failed: {type(exc).__name__}: {exc}"
        yield CompareView(status=render.error_html(msg, "the details are in the server log"), error=msg)


def _views(runs: dict[str, MethodRun], failures: dict[str, str]) -> dict:
    rows = table_rows(runs)
    return {"sentence": sentence_html(sentence(runs, failures)) if runs else "", "table": display_table(runs),
            "charts": charts_html(rows)}


def _compare(session: EngineSession, s: RunSettings, req: CompareRequest, cancel: threading.Event,
             tester: TestRunner) -> Iterator[CompareView]:
    runs: dict[str, MethodRun] = {}
    failures: dict[str, str] = {}
    n = len(req.methods)
    for i, method in enumerate(req.methods):
        if cancel.is_set():
            break
        name = method_name(method)
        shown = _views(runs, failures)
        yield CompareView(status=render.status_html(f"Running {name} ({i + 1}/{n})…",
                                                    f"k={req.k}, seed {req.params.seed}", i / n), **shown)
        worker = start_tests(replace(s, stop_at_first_pass=False), tester) if s.tests.strip() else None
        live, last, result = LiveRun(req.k), 0.0, None
        try:
            for event in stream_method(session.engine, req, method, cancel):
                if event.kind == "queued":
                    yield CompareView(status=render.status_html(f"{name} is waiting in line…", _queue_detail(event)),
                                      **shown)
                    continue
                live.add(event)
                if worker:
                    submit_finished(worker, event)
                if event.kind == "done":
                    result = event.result  # no break: the stream's end captures the graphs this method queued
                elif event.time_s - last >= UPDATE_INTERVAL_S:
                    last = event.time_s
                    detail = f"round {live.round} · {sum(live.finished)}/{req.k} finished · {event.time_s:.1f} s"
                    within = min(1.0, max(live.tokens) / req.params.max_new_tokens)
                    yield CompareView(status=render.status_html(f"Running {name} ({i + 1}/{n})…", detail,
                                                                (i + within) / n), **shown)
            if result is None or not any(c.stats.tokens for c in result.candidates):
                continue  # stopped while waiting in line: this method never ran
            passed = None
            if worker:
                yield from _wait_for_tests(worker, name, (i + 1) / n, shown, cancel)
                passed = tuple(None if r is None else r.passed for r in reports_by_seq(worker, req.k))
            runs[method] = MethodRun(method, result, engine_wall_s(result), passed, req.params.time_budget_s)
        except ValueError as exc:
            failures[method] = str(exc)
        except Exception as exc:
            log.exception("%s failed in the comparison", method)
            failures[method] = f"{type(exc).__name__}: {exc}"
        finally:
            if worker:
                worker.close(timeout_s=0)
    yield _final(runs, failures, s, stopped=cancel.is_set())


def _final(runs: dict[str, MethodRun], failures: dict[str, str], s: RunSettings, stopped: bool) -> CompareView:
    if not runs:
        if stopped:
            return CompareView(status=render.status_html("Stopped before any method ran.", kind="idle"))
        raise UserError("Every method failed: " + "; ".join(f"{method_name(m)}: {why}" for m, why in failures.items()),
                        "change the settings and press Compare again")
    try:
        csv_path, json_path = write_comparison(runs, numbers_table(runs), per_sequence_table(runs), s.describe(),
                                               sentence(runs, failures))
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
        status = render.status_html("Comparison done.", "every method wrote all its candidates", kind="ok")
    return CompareView(status=status, error="; ".join(failures.values()) or None, **files, **_views(runs, failures))


def _wait_for_tests(worker, name: str, fraction: float, shown: dict, cancel: threading.Event) -> Iterator[CompareView]:
    """Decoding of one method is over: wait for its last verdicts (a Stop abandons them)."""
    worker.close(timeout_s=0)
    for pending, waited in worker.drain(cancel, POLL_S):
        yield CompareView(status=render.status_html(f"Testing {name}'s last {pending} candidate(s)…",
                                                    f"{waited:.1f} s", fraction), **shown)


def _queue_detail(event) -> str:
    place = getattr(event, "queue_position", None)
    wait = getattr(event, "wait_estimate_s", None)
    text = f"place {place} in line" if place else "another visitor's request runs first"
    return text + (f", about {wait:.0f} s to go" if wait else "") + f" · waited {event.time_s:.0f} s"
