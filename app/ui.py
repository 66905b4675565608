"""The Gradio layout and its wiring. Callbacks here only adapt widget values to the plain functions of
`app.generate` / `app.compare_run` / `app.session` and their views back to components."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

import gradio as gr

from app import render
from app.charts import ACCEPT_COLUMNS, ROUND_AXIS_FORMAT, SPEED_COLUMNS, chart_look
from app.compare_html import note_html
from app.compare_run import CompareView, compare_budget, compare_repeats, compare_views
from app.export import KEEP_S
from app.generate import GenerateView, error_view, generate_views
from app.generate_status import idle_status
from app.problems import Problem, find_problem, load_problems
from app.programs import STYLES
from app.session import EngineSession, hub_reachable, model_pairs
from app.settings import (
    DEFAULT_BUDGET_S,
    DEFAULT_K,
    DEFAULT_MAX_NEW_TOKENS,
    DEFAULT_TEMPERATURE,
    DEFAULT_TOP_P,
    ENGINE_DEFAULT,
    MAX_BUDGET_S,
    MAX_K,
    MAX_NEW_TOKENS,
    MAX_TEMPERATURE,
    METHOD_LABELS,
    MIN_TOP_P,
    UserError,
    parse_settings,
)
from bass.eval.compare import MAX_REPEATS

log = logging.getLogger("bass.app")

INTRO = """# BASS · k candidates at once
Batched speculative decoding writes **k** solutions side by side; a sandbox runs them against unit tests and
ranks them. Pick a HumanEval problem or type your own task, choose k, press **Generate**."""


_WAITING = render.status_html("Queued…", "waiting for a free slot on the server · Stop leaves the line")
_COMPARE_WAITING = render.status_html("Queued…", "starts as soon as the model is free (one comparison at a time)")
DEFAULT_CONCURRENCY = 8  # Generate requests handled at once; the engine batches them (BASS_CONCURRENCY)
# Bring the status (on Generate) and then the results (when the run ends) into view: at 1280 x 800 both sat below
# the fold, and nothing on screen changed when the button was pressed.
# The inputs pass through: an event's JavaScript hands its return value to the Python function as its inputs.
_SCROLL_TO = ("(...inputs) => {{ document.querySelector('{}')?.scrollIntoView({{behavior: 'smooth', block: 'start'}}); "
              "return inputs; }}")


def _problems() -> tuple[tuple[Problem, ...], str]:
    try:
        return load_problems(), ""
    except Exception as exc:  # the app still works with free prompts
        log.exception("HumanEval problems unavailable")
        return (), f"HumanEval problems unavailable ({exc}); free prompts still work."


def _gpu() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def _installed(target: str) -> bool:
    """Whether an offline model's packages are installed (a Space installs requirements.txt only)."""
    from bass.models.embedded import EMBEDDED, installed

    return target not in EMBEDDED or installed(target)


def _session_key(request: gr.Request | None) -> str:
    return getattr(request, "session_hash", None) or "local"


