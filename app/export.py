"""Downloadable results: the comparison as CSV + JSON, a generation's ranked candidates as JSON.

Each export goes to its own fresh temporary folder so concurrent visitors never overwrite each other's
files; Gradio serves files from the system temp folder.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from app.compare import MethodRun, method_name
from app.ranking import PassSummary, RankedCandidate


def _fresh_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="bass-app-"))


def comparison_payload(runs: Mapping[str, MethodRun], table: pd.DataFrame, meta: Mapping[str, Any]) -> dict:
    """Everything a comparison produced, JSON-ready: settings, summary rows, every method's full stats."""
    return {
        "settings": dict(meta),
        "summary": json.loads(table.to_json(orient="records")),
        "runs": {method_name(m): {"wall_s": r.wall_s, "time_to_first_pass_s": r.first_pass_s,
                                  "passed": None if r.passed is None else list(r.passed), **r.result.to_dict()}
                 for m, r in runs.items()},
    }


def write_comparison(runs: Mapping[str, MethodRun], table: pd.DataFrame, per_seq: pd.DataFrame,
                     meta: Mapping[str, Any], out_dir: Path | None = None) -> tuple[Path, Path]:
    """Write `comparison.csv` (summary rows, then per-sequence rows) and `comparison.json`."""
    out = out_dir or _fresh_dir()
    csv_path, json_path = out / "bass_comparison.csv", out / "bass_comparison.json"
    with csv_path.open("w", newline="") as f:
        table.to_csv(f, index=False)
        f.write("\n")
        per_seq.to_csv(f, index=False)
    json_path.write_text(json.dumps(comparison_payload(runs, table, meta), indent=2))
    return csv_path, json_path


def generation_payload(rows: Sequence[RankedCandidate], summary: PassSummary | None, batch: Mapping[str, Any],
                       meta: Mapping[str, Any]) -> dict:
    """A generation's ranked candidates, their test reports and the batch statistics, JSON-ready."""
    cands = []
    for row in rows:
        rep = row.report
        cands.append({
            "rank": row.rank, "seq": row.seq, "status": row.status, "code": row.code, "tokens": row.tokens,
            "ms_per_token": row.ms_per_token, "acceptance_rate": row.acceptance_rate,
            "finish_reason": row.finish_reason, "finish_time_s": row.finish_time_s,
            "tests": None if rep is None else {"passed": rep.tests_passed, "total": rep.tests_total,
                                               "first_failure": rep.first_failure, "run_time_s": rep.run_time_s},
        })
    pass_info = None if summary is None or not summary.tested else {
        "pass_at_first": summary.pass_first, "pass_at_all": summary.pass_all, "passed": summary.passed,
        "total": summary.total, "time_to_first_pass_s": summary.first_pass_s}
    return {"settings": dict(meta), "pass": pass_info, "batch": dict(batch), "candidates": cands}


def write_generation(payload: Mapping[str, Any], out_dir: Path | None = None) -> Path:
    path = (out_dir or _fresh_dir()) / "bass_candidates.json"
    path.write_text(json.dumps(payload, indent=2))
    return path
