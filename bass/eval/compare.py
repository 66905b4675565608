"""A fair comparison of decoding methods, and the one sentence and table that report it (app and CLI alike).

Fairness: every method gets the same request (prompt, k, seed, token limit, stop strings; a time budget only
when the caller sets one), runs alone on the engine (`exclusive`), and drafts a fixed length
(`SEEDED_DRAFT_LENGTH`), so that the seed decides the candidates.

A method's run is *complete* when every candidate ended by itself (end of text, a stop string, the token
limit); *cut* when the time budget ended one; *stopped* when a Stop (cancel) did. Only two complete runs are
compared: a partial run is reported, never a baseline. With n_m generated tokens in w_m seconds (prefill
plus decoding, as the engine measures them; time spent waiting in line is left out):

    wall rate   r_m = n_m / w_m                       speed-up over regular (wall)  = r_m / r_regular
    per token   t_m = mean over sequences of (finish time / tokens)   speed-up (per token) = t_regular / t_m

With equal token counts the wall speed-up is w_regular / w_m. Stop strings end each method's candidates at
different lengths (their sampled texts differ); the sentence then says it compares tokens per second of
wall time, and gives both counts.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from bass.config import METHODS, DraftLengthConfig, SamplingParams, check_k
from bass.eval.verdicts import Checker, VerdictWorker, submit_finished
from bass.events import GenerationEvent, GenerationResult
from bass.metrics import format_seconds, format_seconds_or_none, time_to_first_pass

COMPARE_METHODS = ("bass", "regular", "single")
SHORT_NAMES = {"bass": "BASS", "regular": "regular", "single": "single-seq"}
LONG_NAMES = {"bass": "BASS", "regular": "regular decoding", "single": "single-sequence speculative decoding"}
# A fixed draft length makes a seed reproduce the candidates: a different length consumes the random stream
# differently (`bass.decode.round`, random numbers). The engine's default follows the batch.
SEEDED_DRAFT_LENGTH = DraftLengthConfig("fixed", l0=3)
SAME_SPEED = 0.05  # ratios within this of 1 read "about as fast as"

NOTE = (
    "wall time: from the request to the last candidate (prefill included); the wall speed-up is tokens per "
    "second of wall time over regular decoding's.",
    "ms/token: per sequence, its finish time / its tokens, averaged over the k sequences (the paper's latency).",
    "acceptance: the share of drafted tokens the model kept; tokens/round: tokens each sequence gains per "
    "verify pass (1 for regular decoding).",
    "single-seq decodes one candidate at a time: each is fast per token while it runs, so it can win in "
    "ms/token, but the k candidates wait for one another, so it loses in wall time; BASS drafts for all k at once.",
    "cut / stopped: a time budget or Stop ended the run early; its unfinished candidates are untested and "
    "it is never a baseline.",
)


def method_name(method: str) -> str:
    """The short name of a method in tables and charts."""
    return SHORT_NAMES.get(method, method)


@dataclass(frozen=True)
class CompareRequest:
    """What every method of a comparison runs: one prompt, k samples, the same sampling parameters."""

    prompt: str
    k: int
    params: SamplingParams
    methods: tuple[str, ...] = COMPARE_METHODS
    drafter: str | None = None
    backend: str | None = None
    chat: bool = False
    draft_length: DraftLengthConfig | None = SEEDED_DRAFT_LENGTH

    def __post_init__(self) -> None:
        if not self.prompt.strip():
            raise ValueError("the prompt is empty: give a coding prompt to compare the methods on")
        check_k(self.k)
        bad = [m for m in self.methods if m not in METHODS]
        if bad or not self.methods or len(set(self.methods)) != len(self.methods):
            raise ValueError(f"methods must be distinct names of {', '.join(METHODS)}; got {', '.join(self.methods)}")


@dataclass(frozen=True)
class MethodRun:
    """One method's run: the engine's result, its wall time, and per candidate whether it passed (None:
    untested, as a candidate cut before its end is); `passed` is None when no tests were given."""

    method: str
    result: GenerationResult
    wall_s: float
    passed: tuple[bool | None, ...] | None = None
    budget_s: float | None = None  # the time budget it ran under (None: none)

    def __post_init__(self) -> None:
        if self.wall_s < 0:
            raise ValueError(f"wall_s must be >= 0 seconds, got {self.wall_s}")
        if self.passed is not None and len(self.passed) != len(self.result.candidates):
            raise ValueError(f"{len(self.passed)} verdicts for {len(self.result.candidates)} candidates")

    @property
    def state(self) -> str:
        """complete | cut (the time budget ended a candidate) | stopped (a Stop did)."""
        reasons = {c.finish_reason for c in self.result.candidates}
        return "stopped" if "cancelled" in reasons else "cut" if "budget" in reasons else "complete"

    @property
    def status(self) -> str:
        """The state as the table shows it: 'complete', 'cut at 120 s', 'stopped at 4.2 s'."""
        if self.state == "cut":
            return f"cut at {self.budget_s:g} s" if self.budget_s else "cut by the time budget"
        return f"stopped at {format_seconds(self.wall_s)}" if self.state == "stopped" else "complete"

    @property
    def tokens(self) -> int:
        return self.result.stats.tokens

    @property
    def wall_tok_s(self) -> float:
        """Generated tokens per second of wall time."""
        return self.tokens / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def first_pass_s(self) -> float | None:
        """Time to first pass (None: nothing passed, or no tests)."""
        if self.passed is None:
            return None
        times = [c.finish_time_or_none for c in self.result.candidates]
        return time_to_first_pass(self.result.stats.prefill_s, times, self.passed)

    @property
    def passing(self) -> str:
        """'2/3 pass, 1 untested' (of the tested candidates, those that passed; then those never tested, as a
        candidate cut before its end is), '4 untested', or 'no tests'."""
        if self.passed is None:
            return "no tests"
        tested = [p for p in self.passed if p is not None]
        untested = len(self.passed) - len(tested)
        if not tested:
            return f"{untested} untested"
        return f"{sum(tested)}/{len(tested)} pass" + (f", {untested} untested" if untested else "")


def exclusive_kwargs(stream: Callable) -> dict:
    """`{"exclusive": True}` where the engine's `stream` takes it (a method measured alone, not batched with
    other visitors' requests); an engine that serialises every request on a lock runs it alone anyway."""
    try:
        return {"exclusive": True} if "exclusive" in inspect.signature(stream).parameters else {}
    except (TypeError, ValueError):
        return {}


