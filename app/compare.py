"""Compare view data: the comparison's rows (`bass.eval.compare_report`) as the on-screen table, the exported numbers
and the per-sequence detail. The sentence and the table's text are `bass.eval.compare_report`'s, the same as the CLI
prints."""

from __future__ import annotations

from dataclasses import asdict

import pandas as pd

from bass.eval.compare_report import COLUMNS, method_name, table_cells, table_rows
from bass.eval.compare_results import Comparison

__all__ = ["display_table", "empty_display_table", "numbers_table", "per_sequence_table"]


def empty_display_table() -> pd.DataFrame:
    return pd.DataFrame(columns=list(COLUMNS))


def display_table(cmp: Comparison) -> pd.DataFrame:
    """The table as shown: one text row per method, in `bass.eval.compare_report.COLUMNS` (status beside the method,
    so a cut or stopped run reads as such before any of its numbers)."""
    return pd.DataFrame(table_cells(table_rows(cmp)), columns=list(COLUMNS))


def numbers_table(cmp: Comparison) -> pd.DataFrame:
    """The same rows as numbers, every field of `bass.eval.compare_report.Row` (for the CSV and JSON downloads)."""
    return pd.DataFrame([asdict(r) for r in table_rows(cmp)])


def per_sequence_table(cmp: Comparison) -> pd.DataFrame:
    """One row per (method, sequence) of each method's median run: the per-sequence latency behind the table's
    means, and the candidate's ending as shown (cut at its first stop under equal work)."""
    rows = []
    for method, res in cmp.results.items():
        for i, cand in enumerate(res.candidates):
            s = cand.stats
            verdict = None if res.passed is None else res.passed[i]
            rows.append([method_name(method), i, s.tokens, round(s.ms_per_token, 1),
                         round(s.acceptance_rate, 3) if s.proposed else None, round(s.tokens_per_round, 2),
                         round(s.finish_time_s, 3), cand.finish_reason,
                         "untested" if verdict is None else "pass" if verdict else "fail"])
    return pd.DataFrame(rows, columns=["method", "seq", "tokens", "ms/token", "acceptance", "tokens/round",
                                       "finished at (s)", "finish", "tests"])
