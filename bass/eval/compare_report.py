"""A comparison in words: the one sentence, the table and the note that both the app and the CLI show.

Speed-ups are over regular decoding, from medians (`bass.eval.compare_results`), only between complete methods:

    equal work      speed-up (wall)      = w_regular / w_m      (the same tokens for every method)
    natural stops   speed-up (wall)      = r_m / r_regular      (tokens per second of wall time)
    per token       speed-up (ms/token)  = t_regular / t_m,  t = mean over sequences of (finish time / tokens)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from bass.eval.compare_results import Comparison, MethodResult
from bass.metrics import format_seconds, format_seconds_or_none

COMPARE_METHODS = ("bass", "regular", "single")
SHORT_NAMES = {"bass": "BASS", "regular": "regular", "single": "single-seq"}
LONG_NAMES = {"bass": "BASS", "regular": "regular decoding", "single": "single-sequence speculative decoding"}
SAME_SPEED = 0.05  # ratios within this of 1 read "about as fast as"
FIRST_PASS_CAVEAT = "which candidate passes first depends on the texts sampled"

NOTE = (
    "equal work (the default): every method generates exactly the token limit for every candidate (end of text and "
    "stop strings do not end generation), and each candidate's text is then cut at its first stop for display and "
    "for the tests; the wall speed-up is regular decoding's wall time over the method's. With natural stops, stop "
    "strings end the candidates at different lengths and the speed-up is in tokens per second of wall time.",
    "wall time: from the request to the last candidate (prefill included), the median of the timed runs, which "
    "follow an untimed warm-up with the methods' order alternating; spread: (slowest - fastest) / median.",
    "first pass: from one normal run of each method after the timed runs (stop strings end each candidate, tested "
    f"as it finishes); {FIRST_PASS_CAVEAT}, so it is partly luck, not a property of the method alone.",
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
class Row:
    """One method's line of the table; speed-ups are None unless it and regular decoding are complete."""

    method: str
    status: str
    tokens: int
    wall_s: float  # median of the timed runs
    spread: float | None  # (slowest - fastest) / median; None with one run
    runs: int
    walls_s: tuple[float, ...]
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
    "wall (median)": lambda r: format_seconds(r.wall_s),
    "spread": lambda r: "—" if r.spread is None else f"{r.spread:.1%} of {r.runs}",
    "tok/s (wall)": lambda r: f"{r.wall_tok_s:.1f}",
    "× regular (wall)": lambda r: _ratio(r.wall_speed_up),
    "first pass": lambda r: "—" if r.passing == "no tests" else format_seconds_or_none(r.first_pass_s),
    "passing": lambda r: r.passing,
    "ms/token": lambda r: f"{r.ms_per_token:.1f}",
    "× regular (ms/token)": lambda r: _ratio(r.token_speed_up),
    "acceptance": lambda r: "—" if r.acceptance is None else f"{r.acceptance:.0%}",
    "tokens/round": lambda r: f"{r.tokens_per_round:.2f}",
}


def _order(method: str) -> int:
    return COMPARE_METHODS.index(method) if method in COMPARE_METHODS else len(COMPARE_METHODS)


def table_rows(cmp: Comparison) -> list[Row]:
    """One row per method, in COMPARE_METHODS order."""
    base = cmp.complete.get("regular")
    rows = []
    for method in sorted(cmp.results, key=_order):
        res = cmp.results[method]
        stats = res.result.stats
        fair = base is not None and res.state == "complete"
        base_ms = base.result.stats.mean_ms_per_token if base is not None else 0.0
        rows.append(Row(
            method=method_name(method), status=res.status, tokens=res.tokens, wall_s=res.wall_s, spread=res.spread,
            runs=len(res.runs), walls_s=res.walls_s, wall_tok_s=res.wall_tok_s,
            wall_speed_up=_speed_up(cmp, res, base) if fair else None,
            first_pass_s=res.first_pass_s, passing=res.passing, ms_per_token=stats.mean_ms_per_token,
            token_speed_up=base_ms / stats.mean_ms_per_token if fair and stats.mean_ms_per_token > 0 else None,
            acceptance=stats.acceptance_rate if stats.proposed else None,
            tokens_per_round=stats.tokens_per_round, prefill_s=stats.prefill_s, sequences=len(res.candidates)))
    return rows


def _speed_up(cmp: Comparison, res: MethodResult, base: MethodResult) -> float | None:
    """Over regular decoding in wall time: equal work compares the times, natural stops the rates."""
    if _same_work(cmp, [res, base]):
        return base.wall_s / res.wall_s if res.wall_s > 0 else None
    return res.wall_tok_s / base.wall_tok_s if base.wall_tok_s > 0 else None


def _same_work(cmp: Comparison, results: Sequence[MethodResult]) -> bool:
    return cmp.equal_work and len({r.tokens for r in results}) == 1


def table_cells(rows: Sequence[Row]) -> list[list[str]]:
    """The rows as the text both the app and the CLI show, one list per row in COLUMNS order."""
    return [[show(r) for show in COLUMNS.values()] for r in rows]