def stream_method(engine, req: CompareRequest, method: str,
                  cancel: threading.Event | None = None) -> Iterator[GenerationEvent]:
    """One method's events for the request, the engine running it alone."""
    return engine.stream(req.prompt, k=req.k, params=req.params, method=method, drafter=req.drafter,
                         backend=req.backend, draft_length=req.draft_length, chat=req.chat, cancel=cancel,
                         **exclusive_kwargs(engine.stream))


def engine_wall_s(result: GenerationResult) -> float:
    """Prefill plus decoding as the engine timed them: the run's wall time without any wait in line."""
    return result.stats.prefill_s + result.stats.decode_s


@dataclass(frozen=True)
class Comparison:
    """The runs of a comparison by method, and the methods that failed with why."""

    runs: Mapping[str, MethodRun]
    failures: Mapping[str, str]

    @property
    def sentence(self) -> str:
        return sentence(self.runs, self.failures)

    @property
    def rows(self) -> list[Row]:
        return table_rows(self.runs)


def run_comparison(engine, req: CompareRequest, check: Checker | None = None,
                   cancel: threading.Event | None = None, log: Callable[[str], None] | None = None) -> Comparison:
    """Run each method in turn and test each candidate the moment it finishes (`check`: None for no tests).
    A method the engine refuses (a drafter it lacks, say) is a failure; the others still run; a cancel
    ends the run in progress (its row marked stopped) and skips the rest."""
    runs: dict[str, MethodRun] = {}
    failures: dict[str, str] = {}
    for method in req.methods:
        if cancel is not None and cancel.is_set():
            break
        worker = VerdictWorker(check, bool) if check is not None else None
        result = None
        try:
            for event in stream_method(engine, req, method, cancel):
                if worker is not None:
                    submit_finished(worker, event)
                if event.kind == "done":
                    result = event.result
        except ValueError as exc:
            failures[method] = str(exc)
            continue
        finally:
            if worker is not None:
                worker.close()
        if result is None or not any(c.stats.tokens for c in result.candidates):
            continue  # stopped while waiting in line: nothing ran
        passed = None if worker is None else tuple(
            worker.verdicts[i].passed if i in worker.verdicts else None for i in range(len(result.candidates)))
        runs[method] = MethodRun(method, result, engine_wall_s(result), passed, req.params.time_budget_s)
        if log:
            log(f"{method_name(method)}: {runs[method].status}, {runs[method].tokens} tokens in "
                f"{format_seconds(runs[method].wall_s)}")
    return Comparison(runs, failures)


