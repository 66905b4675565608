"""Compare view data: the comparison's rows (`bass.eval.compare`) as the on-screen table, the exported numbers and
the per-sequence detail. The sentence and the table's text are `bass.eval.compare`'s, the same as the CLI prints."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict

import pandas as pd

from bass.eval.compare import COLUMNS, MethodRun, method_name, table_cells, table_rows

__all__ = ["MethodRun", "display_table", "empty_display_table", "method_name", "numbers_table", "per_sequence_table"]


def empty_display_table() -> pd.DataFrame:
    return pd.DataFrame(columns=list(COLUMNS))


def display_table(runs: Mapping[str, MethodRun]) -> pd.DataFrame:
    """The table as shown: one text row per method, in `bass.eval.compare.COLUMNS` (status beside the method, so a
    cut or stopped run reads as such before any of its numbers)."""
    return pd.DataFrame(table_cells(table_rows(runs)), columns=list(COLUMNS))


def numbers_table(runs: Mapping[str, MethodRun]) -> pd.DataFrame:
    """The same rows as numbers, every field of `bass.eval.compare.Row` (for the CSV and JSON downloads)."""
    return pd.DataFrame([asdict(r) for r in table_rows(runs)])


def per_sequence_table(runs: Mapping[str, MethodRun]) -> pd.DataFrame:
    """One row per (method, sequence): the per-sequence latency behind the table's means."""
    rows = []
    for method, run in runs.items():
        for i, cand in enumerate(run.result.candidates):
            s = cand.stats
            verdict = None if run.passed is None else run.passed[i]
            rows.append([method_name(method), i, s.tokens, round(s.ms_per_token, 1),
                         round(s.acceptance_rate, 3) if s.proposed else None, round(s.tokens_per_round, 2),
                         round(s.finish_time_s, 3), cand.finish_reason,
                         "untested" if verdict is None else "pass" if verdict else "fail"])
    return pd.DataFrame(rows, columns=["method", "seq", "tokens", "ms/token", "acceptance", "tokens/round",
                                       "finished at (s)", "finish", "tests"])
