"""The Generate tab never misleads: what it says about tests, the best candidate, the seed, chat code, the
charts and the cards. Scripted engine (and a tiny real one for the seed), real sandbox, real views."""

from __future__ import annotations

import json
import re
import threading

import pandas as pd
from app_fakes import BAD, GOOD, fake_session

from app.charts import DRAFT_LENGTH_COLOUR, DRAFT_LENGTH_SERIES, LiveRun, chart_look, seq_label
from app.generate import error_view, generate_views
from app.problems import load_problems
from app.render import highlight, live_cards_html, plural
from app.session import EngineSession
from app.settings import CHAT_INSTRUCTION, METHOD_LABELS, SEEDED_DRAFT_LENGTH, TESTS_GO_IN_THE_BOX, parse_settings
from app.ui import _stream
from bass.config import EngineConfig
from bass.events import GenerationEvent, SequenceUpdate


def he0(k=2, budget=0, seed=3, tests=None, stop_first=False):
    p = load_problems()[0]
    return parse_settings(p.prompt, p.editable_tests() if tests is None else tests, "auto", k, 0.8, 0.95, 64,
                          budget, METHOD_LABELS["bass"], None, None, None, seed, stop_first)


def final(session, s, cancel=None):
    views = list(generate_views(session, s, cancel or threading.Event()))
    assert views[-1].error is None, views[-1].status
    return views[-1]


def badges(html):
    return re.findall(r'bass-badge-\w+">([^<]+)<', html)


def test_broken_tests_are_refused_before_anything_is_generated():
    """The page's Generate (`ui._stream`) parses the settings first: broken tests end there, in an error box."""
    session = fake_session()
    bad = "def check(candidate):\n    assert candidate([1.0, 2.0], 0.5 == False\n"
    p = load_problems()[0]
    values = (p.prompt, bad, "auto", 2, 0.8, 0.95, 64, 0, METHOD_LABELS["bass"], None, None, None, 3, False)
    shown = list(_stream(session, values, None, generate_views, lambda v: v, lambda e: error_view(e.message, e.hint)))
    assert len(shown) == 1 and "bass-error" in shown[0].status
    assert "The unit tests do not parse (line 2" in shown[0].status and "nothing was generated" in shown[0].status
    assert session.engine.calls == []


def test_candidates_cut_by_the_budget_are_untested_not_short_of_tests():
    """Tests were given: a cut candidate is 'untested', the summary never says 'no tests given'."""
    session = fake_session(texts=[GOOD * 40] * 2, chunk=4, round_s=0.05)
    view = final(session, he0(budget=0.3))
    assert "no tests given" not in view.summary and "NO TESTS" not in view.candidates
    assert badges(view.candidates) == ["CUT AT TIME BUDGET · UNTESTED"] * 2
    assert "none of the 2 candidates finished to be tested" in view.summary
    assert view.best_label == "Best so far — unfinished (stopped or cut before it ended), untested"


def test_without_tests_the_summary_says_so():
    view = final(fake_session(), he0(tests=""))
    assert "no tests given" in view.summary and set(badges(view.candidates)) == {"RUNS · NO TESTS"}


def test_when_nothing_passes_the_best_is_labelled_best_so_far_and_not_outlined():
    view = final(fake_session(texts=[BAD, BAD + "    # still wrong\n"]), he0())
    assert view.best_label == "Best so far — failed 3/7 tests (nothing passed)"
    assert "bass-best" not in view.candidates
    passing = final(fake_session(), he0())
    assert passing.best_label == "Best candidate: passes 7/7 tests (copy it)" and "bass-best" in passing.candidates


def test_ranked_cards_keep_the_strip_and_each_has_a_copy_button():
    view = final(fake_session(), he0(k=4))
    assert view.candidates.count('class="bass-spark"') == 4
    assert view.candidates.count('class="bass-copy"') == 4
    copied = re.findall(r'<textarea hidden aria-hidden="true" tabindex="-1">(.*?)</textarea>', view.candidates, re.S)
    assert any(c.endswith(GOOD.replace("<", "&lt;")) for c in copied) and all("def has_close_elements" in c
                                                                               for c in copied)


def test_a_blank_seed_draws_a_new_one_each_run_and_runs_at_the_engines_draft_length():
    session = fake_session()
    seeded_view = final(session, he0(seed=7))
    fresh_views = [final(session, he0(seed=None)), final(session, he0(seed=""))]
    seeded, *fresh = session.engine.calls
    assert (seeded["draft_length"].policy, seeded["draft_length"].l0) == ("fixed", SEEDED_DRAFT_LENGTH.l0)
    assert seeded["params"].seed == 7 and "Seed 7 reproduces these candidates" in seeded_view.candidates
    drawn = [call["params"].seed for call in fresh]
    assert drawn[0] != drawn[1]  # a fresh draw per press
    for seed, call, view in zip(drawn, fresh, fresh_views):
        assert call["draft_length"] is None  # the engine's default: the draft length follows the batch
        assert f"fresh draws (seed {seed}, drafted at the lengths the engine picked for its load)" in view.candidates
        assert "reproduces" not in view.candidates  # nothing claims a seed the visitor never gave


