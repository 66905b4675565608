"""What the Generate tab's status line and best-candidate box say at each phase. Pure text from events and
settings, so that tests read exactly what a visitor reads.

Phases: before the visitor's first run (the model's load), in line (the engine's "queued" events: place and wait
estimate), decoding (round, draft length, acceptance, verdicts so far), stopping (Stop pressed: the run ends after
its round, or leaves the line), done.
"""

from __future__ import annotations

from app import render
from app.charts import LiveRun
from app.ranking import PassSummary, RankedCandidate
from app.session import LoadState
from app.settings import TESTS_GO_IN_THE_BOX, RunSettings
from bass.events import FINISHED_IN_TIME


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def idle_status(state: LoadState) -> str:
    """The status box before this visitor's first run: "Ready" only once the model is."""
    if state.error:
        return render.status_html("The model could not be loaded (the box above says why): nothing can run yet.",
                                  kind="idle")
    if state.ready:
        return render.status_html("Ready when you are.", kind="idle")
    if state.loading:
        return render.status_html("The model is still loading (progress above): a run you start now begins when "
                                  "it is ready.", state.message, kind="idle")
    return render.status_html("The model loads when you press Generate.", kind="idle")


def queued_status(event, stopping: bool = False) -> str:
    """A request waiting in the engine's line: its place (1 = next), how long it waited, the wait ahead.

    `event`: the engine's "queued" event (`queue_position`, 1-based; `wait_estimate_s`, None when unknown;
    `time_s`, seconds waited so far)."""
    position = getattr(event, "queue_position", None)
    estimate = getattr(event, "wait_estimate_s", None)
    if stopping:
        return render.status_html("Stopping: leaving the line…", "nothing of this run was generated")
    place = f"you are {_ordinal(position)} in line" if position else "you are in line"
    wait = (f"about {estimate:.0f} s to wait" if estimate is not None and estimate >= 1 else
            "starting in a moment" if estimate is not None else "the model is busy with other visitors' runs")
    detail = f"{wait} · waited {event.time_s:.0f} s · other visitors' runs share the model · Stop leaves the line"
    return render.status_html(f"Waiting in line: {place}", detail)


def decoding_status(run: LiveRun, s: RunSettings, method: str, verdicts: dict, stopping: bool = False) -> str:
    """Round, draft length, acceptance, finished and tested counts, and the progress towards the token limit
    (or the time budget, whichever is nearer). A long prompt first: how much of it the model has read."""
    if run.phase == "prefilling" and run.prefilled:
        read, total = run.prefilled
        title = "Stopping… (your run only)" if stopping else "Reading your prompt…"
        detail = (f"{read:,} of {total:,} prompt tokens read · {run.time_s:.1f} s "
                  "(other visitors keep decoding meanwhile)")
        return render.status_html(title, detail, read / max(total, 1))
    done = sum(run.finished)
    fraction = max(run.tokens) / s.params.max_new_tokens if run.tokens else 0.0
    if s.params.time_budget_s:
        fraction = max(fraction, run.time_s / s.params.time_budget_s)
    acc = [a for a in (run.acceptance(i) for i in range(run.k)) if a is not None]
    detail = f"{method} · round {run.round}"
    if s.method != "regular":
        detail += f" · draft length L = {run.draft_length}"
        if acc:
            detail += f" · acceptance {sum(acc) / len(acc):.0%}"
    detail += f" · {done}/{run.k} finished"
    if verdicts:
        passed = sum(v.passed for v in verdicts.values())
        detail += f" · {len(verdicts)} tested, {passed} pass"
    detail += f" · {run.time_s:.1f} s"
    title = "Stopping after the current round… (your run only)" if stopping else "Generating…"
    return render.status_html(title, detail, min(1.0, fraction))


def best_label(best: RankedCandidate | None, summary: PassSummary) -> str:
    """The title of the best-candidate box: a pass says so; otherwise it is the best so far, and why."""
    if best is None:
        return "Best candidate"
    rep = best.report
    unfinished = best.finish_reason not in FINISHED_IN_TIME
    if best.passed:
        return f"Best candidate: passes {rep.tests_passed}/{rep.tests_total} tests (copy it)"
    if summary.tested and rep is not None:
        return f"Best so far — failed {rep.tests_passed}/{rep.tests_total} tests (nothing passed)"
    if unfinished:
        return "Best so far — unfinished (stopped or cut before it ended), untested"
    if summary.tested:
        return "Best so far — untested"
    return "Best candidate (no tests given: it runs)" if best.status == "ran" else "Best so far (no tests given)"


def final_note(s: RunSettings, cancelled: bool, stopped_at_pass: bool) -> str:
    """The line above the ranked cards: where tests go (when the prompt asked the model for them), how the cards
    are ordered, what a Stop left, and the seed that reproduces them (only a seed the visitor set does)."""
    note = f"{TESTS_GO_IN_THE_BOX} " if s.tests_requested else ""
    note += ("Stopped: the candidates as far as they got; those still decoding were not tested." if cancelled else
             "Ranked: passing candidates first, then by tests passed, then by who finished first.")
    if stopped_at_pass and not cancelled:
        note += " Stopped at the first pass: the others keep what they had generated, untested."
    if s.style == "completion":
        note += " Cards show the generated body; the best candidate above is the whole function."
    elif s.chat:
        note += " The code is the answer's code block, without its example usage."
    if s.params.greedy and s.k > 1:
        note += (f" Temperature 0 decodes greedily, so the {s.k} candidates are one text: raise the temperature for "
                 "different ones.")
    elif s.seed_given:
        note += (f" Seed {s.params.seed} reproduces these candidates (drafting with a fixed length "
                 f"L = {s.draft_length.l0}); each of the k is its own draw.")
    else:
        note += (f" No seed was set, so these are fresh draws (seed {s.params.seed}, drafted at the lengths the "
                 "engine picked for its load): set a seed to get candidates you can reproduce.")
    return note


def queued_then_stopped(run: LiveRun, cancelled: bool) -> bool:
    """Stop came while the run waited in line or its prompt was being read: nothing was decoded."""
    return cancelled and run.phase in ("waiting", "queued", "done") and run.round == 0 and not any(run.tokens)