def build_demo(session: EngineSession, concurrency: int = DEFAULT_CONCURRENCY) -> gr.Blocks:
    """The whole app around one engine session; `concurrency` Generate requests run at once (Compare: one)."""
    problems, problems_note = _problems()
    gpu = _gpu()
    pairs = model_pairs(session.default_pair, gpu, online=gpu and hub_reachable(), installed=_installed)

    # Gradio serves each download from a copy in its cache: prune those copies on the schedule of our exports
    with gr.Blocks(title="BASS · multi-candidate coding assistant", fill_width=True,
                   delete_cache=(3600, int(KEEP_S))) as demo:
        gr.Markdown(INTRO, elem_id="bass-header")
        banner = gr.HTML(render.status_html("Starting…", kind="idle"), elem_id="bass-model-status")
        timer = gr.Timer(1.0)
        with gr.Row(equal_height=False):
            with gr.Column(scale=3):
                problem = gr.Dropdown(choices=[p.label for p in problems], value=None, filterable=True,
                                      label="HumanEval problem (type to search)", elem_id="bass-problem",
                                      info=problems_note or "fills in the prompt and its unit tests")
                prompt = gr.Textbox(label="Prompt", lines=8, max_lines=24, elem_id="bass-prompt",
                                    placeholder="Write a Python function that … — or pick a HumanEval problem")
                # A plain text box, not a code editor: the editor kept Tab for indenting, with no announced way out,
                # and read as "Code input container" to a screen reader.
                tests = gr.Textbox(lines=6, max_lines=20, elem_id="bass-tests",
                                   label="Unit tests (editable, optional: check(candidate) or plain asserts)",
                                   info="Python, checked before anything is generated; Tab moves to the next field")
                with gr.Row():
                    generate_btn = gr.Button("Generate", variant="primary", elem_id="bass-generate", scale=2)
                    compare_btn = gr.Button("Compare methods", elem_id="bass-compare", min_width=170)
                    stop_btn = gr.Button("Stop", variant="stop", elem_id="bass-stop")
            with gr.Column(scale=2):
                # Number boxes without minimum/maximum: out-of-range values reach `parse_settings`, which names
                # the field and its range. Sliders clamped them in silence (k 99 → 16), Gradio's own bounds
                # answered with a toast naming no field.
                with gr.Row():
                    k = gr.Number(value=DEFAULT_K, label=f"k · candidates (1–{MAX_K})", elem_id="bass-k")
                    max_new = gr.Number(value=DEFAULT_MAX_NEW_TOKENS, label=f"Max new tokens (1–{MAX_NEW_TOKENS})",
                                        elem_id="bass-max-new")
                method = gr.Radio(list(METHOD_LABELS.values()), value=METHOD_LABELS["bass"], label="Method",
                                  elem_id="bass-method")
                with gr.Row():
                    temperature = gr.Number(value=DEFAULT_TEMPERATURE, step=0.05, elem_id="bass-temperature",
                                            label=f"Temperature (0 = greedy, up to {MAX_TEMPERATURE:g})")
                    top_p = gr.Number(value=DEFAULT_TOP_P, step=0.01, label=f"Top-p ({MIN_TOP_P:g}–1)",
                                      elem_id="bass-top-p")
                with gr.Row():
                    budget = gr.Number(value=DEFAULT_BUDGET_S, label=f"Time budget (s, 0 = none, up to {MAX_BUDGET_S})",
                                       elem_id="bass-budget")
                    # A text box: a number box shows and sends 0 when it is empty, so every visitor got seed 0
                    seed = gr.Textbox(value="", max_lines=1, label="Seed (blank = a new one each run)",
                                      elem_id="bass-seed", placeholder="random")
                stop_note = gr.HTML(elem_id="bass-stop-note")
                stop_first = gr.Checkbox(False, label="Stop at the first pass", elem_id="bass-stop-first",
                                         info="once a candidate passes every test, the others stop (kept, untested)")
                with gr.Row():
                    # the engine's defaults until the model is loaded, then its own choices (`_model_banner`)
                    default = [(f"{ENGINE_DEFAULT} (the model's default)", ENGINE_DEFAULT)]
                    drafter = gr.Dropdown(default, value=ENGINE_DEFAULT, label="Drafter", interactive=True,
                                          elem_id="bass-drafter")
                    backend = gr.Dropdown(default, value=ENGINE_DEFAULT, label="Attention backend", interactive=True,
                                          elem_id="bass-backend")
                pair = gr.Dropdown([p.label for p in pairs], value=pairs[0].label, label="Model pair",
                                   info="target ← draft; hub pairs appear with a GPU and internet")
                style = gr.Radio(list(STYLES), value="auto", label="Prompt style", elem_id="bass-style",
                                 info="completion: continue code (HumanEval); chat: instruct answer with a code "
                                      "block; auto decides from the prompt")
        with gr.Tabs(selected="live") as tabs:
            with gr.Tab("Live & ranked", id="live"):
                # what it says before the visitor's first run follows the model's load (`idle_status`)
                status = gr.HTML(render.status_html("Starting…", kind="idle"), elem_id="bass-status")
                idle = gr.State(True)  # no run pressed yet in this browser session
                with gr.Row():
                    speed_plot = gr.LinePlot(x=SPEED_COLUMNS[0], y=SPEED_COLUMNS[1], color=SPEED_COLUMNS[2],
                                             title="Tokens/s per sequence (average since decoding began)",
                                             height=260, elem_id="bass-speed-plot", x_title="time (s)")
                    accept_plot = gr.LinePlot(x=ACCEPT_COLUMNS[0], y=ACCEPT_COLUMNS[1], color=ACCEPT_COLUMNS[2],
                                              x_axis_format=ROUND_AXIS_FORMAT,
                                              title="Draft tokens accepted per round, by sequence (and draft length L)",
                                              height=260, elem_id="bass-accept-plot")
                summary = gr.HTML(elem_id="bass-summary")
                best = gr.Code(language="python", label="Best candidate", interactive=False, lines=4,
                               elem_id="bass-best-code", buttons=["copy", "download"], visible=False)
                candidates = gr.HTML(elem_id="bass-candidates")
                download = gr.DownloadButton("Download candidates (JSON)", visible=False, size="sm")
            with gr.Tab("Compare methods", id="compare"):
                gr.Markdown("Runs the prompt with the same seed, k and token limit under **BASS**, **regular "
                            "batched decoding** and **single-sequence speculative decoding**, one after another, "
                            "each alone on the model, after an untimed warm-up. Every method does the same work: "
                            "each candidate runs to the token limit, then is cut at its first stop for display and "
                            "the tests. With unit tests, one normal run of each method then gives the time to the "
                            "first passing candidate. The Generate tab's budget and stop at the first pass do not "
                            "apply.")
                with gr.Row():
                    cmp_budget = gr.Number(value=0, label="Time budget per method (s, 0 = none)", precision=1,
                                           elem_id="bass-compare-budget", min_width=220)
                    cmp_repeats = gr.Number(value=3 if gpu else 1, precision=0, elem_id="bass-compare-repeats",
                                            label=f"Timed runs per method (1–{MAX_REPEATS}; the table shows the "
                                                  "median)", min_width=220)
                    cmp_natural = gr.Checkbox(False, label="Natural stops", elem_id="bass-compare-natural",
                                              info="end of text and stop strings end each candidate: the methods' "
                                                   "lengths differ, compared in tokens per second")
                cmp_status = gr.HTML(render.status_html("Press “Compare methods”.", kind="idle"),
                                     elem_id="bass-compare-status")
                cmp_sentence = gr.HTML(elem_id="bass-compare-sentence")
                cmp_table = gr.Dataframe(label="Per-method results (× regular: speed-up over regular decoding)",
                                         interactive=False, elem_id="bass-compare-table", wrap=True)
                cmp_charts = gr.HTML(elem_id="bass-compare-charts")
                gr.HTML(note_html(), elem_id="bass-compare-note")
                with gr.Row():
                    csv_btn = gr.DownloadButton("Download CSV", visible=False, size="sm")
                    json_btn = gr.DownloadButton("Download JSON", visible=False, size="sm")

        settings_inputs = [prompt, tests, style, k, temperature, top_p, max_new, budget, method, drafter, backend,
                           pair, seed, stop_first]
        live_outputs = [status, candidates, speed_plot, accept_plot, summary, best, download]
        cmp_outputs = [cmp_status, cmp_sentence, cmp_table, cmp_charts, csv_btn, json_btn]

        def show_problem(label: str | None):
            chosen = find_problem(label, problems)
            if chosen is None:
                return gr.skip(), gr.skip(), gr.skip()
            return chosen.prompt, chosen.editable_tests(), "auto"

        # The request comes first: Gradio passes gr.Request only to positional parameters, and without it
        # every run was registered under one shared key that the Stop button (which has the request) never used.
        def on_generate(request: gr.Request, *values) -> Iterator[tuple]:
            yield from _stream(session, values, request, generate_views, _live,
                               lambda exc: error_view(exc.message, exc.hint))

        def on_compare(request: gr.Request, budget_value, repeats_value, natural: bool, *values) -> Iterator[tuple]:
            def views(session, settings, cancel):
                return compare_views(session, settings, cancel, budget_s=compare_budget(budget_value),
                                     repeats=compare_repeats(repeats_value), equal_work=not natural)

            def on_bad_input(exc: UserError) -> CompareView:
                return CompareView(status=render.error_html(exc.message, exc.hint), error=exc.message)

            try:
                compare_budget(budget_value)
                compare_repeats(repeats_value)
            except UserError as exc:
                yield _cmp(on_bad_input(exc))
                return
            yield from _stream(session, values, request, views, _cmp, on_bad_input)

        def on_stop(request: gr.Request = None) -> tuple:
            return stop_feedback(session.cancel(_session_key(request)))

        def on_tick(no_run_yet: bool):
            return *_model_banner(session), (idle_status(session.state()) if no_run_yet else gr.skip())

        def on_pair(label: str):
            try:
                session.ensure(session.find_pair(label))
            except RuntimeError as exc:
                gr.Warning(str(exc))
            return gr.Timer(active=True)

        problem.change(show_problem, problem, [prompt, tests, style], queue=False)
        # Out of the queue, at once: switch to the tab and say the request is in line. The queued handler's
        # first update replaces the note as soon as it starts (at once, unless another visitor is running).
        # The run's cancel event is registered here, before the run waits for a free slot, so that a Stop
        # pressed while it waits (in the page's queue or in the engine's) ends it before it starts.
        # Invalid settings end here: the status box says what and what to do, the validator of the queued run
        # (`field_marks`) marks the field, and nothing runs.
        def on_generate_clicked(request: gr.Request, *values):
            try:
                parse_settings(*values)
            except UserError as exc:
                return gr.Tabs(selected="live"), render.error_html(exc.message, exc.hint), "", False
            session.new_cancel(_session_key(request))
            return gr.Tabs(selected="live"), _WAITING, "", False

        def generate_marks(*values) -> list[dict]:
            return field_marks([c.elem_id for c in settings_inputs], lambda: parse_settings(*values))

        def check_compare(budget_value, repeats_value, values) -> None:
            compare_budget(budget_value)
            compare_repeats(repeats_value)
            parse_settings(*values)

        def compare_marks(budget_value, repeats_value, natural: bool, *values) -> list[dict]:
            ids = [cmp_budget.elem_id, cmp_repeats.elem_id, cmp_natural.elem_id, *(c.elem_id for c in settings_inputs)]
            return field_marks(ids, lambda: check_compare(budget_value, repeats_value, values))

        def on_compare_clicked(budget_value, repeats_value, natural: bool, *values):
            try:
                check_compare(budget_value, repeats_value, values)
            except UserError as exc:
                return gr.Tabs(selected="compare"), render.error_html(exc.message, exc.hint), False
            return gr.Tabs(selected="compare"), _COMPARE_WAITING, False

        # Several visitors generate at once: the engine batches their requests, each with its own stream and
        # cancel event. Beyond `concurrency` they wait in the page's queue ("Queued…" in the status box). No
        # Gradio progress on the run: its running timer redraws continuously on the visitor's CPU, and the status
        # box shows the phase, the place in line and the time itself.
        generate_btn.click(on_generate_clicked, settings_inputs, [tabs, status, stop_note, idle], queue=False,
                           js=_SCROLL_TO.format("#bass-status")).then(
            on_generate, settings_inputs, live_outputs, validator=generate_marks, concurrency_limit=concurrency,
            concurrency_id="generate", show_progress="hidden").then(
            None, js=_SCROLL_TO.format("#bass-summary"))
        # Compare measures the methods one after another, alone on the engine: one comparison at a time.
        compare_inputs = [cmp_budget, cmp_repeats, cmp_natural, *settings_inputs]
        compare_btn.click(on_compare_clicked, compare_inputs, [tabs, cmp_status, idle], queue=False)
        compare_btn.click(on_compare, compare_inputs, cmp_outputs, validator=compare_marks, concurrency_limit=1,
                          concurrency_id="compare", show_progress="minimal", show_progress_on=cmp_status)
        stop_btn.click(on_stop, None, [status, stop_note], queue=False)
        # Out of the queue: a long generation must not hold up the model banner or the problem picker.
        banner_outputs = [banner, drafter, backend, timer, status]
        timer.tick(on_tick, idle, banner_outputs, show_progress="hidden", queue=False)
        demo.load(on_tick, idle, banner_outputs, show_progress="hidden", queue=False)
        pair.change(on_pair, pair, timer, queue=False)
    return demo