def warm_up(engine, req: CompareRequest) -> None:
    """An untimed run of each method, then the engine left to capture the CUDA graphs they queued
    (`Scheduler.settle`), so that one-time costs (graph capture, the first kernel launches) fall on no
    method's clock: the methods run back to back, where the engine never idles to capture them."""
    from dataclasses import replace

    untimed = replace(req, params=replace(req.params, time_budget_s=None))
    for method in req.methods:
        try:
            for _ in stream_method(engine, untimed, method):
                pass
        except ValueError:
            continue  # the timed run reports the method's failure
    settle = getattr(getattr(engine, "scheduler", None), "settle", None)
    if settle is not None:
        settle()


def complete(runs: Mapping[str, MethodRun]) -> dict[str, MethodRun]:
    """The runs that may be compared (`MethodRun.state` complete)."""
    return {m: r for m, r in runs.items() if r.state == "complete"}


@dataclass(frozen=True)
class Row:
    """One method's line of the table; speed-ups are None unless it and regular decoding are complete."""

    method: str
    status: str
    tokens: int
    wall_s: float
    wall_tok_s: float
    wall_speed_up: float | None
    first_pass_s: float | None
    passing: str
    ms_per_token: float
    token_speed_up: float | None
    acceptance: float | None
    tokens_per_round: float
    prefill_s: float
    sequences: int


# header -> how a Row's field reads; the first columns are those a reader needs, in the order they read
COLUMNS: dict[str, Callable[[Row], str]] = {
    "method": lambda r: r.method,
    "status": lambda r: r.status,
    "tokens": lambda r: str(r.tokens),
    "wall": lambda r: format_seconds(r.wall_s),
    "tok/s (wall)": lambda r: f"{r.wall_tok_s:.1f}",
    "× regular (wall)": lambda r: _ratio(r.wall_speed_up),
    "first pass": lambda r: "—" if r.passing == "no tests" else format_seconds_or_none(r.first_pass_s),
    "passing": lambda r: r.passing,
    "ms/token": lambda r: f"{r.ms_per_token:.1f}",
    "× regular (ms/token)": lambda r: _ratio(r.token_speed_up),
    "acceptance": lambda r: "—" if r.acceptance is None else f"{r.acceptance:.0%}",
    "tokens/round": lambda r: f"{r.tokens_per_round:.2f}",
}


def table_rows(runs: Mapping[str, MethodRun]) -> list[Row]:
    """One row per method, in COMPARE_METHODS order."""
    base = complete(runs).get("regular")
    rows = []
    for method in sorted(runs, key=lambda m: COMPARE_METHODS.index(m) if m in COMPARE_METHODS else len(runs)):
        run = runs[method]
        stats = run.result.stats
        fair = base is not None and run.state == "complete"
        rows.append(Row(
            method=method_name(method), status=run.status, tokens=run.tokens, wall_s=run.wall_s,
            wall_tok_s=run.wall_tok_s,
            wall_speed_up=run.wall_tok_s / base.wall_tok_s if fair and base.wall_tok_s > 0 else None,
            first_pass_s=run.first_pass_s, passing=run.passing, ms_per_token=stats.mean_ms_per_token,
            token_speed_up=(base.result.stats.mean_ms_per_token / stats.mean_ms_per_token
                            if fair and stats.mean_ms_per_token > 0 else None),
            acceptance=stats.acceptance_rate if stats.proposed else None,
            tokens_per_round=stats.tokens_per_round, prefill_s=stats.prefill_s, sequences=len(run.result.candidates)))
    return rows


