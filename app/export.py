"""Downloadable results: the comparison as CSV + JSON, a generation's ranked candidates as JSON.

Each export goes to its own fresh folder so concurrent visitors never overwrite each other's files. The
folders live under one temporary folder of the process, removed when it exits, and a folder older than
`KEEP_S` is pruned at the next export: an app that runs for weeks keeps a day of downloads, not every one
it ever wrote. (Gradio serves a copy from its own cache, which `app.ui` prunes on the same schedule.)
"""

from __future__ import annotations

import json
import shutil
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from app.ranking import PassSummary, RankedCandidate
from bass.eval.compare_report import comparison_dict
from bass.eval.compare_results import Comparison

KEEP_S = 24 * 3600  # how long an export stays downloadable
_root: tempfile.TemporaryDirectory | None = None
_root_lock = threading.Lock()  # a generation and a comparison may export at once


def export_root() -> Path:
    """The process's folder of exports (created at the first export, removed when the process exits)."""
    global _root
    with _root_lock:
        if _root is None:
            _root = tempfile.TemporaryDirectory(prefix="bass-app-")
        return Path(_root.name)


def prune_exports(root: Path, keep_s: float = KEEP_S, now: float | None = None) -> int:
    """Remove the export folders under `root` last written more than `keep_s` seconds ago; how many went."""
    cutoff = (time.time() if now is None else now) - keep_s
    gone = 0
    for folder in root.iterdir():
        try:
            if folder.is_dir() and folder.stat().st_mtime < cutoff:
                shutil.rmtree(folder)
                gone += 1
        except FileNotFoundError:  # another visitor's export pruned it first
            continue
    return gone


def _fresh_dir() -> Path:
    root = export_root()
    prune_exports(root)
    return Path(tempfile.mkdtemp(dir=root))


def comparison_payload(cmp: Comparison, meta: Mapping[str, Any]) -> dict:
    """Everything a comparison produced, JSON-ready: settings, the sentence, summary rows, every method's
    state (complete, cut, stopped), timed runs and full stats (`bass.eval.compare_report.comparison_dict`)."""
    return {"settings": dict(meta), **comparison_dict(cmp)}


def write_comparison(cmp: Comparison, table: pd.DataFrame, per_seq: pd.DataFrame, meta: Mapping[str, Any],
                     out_dir: Path | None = None) -> tuple[Path, Path]:
    """Write `bass_comparison.csv` (the sentence, summary rows, then per-sequence rows) and `.json`."""
    out = out_dir or _fresh_dir()
    csv_path, json_path = out / "bass_comparison.csv", out / "bass_comparison.json"
    payload = comparison_payload(cmp, meta)
    with csv_path.open("w", newline="") as f:
        pd.DataFrame({"comparison": [payload["sentence"]]}).to_csv(f, index=False)
        f.write("\n")
        table.to_csv(f, index=False)
        f.write("\n")
        per_seq.to_csv(f, index=False)
    json_path.write_text(json.dumps(payload, indent=2))
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
