"""The Compare button: the same prompt, seed and k under BASS, regular and single-sequence decoding.

Methods run one after another on the one engine; the table grows as each finishes. With unit tests,
each candidate is tested the moment it finishes (`app.live_tests`), which gives every method its time to
first pass (and, with "stop at the first pass", ends each method's run at its first pass). A method that fails
(an unsupported drafter, say) is reported in the status and the others still run. Results are written
as CSV and JSON for download.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pandas as pd

from app import render
from app.charts import LiveRun
from app.checks import run_tests
from app.compare import (
    COMPARE_ORDER,
    TABLE_COLUMNS,
    TTFP_COLUMN,
    MethodRun,
    comparison_table,
    display_table,
    first_pass_bars,
    latency_bars,
    method_name,
    per_sequence_table,
    wall_bars,
)
from app.export import write_comparison
from app.generate import POLL_S, UPDATE_INTERVAL_S, TestRunner, wait_for_engine
from app.live_tests import engine_cancel, reports_by_seq, start_tests
from app.session import EngineSession
from app.settings import RunSettings, UserError
from bass.verdicts import submit_finished

log = logging.getLogger("bass.app")


def _empty_table() -> pd.DataFrame:
    return pd.DataFrame(columns=TABLE_COLUMNS)


@dataclass(frozen=True)
class CompareView:
    status: str
    table: pd.DataFrame = field(default_factory=_empty_table)
    latency: pd.DataFrame = field(default_factory=lambda: latency_bars(_empty_table()))
    wall: pd.DataFrame = field(default_factory=lambda: wall_bars(_empty_table()))
    first_pass: pd.DataFrame = field(default_factory=lambda: first_pass_bars(_empty_table()))
    csv_path: str | None = None
    json_path: str | None = None
    error: str | None = None


def _tables(runs: dict[str, MethodRun]) -> dict:
    table = comparison_table(runs)
    return {"table": display_table(table), "latency": latency_bars(table), "wall": wall_bars(table),
            "first_pass": first_pass_bars(table)}


def compare_views(session: EngineSession, settings: RunSettings, cancel: threading.Event,
                  methods: tuple[str, ...] = COMPARE_ORDER, tester: TestRunner = run_tests) -> Iterator[CompareView]:
    """Run every method in turn and stream the growing comparison."""
    try:
        yield from wait_for_engine(session, settings.pair_label, cancel, lambda s: CompareView(status=s))
        yield from _compare(session, settings, cancel, methods, tester)
    except UserError as exc:
        yield CompareView(status=render.error_html(exc.message, exc.hint), error=exc.message)
    except Exception as exc:
        log.exception("comparison failed")
        msg = f"Comparison failed: {type(exc).__name__}: {exc}"
        yield CompareView(status=render.error_html(msg, "the details are in the server log"), error=msg)


def _compare(session: EngineSession, s: RunSettings, cancel: threading.Event,
             methods: tuple[str, ...], tester: TestRunner) -> Iterator[CompareView]:
    engine = session.engine
    runs: dict[str, MethodRun] = {}
    failures: list[str] = []
    for i, method in enumerate(methods):
        if cancel.is_set():
            break
        name = method_name(method)
        base = _tables(runs) if runs else {}
        yield CompareView(status=render.status_html(f"Running {name} ({i + 1}/{len(methods)})…",
                                                    f"k={s.k}, seed {s.params.seed}", i / len(methods)), **base)
        t0 = time.perf_counter()
        last = 0.0
        live = LiveRun(s.k)
        worker = start_tests(s, tester) if s.tests.strip() else None
        try:
            stop = engine_cancel(cancel, worker) if worker else cancel
            for event in engine.stream(s.prompt, k=s.k, params=s.params, method=method, drafter=s.drafter,
                                       backend=s.backend, chat=s.chat, cancel=stop):
                live.add(event)
                if worker:
                    submit_finished(worker, event)
                if event.kind == "done":
                    wall_s = time.perf_counter() - t0
                    passed = None
                    if worker:
                        yield from _wait_for_tests(worker, name, i, len(methods), base, cancel)
                        passed = tuple(None if r is None else r.passed for r in reports_by_seq(worker, s.k))
                    runs[method] = MethodRun(method, event.result, wall_s, passed)
                    # no break: the stream's end captures the graphs this method queued (`bass.graphs`),
                    # after its wall_s and before the next method's t0
                    continue
                now = time.perf_counter()
                if now - last >= UPDATE_INTERVAL_S:
                    last = now
                    within = max(live.tokens) / s.params.max_new_tokens
                    detail = (f"round {live.round} · {sum(live.finished)}/{s.k} finished · "
                              f"{now - t0:.1f} s")
                    yield CompareView(status=render.status_html(f"Running {name} ({i + 1}/{len(methods)})…",
                                                                detail, (i + min(1.0, within)) / len(methods)),
                                      **base)
        except ValueError as exc:
            failures.append(f"{name}: {exc}")
        except Exception as exc:
            log.exception("%s failed in the comparison", method)
            failures.append(f"{name}: {type(exc).__name__}: {exc}")
        finally:
            if worker:
                worker.close(timeout_s=0)
    if not runs:
        raise UserError("No method finished." if not failures else "Every method failed: " + "; ".join(failures),
                        "change the settings and press Compare again")
    tables = _tables(runs)
    numbers = comparison_table(runs)
    try:
        csv_path, json_path = write_comparison(runs, numbers, per_sequence_table(runs), s.describe())
    except OSError:
        log.exception("could not write the comparison files")
        csv_path = json_path = None
    title = "Stopped: partial comparison." if cancel.is_set() else "Comparison done."
    detail = _headline(numbers)
    if failures:
        yield CompareView(status=render.error_html("Some methods failed: " + "; ".join(failures), detail),
                          csv_path=_str(csv_path), json_path=_str(json_path), error="; ".join(failures), **tables)
        return
    yield CompareView(status=render.status_html(title, detail, kind="ok"), csv_path=_str(csv_path),
                      json_path=_str(json_path), **tables)


def _wait_for_tests(worker, name: str, i: int, n: int, base: dict, cancel: threading.Event) -> Iterator[CompareView]:
    """Decoding of one method is over: wait for its last verdicts (a Stop abandons them)."""
    worker.close(timeout_s=0)
    for pending, waited in worker.drain(cancel, POLL_S):
        yield CompareView(status=render.status_html(f"Testing {name}'s last {pending} candidate(s)…",
                                                    f"{waited:.1f} s", (i + 1) / n), **base)


def _headline(table: pd.DataFrame) -> str:
    """Per method: ms/token (and × regular), acceptance, tokens/round and time to first pass."""
    parts = []
    for _, row in table.iterrows():
        up = row["speed-up (ms/token)"]
        text = f"{row['method']}: {row['mean ms/token']:.0f} ms/token"
        if not pd.isna(up) and row["method"] != method_name("regular"):
            text += f" ({up:.2f}× regular)"
        acc = row["acceptance"]
        text += (f", acceptance {acc:.0%}" if not pd.isna(acc) else ", no drafts") + \
            f", {row['tokens/round']:.2f} tokens/round"
        if not pd.isna(row["passing"]):
            ttfp = row[TTFP_COLUMN]
            text += f", first pass {'none' if pd.isna(ttfp) else f'{ttfp:.1f} s'}"
        parts.append(text)
    return " · ".join(parts)


def _str(path) -> str | None:
    return None if path is None else str(path)
