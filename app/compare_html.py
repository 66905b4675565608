"""The Compare tab's HTML: the sentence that leads, three bar charts and the note on what the numbers mean.

Bars are plain HTML, not a plotting widget: a bar's length is its value over the largest of its chart, so
every axis starts at 0; the method's name and value sit beside it in text that wraps, so titles and labels
fit at 1280 px and on a phone (the charts stack under 760 px). A method with no bar says why in its place.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from html import escape

from bass.eval.compare_report import NOTE, Row
from bass.metrics import format_seconds

COMPARE_CSS = """
.bass-cmp-sentence { font-size: 1.12em; font-weight: 600; line-height: 1.4; margin: 6px 0; }
.bass-cmp-charts { display: grid; grid-template-columns: repeat(auto-fit, minmax(240px, 1fr)); gap: 12px; }
.bass-cmp-chart { margin: 0; padding: 8px 10px; border: 1px solid var(--border-color-primary); border-radius: 8px; }
.bass-cmp-chart figcaption { font-weight: 600; margin-bottom: 6px; white-space: normal; overflow-wrap: anywhere; }
.bass-cmp-chart figcaption small { font-weight: 400; color: var(--body-text-color-subdued); }
.bass-cmp-bar { display: grid; grid-template-columns: 6.5em 1fr auto; align-items: center; gap: 6px;
                margin: 4px 0; font-size: 0.88em; }
.bass-cmp-track { height: 14px; background: var(--neutral-100); border-radius: 3px; overflow: hidden; }
.bass-cmp-fill { display: block; height: 100%; background: #2563eb; }
.bass-cmp-partial { background: repeating-linear-gradient(45deg, #94a3b8 0 5px, #cbd5e1 5px 10px); }
.bass-cmp-value { font-variant-numeric: tabular-nums; white-space: nowrap; }
.bass-cmp-note { font-size: 0.9em; color: var(--body-text-color-subdued); }
.bass-cmp-note li { margin: 2px 0; }
#bass-compare-table table { font-size: 0.85em; }
#bass-compare { white-space: nowrap; }
@media (max-width: 760px) { .bass-cmp-bar { grid-template-columns: 5.5em 1fr auto; } }
"""


def sentence_html(text: str) -> str:
    return f'<p class="bass-cmp-sentence" role="status">{escape(text)}</p>' if text else ""


def note_html() -> str:
    """What the numbers mean (`bass.eval.compare_report.NOTE`), as a list."""
    items = "".join(f"<li>{escape(line)}</li>" for line in NOTE)
    return f'<div class="bass-cmp-note"><b>What these numbers mean</b><ul>{items}</ul></div>'


def _first_pass_gap(row: Row) -> str:
    """Why a method has no first-pass bar."""
    if row.passing == "no tests":
        return "no tests given"
    if "pass" not in row.passing:
        return "none tested (cut before the end)" if row.status.startswith("cut") else "none tested"
    return "none passed"


def _chart(title: str, hint: str, rows: Sequence[Row], value: Callable[[Row], float | None],
           shown: Callable[[float], str], gap: Callable[[Row], str]) -> str:
    values = [value(r) for r in rows]
    top = max((v for v in values if v is not None), default=0.0)
    bars = []
    for row, v in zip(rows, values, strict=True):
        partial = row.status != "complete"
        if v is None:
            track, text = "", gap(row)
        else:
            width = 100.0 * v / top if top > 0 else 0.0
            cls = "bass-cmp-fill bass-cmp-partial" if partial else "bass-cmp-fill"
            track = f'<span class="{cls}" style="width:{width:.1f}%"></span>'
            text = shown(v) + (f" · {row.status}" if partial else "")
        bars.append(f'<div class="bass-cmp-bar"><span class="bass-cmp-label">{escape(row.method)}</span>'
                    f'<span class="bass-cmp-track">{track}</span><span class="bass-cmp-value">{escape(text)}</span>'
                    "</div>")
    return (f'<figure class="bass-cmp-chart" aria-label="{escape(title)}"><figcaption>{escape(title)} '
            f'<small>{escape(hint)}</small></figcaption>{"".join(bars)}</figure>')


def charts_html(rows: Sequence[Row]) -> str:
    """Wall time, time to first pass and ms/token by method; a cut or stopped run's bar is hatched and named."""
    if not rows:
        return ""
    return '<div class="bass-cmp-charts">' + "".join([
        _chart("Wall time", "lower is better", rows, lambda r: r.wall_s, format_seconds, lambda r: ""),
        _chart("First passing candidate", "lower is better", rows, lambda r: r.first_pass_s, format_seconds,
               _first_pass_gap),
        _chart("ms per token", "mean per sequence, lower is better", rows,
               lambda r: r.ms_per_token if r.ms_per_token > 0 else None, lambda v: f"{v:.0f} ms",
               lambda r: "no tokens"),
    ]) + "</div>"