def format_table(rows: Sequence[Row]) -> str:
    """A plain-text table for a terminal."""
    cells = [list(COLUMNS)] + table_cells(rows)
    widths = [max(len(line[i]) for line in cells) for i in range(len(COLUMNS))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in cells)


def sentence(cmp: Comparison) -> str:
    """The comparison in one sentence a stakeholder can repeat: BASS against each complete method in wall time
    (medians), then the first passing candidate of each normal run; partial runs are named, never compared."""
    runs, failures = cmp.results, cmp.failures
    bass = runs.get("bass")
    if bass is None:
        why = f" ({failures['bass']})" if "bass" in failures else ""
        return f"BASS did not run{why}, so there is nothing to compare."
    k = len(bass.candidates)
    if bass.state != "complete":
        return (f"No speed-up is claimed: BASS was {bass.status} before its {k} candidates finished "
                f"({bass.tokens} tokens).")
    others = [m for m in sorted(runs, key=_order) if m != "bass"]
    fair = [m for m in others if runs[m].state == "complete"]
    partial = [f"{LONG_NAMES.get(m, m)} was {runs[m].status}" for m in others if m not in fair]
    partial += [f"{LONG_NAMES.get(m, m)} failed" for m in failures if m != "bass"]
    if not fair:
        text = f"BASS wrote the {k} candidates ({bass.tokens} tokens) in {format_seconds(bass.wall_s)}"
        return text + (f"; no speed-up is claimed, as {' and '.join(partial)}." if partial else
                       "; no other method ran to compare it with.")
    text = _speeds(cmp, bass, fair, k)
    text += _first_passes(cmp, fair)
    if partial:
        text += f"; not compared: {', '.join(partial)}"
    return text + "."


def _speeds(cmp: Comparison, bass: MethodResult, fair: list[str], k: int) -> str:
    runs = cmp.results
    median = _median_of(bass)
    if _same_work(cmp, [bass, *(runs[m] for m in fair)]):
        clauses = [f"{_pace(runs[m].wall_s / bass.wall_s)} {LONG_NAMES.get(m, m)} ({format_seconds(bass.wall_s)} vs "
                   f"{format_seconds(runs[m].wall_s)})" for m in fair]
        return (f"BASS wrote the {k} candidates ({bass.tokens} tokens, the same for every method) "
                + " and ".join(clauses) + f" in wall time{median}")
    clauses = [f"{_pace(bass.wall_tok_s / runs[m].wall_tok_s)} {LONG_NAMES.get(m, m)} ({bass.wall_tok_s:.1f} vs "
               f"{runs[m].wall_tok_s:.1f} tok/s)" for m in fair]
    counts = ", ".join(f"{method_name(m)} {runs[m].tokens}" for m in ["bass", *fair])
    why = "stop strings ended them at different lengths" if not cmp.equal_work else "different token counts"
    if len({runs[m].tokens for m in ["bass", *fair]}) == 1:
        why, counts = "stop strings ended them", f"every method wrote {bass.tokens}"
    return (f"BASS wrote its {k} candidates " + " and ".join(clauses) + f" in tokens per second of wall time{median} "
            f"({why}: {counts} tokens)")


def _first_passes(cmp: Comparison, fair: list[str]) -> str:
    """The clause on each method's first passing candidate in its normal run ("" without those runs)."""
    runs = cmp.results
    ran = [m for m in ["bass", *fair] if runs[m].first_run is not None]
    if "bass" not in ran or len(ran) < 2:
        return ""
    if all(runs[m].first_pass_s is None for m in ran):
        return "; in a normal run with stop strings no candidate of any method passed the tests"
    others = ", ".join(f"{format_seconds_or_none(runs[m].first_pass_s)} ({method_name(m)})" for m in ran[1:])
    return (f"; in a normal run with stop strings its first passing candidate came at "
            f"{format_seconds_or_none(runs['bass'].first_pass_s)} vs {others} ({FIRST_PASS_CAVEAT})")


def _median_of(res: MethodResult) -> str:
    n = len(res.runs)
    return f" (median of {n} runs each)" if n > 1 else ""


def comparison_dict(cmp: Comparison) -> dict:
    """The comparison, JSON-ready: the sentence, the table's rows as numbers, every method's runs and candidates."""
    return {"sentence": sentence(cmp), "equal_work": cmp.equal_work, "repeats": cmp.repeats,
            "captures_in_timed_runs": cmp.captures, "summary": [asdict(r) for r in table_rows(cmp)],
            "runs": {method_name(m): r.to_dict() for m, r in cmp.results.items()}, "failures": dict(cmp.failures)}


def _pace(ratio: float) -> str:
    """'1.9x faster than', '1.3x slower than' or 'about as fast as' for a rate ratio (BASS / other)."""
    if abs(ratio - 1.0) <= SAME_SPEED:
        return "about as fast as"
    return f"{ratio:.1f}x faster than" if ratio > 1 else f"{1 / ratio:.1f}x slower than"


def _ratio(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}x"
