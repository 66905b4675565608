"""The Compare flow: three methods in turn, a table, bar data and files; a failing method is reported."""

from __future__ import annotations

import csv
import re
import threading
from html import unescape

import pytest
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


def test_time_to_first_pass_for_every_method_in_table_bars_headline_and_files():
    import json

    from app_fakes import BAD, GOOD

    from app.compare import TTFP_COLUMN

    # seq 0 fails and finishes first; seq 1 passes after len(GOOD) / 8 rounds of 1 ms (fake clock)
    session = fake_session(texts=[BAD, GOOD])
    final = list(compare_views(session, settings(), threading.Event()))[-1]
    assert final.error is None, final.status
    rounds = -(-len(GOOD) // 8)  # the fake engine's rounds until seq 1 is done, 1 ms each, after 0.01 s prefill
    expected = round(0.01 + rounds * 0.001, 2)
    assert list(final.table[TTFP_COLUMN]) == [expected] * 3 and list(final.table["passing"]) == ["1/2"] * 3
    assert list(final.first_pass[TTFP_COLUMN]) == [expected] * 3
    # the headline names every method with its acceptance (none for regular: it drafts nothing),
    # tokens/round and time to first pass, as the table has them
    detail = unescape(re.search(r'bass-status-detail">([^<]*)<', final.status).group(1))
    parts = dict(part.split(": ", 1) for part in detail.split(" · "))
    assert list(parts) == ["BASS", "regular batched", "single-seq speculative"], detail
    for _, row in final.table.iterrows():
        text = parts[row["method"]]
        assert f"{row['tokens/round']:.2f} tokens/round" in text and f"first pass {expected:.1f} s" in text, text
        acc = row["acceptance"]
        assert (f"acceptance {acc:.0%}" in text) if acc != "—" else ("no drafts" in text), text
    with open(final.json_path) as f:
        data = json.load(f)
    assert [r["time_to_first_pass_s"] for r in data["runs"].values()] == [pytest.approx(0.01 + rounds * 0.001)] * 3
    with open(final.csv_path) as f:
        assert TTFP_COLUMN in f.readline()


def test_no_pass_reads_none_and_no_tests_leaves_it_blank():
    from app_fakes import BAD

    from app.compare import TTFP_COLUMN

    final = list(compare_views(fake_session(texts=[BAD, BAD]), settings(), threading.Event()))[-1]
    assert list(final.table[TTFP_COLUMN]) == ["none"] * 3 and final.first_pass[TTFP_COLUMN].isna().all()
    p = load_problems()[0]
    untested = parse_settings(p.prompt, "", "auto", 2, 0.0, 1.0, 32, 0, METHOD_LABELS["bass"], "ngram", "torch",
                              None, 3)
    final = list(compare_views(fake_session(), untested, threading.Event()))[-1]
    assert list(final.table[TTFP_COLUMN]) == ["—"] * 3 and "first pass" not in final.status