def table_cells(rows: Sequence[Row]) -> list[list[str]]:
    """The rows as the text both the app and the CLI show, one list per row in COLUMNS order."""
    return [[show(r) for show in COLUMNS.values()] for r in rows]


def format_table(rows: Sequence[Row]) -> str:
    """A plain-text table for a terminal."""
    cells = [list(COLUMNS)] + table_cells(rows)
    widths = [max(len(line[i]) for line in cells) for i in range(len(COLUMNS))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in cells)


def sentence(runs: Mapping[str, MethodRun], failures: Mapping[str, str] | None = None) -> str:
    """The comparison in one sentence a stakeholder can repeat: BASS against each complete method in wall
    time, then the first passing candidate of each; partial runs are named as such, never compared."""
    failures = failures or {}
    bass = runs.get("bass")
    if bass is None:
        why = f" ({failures['bass']})" if "bass" in failures else ""
        return f"BASS did not run{why}, so there is nothing to compare."
    k = len(bass.result.candidates)
    if bass.state != "complete":
        return (f"No speed-up is claimed: BASS was {bass.status} before its {k} candidates finished "
                f"({bass.tokens} tokens).")
    others = [m for m in runs if m != "bass"]
    fair = [m for m in others if runs[m].state == "complete"]
    partial = [f"{LONG_NAMES.get(m, m)} was {runs[m].status}" for m in others if m not in fair]
    partial += [f"{LONG_NAMES.get(m, m)} failed" for m in failures if m != "bass"]
    if not fair:
        text = f"BASS wrote the {k} candidates ({bass.tokens} tokens) in {format_seconds(bass.wall_s)}"
        return text + (f"; no speed-up is claimed, as {' and '.join(partial)}." if partial else
                       "; no other method ran to compare it with.")
    same = all(runs[m].tokens == bass.tokens for m in fair)
    clauses = [f"{_pace(bass.wall_tok_s / runs[m].wall_tok_s)} {LONG_NAMES.get(m, m)}"
               + (f" ({format_seconds(bass.wall_s)} vs {format_seconds(runs[m].wall_s)})" if same else
                  f" ({bass.wall_tok_s:.1f} vs {runs[m].wall_tok_s:.1f} tok/s)") for m in fair]
    if same:
        text = (f"BASS wrote the {k} candidates ({bass.tokens} tokens, the same for every method) "
                + " and ".join(clauses) + " in wall time")
    else:
        counts = ", ".join(f"{method_name(m)} {runs[m].tokens}" for m in ["bass", *fair])
        text = (f"BASS wrote its {k} candidates " + " and ".join(clauses) + " in tokens per second of wall time "
                f"(stop strings ended them at different lengths: {counts} tokens)")
    if bass.passed is not None:
        firsts = [f"{format_seconds_or_none(runs[m].first_pass_s)} ({method_name(m)})" for m in fair]
        text += f", first passing candidate at {format_seconds_or_none(bass.first_pass_s)} vs " + ", ".join(firsts)
    if partial:
        text += f"; not compared: {', '.join(partial)}"
    return text + "."


def _pace(ratio: float) -> str:
    """'1.9x faster than', '1.3x slower than' or 'about as fast as' for a rate ratio (BASS / other)."""
    if abs(ratio - 1.0) <= SAME_SPEED:
        return "about as fast as"
    return f"{ratio:.1f}x faster than" if ratio > 1 else f"{1 / ratio:.1f}x slower than"


def _ratio(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}x"
