"""Compare view: results of the same prompt, seed and k under each method → table and bar-chart data.

Speed-up is regular decoding's mean per-sequence ms/token divided by the method's (> 1 means faster
than regular), and likewise for wall time; both are blank when regular decoding did not run. Time to
first pass (`bass.metrics.time_to_first_pass`) is "none" when no candidate of the method passed, and blank
when no tests were given.
Mean, min and max ms/token are over the sequences that have a rate (`bass.events.Candidate.has_rate`), as the
engine's own mean is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd

from bass.events import GenerationResult
from bass.metrics import time_to_first_pass

METHOD_NAMES = {"bass": "BASS", "regular": "regular batched", "single": "single-seq speculative"}
COMPARE_ORDER = ("bass", "regular", "single")
TTFP_COLUMN = "time to first pass (s)"
TABLE_COLUMNS = ["method", "mean ms/token", "speed-up (ms/token)", "wall (s)", "speed-up (wall)", TTFP_COLUMN,
                 "passing", "acceptance", "tokens/round", "throughput (tok/s)", "min ms/token", "max ms/token",
                 "prefill (s)", "tokens", "sequences"]


@dataclass(frozen=True)
class MethodRun:
    """One method's run in a comparison: the engine's result and the wall time the user waited."""

    method: str
    result: GenerationResult
    wall_s: float
    passed: tuple[bool | None, ...] | None = None  # per candidate (None: untested); None: no tests given

    @property
    def first_pass_s(self) -> float | None:
        """Time to first pass of this method's run (None: nothing passed, or no tests)."""
        if self.passed is None:
            return None
        times = [c.finish_time_or_none for c in self.result.candidates]
        return time_to_first_pass(self.result.stats.prefill_s, times, self.passed)


def method_name(method: str) -> str:
    return METHOD_NAMES.get(method, method)


def _per_seq_ms(result: GenerationResult) -> list[float]:
    return [c.stats.ms_per_token for c in result.candidates if c.stats.tokens > 0 and c.has_rate]


def comparison_table(runs: Mapping[str, MethodRun]) -> pd.DataFrame:
    """One row per method, in COMPARE_ORDER, with DESIGN.md §2 metrics and speed-ups over regular."""
    base = runs.get("regular")
    rows = []
    for method in [m for m in COMPARE_ORDER if m in runs] + [m for m in runs if m not in COMPARE_ORDER]:
        run = runs[method]
        stats = run.result.stats
        per_seq = _per_seq_ms(run.result)
        mean_ms = stats.mean_ms_per_token
        speed_up = (base.result.stats.mean_ms_per_token / mean_ms) if base and mean_ms > 0 else None
        wall_up = (base.wall_s / run.wall_s) if base and run.wall_s > 0 else None
        rows.append([
            method_name(method), round(mean_ms, 1), _round(speed_up), round(run.wall_s, 2), _round(wall_up),
            _round(run.first_pass_s), None if run.passed is None else f"{sum(bool(p) for p in run.passed)}/"
                                                                      f"{len(run.passed)}",
            round(stats.acceptance_rate, 3) if stats.proposed else None, round(stats.tokens_per_round, 2),
            round(stats.throughput_tok_s, 2), round(min(per_seq), 1) if per_seq else None,
            round(max(per_seq), 1) if per_seq else None, round(stats.prefill_s, 2), stats.tokens,
            len(run.result.candidates),
        ])
    return pd.DataFrame(rows, columns=TABLE_COLUMNS)


def per_sequence_table(runs: Mapping[str, MethodRun]) -> pd.DataFrame:
    """One row per (method, sequence): the per-sequence latency behind the table's means."""
    rows = []
    for method, run in runs.items():
        for i, cand in enumerate(run.result.candidates):
            s = cand.stats
            rows.append([method_name(method), i, s.tokens, round(s.ms_per_token, 1),
                         round(s.acceptance_rate, 3) if s.proposed else None, round(s.tokens_per_round, 2),
                         round(s.finish_time_s, 3), cand.finish_reason])
    return pd.DataFrame(rows, columns=["method", "seq", "tokens", "ms/token", "acceptance", "tokens/round",
                                       "finished at (s)", "finish"])


def display_table(table: pd.DataFrame) -> pd.DataFrame:
    """The table as shown on screen: blanks (no regular run, no drafts) as '—' instead of NaN, and a
    tested method with no passing candidate as time to first pass 'none'."""
    shown = table.astype(object).where(table.notna(), "—")
    if TTFP_COLUMN in table:
        no_pass = table[TTFP_COLUMN].isna() & table["passing"].notna()
        shown.loc[no_pass, TTFP_COLUMN] = "none"
    return shown


def latency_bars(table: pd.DataFrame) -> pd.DataFrame:
    """Bar-chart data: mean per-sequence ms/token by method (typed even when empty, see app.charts)."""
    return table[["method", "mean ms/token"]].astype({"method": "string", "mean ms/token": "float64"})


def first_pass_bars(table: pd.DataFrame) -> pd.DataFrame:
    """Bar-chart data: time to first pass by method (no bar where nothing passed)."""
    return table[["method", TTFP_COLUMN]].astype({"method": "string", TTFP_COLUMN: "float64"})


def wall_bars(table: pd.DataFrame) -> pd.DataFrame:
    """Bar-chart data: total wall time by method."""
    return table[["method", "wall (s)"]].astype({"method": "string", "wall (s)": "float64"})


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 2)