def test_the_same_seed_gives_the_same_candidates_and_k_distinct_draws(tiny_dir):
    """A real (tiny, random) engine: two runs of seed 7 write the same three texts, which differ from each
    other; seed 8 writes others."""
    from bass import Engine

    path = str(tiny_dir("llama", 0, 6.0))
    session = EngineSession(env={}, factory=lambda config, progress: Engine(EngineConfig(target=path)))
    session.ensure()
    prompt = "def f(x):\n    " + "for i in range(10):\n        print(i)\n    " * 2

    def texts(seed):
        s = parse_settings(prompt, "", "completion", 3, 0.8, 0.95, 16, 0, METHOD_LABELS["bass"], "ngram", None,
                           None, seed)
        with open(final(session, s).download) as f:
            return [c["code"] for c in sorted(json.load(f)["candidates"], key=lambda c: c["seq"])]

    first, again, other = texts(7), texts(7), texts(8)
    assert first == again
    assert len(set(first)) == 3 and first != other


def test_chat_code_is_tested_and_copied_without_its_example_usage():
    answer = ("Here it is:\n```python\ndef add(a, b):\n    return a + b\n\n# Example usage:\nprint(add(2, 3))\n"
              "```\nThis prints 5.")
    session = fake_session(texts=[answer])
    s = parse_settings("Write a function add(a, b) that returns their sum", "assert add(2, 3) == 5\n", "auto", 1,
                       0.8, 0.95, 64, 0, METHOD_LABELS["bass"], None, None, None, 1)
    view = final(session, s)
    assert view.best_code == "def add(a, b):\n    return a + b"
    assert badges(view.candidates) == ["PASS"] and "print(add" not in view.candidates
    assert session.engine.calls[0]["prompts"].endswith(CHAT_INSTRUCTION)


def test_a_chat_prompt_that_asks_for_tests_is_told_where_tests_go():
    """The model is asked for code alone: a request for tests is not dropped in silence."""
    answer = "```python\ndef add(a, b):\n    return a + b\n```"
    session = fake_session(texts=[answer])
    s = parse_settings("Write a function add(a, b) that returns their sum, with tests", "", "auto", 1, 0.8, 0.95, 64,
                       0, METHOD_LABELS["bass"], None, None, None, 1)
    views = list(generate_views(session, s, threading.Event()))
    assert TESTS_GO_IN_THE_BOX in views[0].status and TESTS_GO_IN_THE_BOX in views[-1].candidates
    plain = list(generate_views(fake_session(texts=[answer]), parse_settings(
        "Write a function add(a, b) that returns their sum", "", "auto", 1, 0.8, 0.95, 64, 0, METHOD_LABELS["bass"],
        None, None, None, 1), threading.Event()))
    assert all("Unit tests box" not in v.status + v.candidates for v in plain)


def test_round_zero_shows_no_rate_and_counts_are_plural_aware():
    run = LiveRun(2)
    run.add(GenerationEvent("prefill", 0, 0.01, 4))
    run.add(GenerationEvent("round", 0, 0.0001, 4, (SequenceUpdate(0, (5,), "x", 0, 0, False, None),), ("x", "")))
    html = live_cards_html(run)
    assert "1 token<" in html and "tok/s" not in html
    assert (plural(1, "sequence"), plural(2, "sequence"), plural(0, "token")) == ("1 sequence", "2 sequences",
                                                                                   "0 tokens")


def test_wrapped_code_hangs_at_its_indentation():
    html = highlight("def f():\n    if x:\n        return 1\n")
    assert re.findall(r"--hang:(\d+)ch", html) == ["2", "6", "10"]


def test_charts_fix_colours_start_at_zero_fit_the_legend_and_fit_the_rounds_that_ran():
    rows = [(1, 3, seq_label(5)), (2, 1, seq_label(5)), (2, 4, DRAFT_LENGTH_SERIES)]
    frame = pd.DataFrame(rows, columns=["round", "accepted tokens", "sequence"])
    small, large = chart_look(frame, 8, x_is_round=True), chart_look(frame, 16, x_is_round=True)
    assert small.color_map[seq_label(5)] == large.color_map[seq_label(5)]  # the same colour whatever k is
    assert large.color_map[DRAFT_LENGTH_SERIES] == DRAFT_LENGTH_COLOUR
    assert DRAFT_LENGTH_COLOUR not in [large.color_map[seq_label(i)] for i in range(16)]
    assert len(set(large.color_map.values())) == 17
    assert small.y_lim == [0.0, 4 * 1.1] and small.x_lim == [0.0, 2.0]  # a run that ended at round 2
    assert small.x_format == "d"  # whole rounds only, however few
    assert large.height >= 19 * 17 + 90 > small.height >= 260