def field_marks(field_ids: list[str | None], check: Callable[[], object]) -> list[dict]:
    """Gradio's validation marks, one per input (`field_ids`: their elem_ids): the field that `check` raises a
    UserError about shows its message under its label, and the run does not start."""
    try:
        check()
    except UserError as exc:
        return [gr.validate(field != exc.field, exc.message if field == exc.field else "") for field in field_ids]
    return [gr.validate(True, "") for _ in field_ids]


def _stream(session: EngineSession, values: tuple, request: gr.Request | None, views: Callable,
            adapt: Callable[[object], tuple], on_bad_input: Callable[[UserError], object]) -> Iterator[tuple]:
    """Validate the widgets, then stream a flow's views as component updates, with this browser session's
    cancel event registered for the Stop button while it runs."""
    try:
        settings = parse_settings(*values)
    except UserError as exc:
        yield adapt(on_bad_input(exc))
        return
    key = _session_key(request)
    cancel = session.claim_cancel(key)
    try:
        for view in views(session, settings, cancel):
            yield adapt(view)
    finally:
        session.release_cancel(key, cancel)


def _model_banner(session: EngineSession) -> tuple:
    """Banner + drafter/backend choices from the loaded engine; the timer stops once the model is ready."""
    state = session.state()
    if state.error:
        return (render.error_html(f"Loading the model failed: {state.error}", session.failure_hint()),
                gr.skip(), gr.skip(), gr.Timer(active=False))
    if not state.ready:
        if not state.loading:
            return (render.status_html("The model loads on the first Generate.", kind="idle"), gr.skip(), gr.skip(),
                    gr.Timer(active=False))
        return (render.status_html("Preparing the model (once per process)…", state.message, state.fraction),
                gr.skip(), gr.skip(), gr.Timer(active=True))
    engine = session.engine
    drafters = engine.available_drafters()
    backends = engine.available_backends()
    wanted = engine.default_drafter if engine.config.drafter == "auto" else engine.config.drafter
    drafter = wanted if wanted in drafters else drafters[0]
    backend = engine.backend if engine.backend in backends else backends[0]
    text = f"Model ready: {state.pair.label} on {engine.device} ({str(engine.dtype).removeprefix('torch.')})"
    detail = f"drafters: {', '.join(drafters)} · attention backends: {', '.join(backends)}"
    return (render.status_html(text, f"{detail} · {state.note}" if state.note else detail, kind="ok"),
            gr.Dropdown(choices=drafters, value=drafter), gr.Dropdown(choices=backends, value=backend),
            gr.Timer(active=False))


