"""The Gradio wiring, without a server: the layout builds, and view → component adapters behave."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

import gradio as gr
import pytest
from app_fakes import FakeEngine, fake_session

from app.generate import GenerateView, error_view, generate_views
from app.generate_status import idle_status
from app.problems import load_problems
from app.session import EngineSession, LoadState
from app.settings import ENGINE_DEFAULT, METHOD_LABELS, UserError, parse_settings
from app.ui import _live, _model_banner, build_demo, field_marks

ELEM_IDS = {"bass-problem", "bass-prompt", "bass-tests", "bass-generate", "bass-compare", "bass-stop", "bass-k",
            "bass-status", "bass-speed-plot", "bass-accept-plot", "bass-candidates", "bass-summary",
            "bass-best-code", "bass-compare-table", "bass-compare-charts", "bass-compare-sentence",
            "bass-compare-status", "bass-compare-budget", "bass-compare-note", "bass-compare-repeats",
            "bass-compare-natural"}


def test_layout_builds_with_every_component(session):
    demo = build_demo(session)
    assert isinstance(demo, gr.Blocks)
    ids = {getattr(block, "elem_id", None) for block in demo.blocks.values()}
    assert ids >= ELEM_IDS
    problem = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "bass-problem")
    assert len(problem.choices) == 164 and problem.choices[0][0] == "HumanEval/0 · has_close_elements"
    repeats = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "bass-compare-repeats")
    assert repeats.value == 1  # one timed run per method on a CPU (three on a GPU)


def test_banner_offers_the_engines_drafters_and_backends(session):
    banner, drafter, backend, timer = _model_banner(session)
    assert "Model ready" in banner and "on cpu (float32)" in banner
    assert [c[0] for c in drafter.choices] == ["ngram", "layer-skip"] and drafter.value == "ngram"
    assert [c[0] for c in backend.choices] == ["torch", "pad"] and backend.value == "torch"
    assert timer.active is False


def test_a_generate_clicked_while_the_model_loads_runs_the_engines_own_defaults():
    """Before the model has loaded, the page cannot know its drafters and backends: the dropdowns hold the engine's
    defaults, and a Generate clicked then runs with them (the trained draft with the embedded target), not a guess."""
    demo = build_demo(EngineSession(env={}, factory=lambda config, progress: FakeEngine(config, progress)))
    blocks = {getattr(b, "elem_id", None): b for b in demo.blocks.values()}
    assert blocks["bass-drafter"].value == blocks["bass-backend"].value == ENGINE_DEFAULT
    p = load_problems()[0]
    s = parse_settings(p.prompt, p.editable_tests(), "auto", 2, 0.8, 0.95, 16, 0, METHOD_LABELS["bass"],
                       blocks["bass-drafter"].value, blocks["bass-backend"].value, None, 0)
    assert (s.drafter, s.backend) == (None, None)  # the engine resolves None to its own default
    session = fake_session()
    final = list(generate_views(session, s, threading.Event()))[-1]
    assert final.error is None, final.status
    assert {k: session.engine.calls[-1][k] for k in ("drafter", "backend")} == {"drafter": None, "backend": None}


def _banner_once_loaded(session: EngineSession) -> str:
    """The model banner once the session's load has ended, in an engine or an error (2 s at most)."""
    session.ensure()
    for _ in range(200):
        if session.state().ready or session.state().error:
            break
        time.sleep(0.01)
    return _model_banner(session)[0]


def test_banner_shows_load_failure():
    def broken(config, progress):
        raise OSError("disk full")

    banner = _banner_once_loaded(EngineSession(env={}, factory=broken))
    assert "bass-error" in banner and "disk full" in banner


def test_banner_says_when_the_graphs_were_not_built_at_load():
    """A ready engine whose warm-up failed: the banner is the ready one, with the caveat beside the choices."""
    class Unwarmed(FakeEngine):
        captures_graphs = True

        def warm_draft_lengths(self, prompt, params, **kw):
            raise RuntimeError("CUDA out of memory")

    banner = _banner_once_loaded(EngineSession(env={}, factory=Unwarmed))
    assert "Model ready" in banner and "first runs may pause" in banner and "CUDA out of memory" in banner


def test_banner_while_not_loading_is_idle():
    session = EngineSession(env={}, factory=FakeEngine)
    assert "loads on the first Generate" in _model_banner(session)[0]


@pytest.mark.filterwarnings("ignore:The prompt is empty")  # gr.Warning outside a request only warns
def test_error_view_keeps_the_rest_of_the_screen():
    out = _live(error_view("The prompt is empty.", "type something"))
    assert "The prompt is empty." in out[0]
    assert all(isinstance(x, dict) and x.get("__type__") == "update" and len(x) == 1 for x in out[1:])


def test_live_view_hides_best_code_until_there_is_one():
    out = _live(GenerateView(status="s"))
    assert out[5].visible is False
    out = _live(GenerateView(status="s", best_code="def f(): pass"))
    assert out[5].visible is True and out[5].value == "def f(): pass"


def test_the_seed_box_starts_blank_so_that_each_run_draws_a_new_seed(session):
    """A number box shows and sends 0 when empty: every visitor's every run sampled seed 0."""
    blocks = {getattr(b, "elem_id", None): b for b in build_demo(session).blocks.values()}
    seed = blocks["bass-seed"]
    assert isinstance(seed, gr.Textbox) and seed.value == "" and seed.placeholder == "random"
    p = load_problems()[0]
    drawn = {parse_settings(p.prompt, "", "auto", 2, 0.8, 0.95, 16, 0, METHOD_LABELS["bass"], None, None, None,
                            seed.value).params.seed for _ in range(3)}
    assert len(drawn) == 3


def test_an_input_error_is_marked_at_its_field_and_only_there():
    ids = ["bass-prompt", "bass-tests", "bass-k", "bass-budget"]

    def refuse():
        raise UserError("Time budget (s) must be a number from 0 to 3600, got -5", "type …", "bass-budget")

    marks = field_marks(ids, refuse)
    assert [m["is_valid"] for m in marks] == [True, True, True, False]
    assert marks[3]["message"].startswith("Time budget (s) must be") and marks[0]["message"] == ""
    assert all(m["is_valid"] for m in field_marks(ids, lambda: None))


def test_the_status_says_ready_only_once_the_model_is():
    loading = LoadState(ready=False, loading=True, pair=None, message="loading weights", fraction=0.4, error=None)
    assert "Ready" not in idle_status(loading) and "still loading" in idle_status(loading)
    assert "Ready when you are." in idle_status(replace(loading, ready=True, loading=False))
    failed = replace(loading, loading=False, error="OSError: disk full")
    assert "Ready" not in idle_status(failed) and "could not be loaded" in idle_status(failed)
