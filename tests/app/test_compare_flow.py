"""The Compare flow: three methods in turn, a table, bar data and files; a failing method is reported."""

from __future__ import annotations

import csv
import threading

from app_fakes import FakeEngine, fake_session

from app.compare_run import compare_views
from app.problems import load_problems
from app.settings import METHOD_LABELS, parse_settings


def settings(k=2):
    p = load_problems()[0]
    return parse_settings(p.prompt, p.editable_tests(), "auto", k, 0.0, 1.0, 32, 0, METHOD_LABELS["bass"], "ngram",
                          "torch", None, 3)


def test_three_methods_table_bars_and_files():
    session = fake_session()
    views = list(compare_views(session, settings(), threading.Event()))
    final = views[-1]
    assert final.error is None, final.status
    assert list(final.table["method"]) == ["BASS", "regular batched", "single-seq speculative"]
    assert list(final.latency["method"]) == list(final.table["method"]) and len(final.wall) == 3
    assert [c["method"] for c in session.engine.calls] == ["bass", "regular", "single"]
    assert all(c["params"].seed == 3 and c["k"] == 2 for c in session.engine.calls)
    with open(final.csv_path) as f:
        rows = list(csv.reader(f))
    assert rows[0][0] == "method" and len(rows) > 4
    assert final.json_path.endswith(".json")
    # the table grew as methods finished
    assert any(len(v.table) == 1 for v in views) and any(len(v.table) == 2 for v in views)


def test_a_failing_method_does_not_stop_the_others():
    class NoSingle(FakeEngine):
        def stream(self, prompts, **kw):
            if kw.get("method") == "single":
                raise ValueError("drafter 'model' is not available here")
            yield from super().stream(prompts, **kw)

    from app.session import EngineSession
    session = EngineSession(env={}, factory=lambda config, progress: NoSingle(config))
    final = list(compare_views(session, settings(), threading.Event()))[-1]
    assert list(final.table["method"]) == ["BASS", "regular batched"]
    assert "bass-error" in final.status and "single-seq speculative" in final.status


def test_stop_between_methods_keeps_what_finished():
    session = fake_session(round_s=0.01)
    cancel = threading.Event()
    views = []
    for view in compare_views(session, settings(), cancel):
        views.append(view)
        if len(view.table) == 1:
            cancel.set()
    assert "Stopped" in views[-1].status and len(views[-1].table) >= 1