def stop_feedback(stopped: bool) -> tuple:
    """What Stop says on the page (status box, note under the buttons): the run it ends is this visitor's."""
    if stopped:
        return (render.status_html("Stopping your run…", "it ends after the current round, or leaves the line if it "
                                   "was waiting; other visitors' runs go on"), "")
    return gr.skip(), '<div class="bass-note" role="status">Nothing is running for you right now.</div>'


def _live(view: GenerateView) -> tuple:
    if view.error:
        # Keep what is on screen (partial candidates, charts) and only show what went wrong.
        gr.Warning(view.error)
        return (view.status,) + (gr.skip(),) * 6
    return (view.status, view.candidates, _line(view.speed, view.k), _line(view.accept, view.k, x_is_round=True),
            view.summary, gr.Code(value=view.best_code, visible=bool(view.best_code), label=view.best_label),
            gr.DownloadButton(value=view.download, visible=view.download is not None))


def _line(frame, k: int, x_is_round: bool = False) -> gr.LinePlot:
    # The plot fixes its colour domain when its props change, not when only its data does: naming the
    # series in the legend on every update makes a line appear for each sequence as soon as it has data.
    look = chart_look(frame, max(k, 1), x_is_round)
    return gr.LinePlot(value=frame, colors_in_legend=look.legend, color_map=look.color_map, y_lim=look.y_lim,
                       x_lim=look.x_lim, height=look.height, x_axis_format=look.x_format)


def _cmp(view: CompareView) -> tuple:
    if view.error:
        gr.Warning(view.error)
        if view.table.empty:  # nothing new to show: keep the previous comparison on screen
            return (view.status,) + (gr.skip(),) * 5
    return (view.status, view.sentence, view.table, view.charts,
            gr.DownloadButton(value=view.csv_path, visible=view.csv_path is not None),
            gr.DownloadButton(value=view.json_path, visible=view.json_path is not None))
