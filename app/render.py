"""HTML the app shows: the status bar, live candidate cards, ranked cards with badges, error boxes.

Pure string functions. Code is highlighted with pygments into `.bass-hl` classes whose colours live in
`app.styles` (one CSS for light and dark mode); every other piece of text is HTML-escaped here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from html import escape

from pygments import highlight as _pyg_highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer

from app.charts import LiveRun, seq_colour, seq_label
from app.ranking import PassSummary, RankedCandidate, TestReport
from app.timing import RunTiming
from bass.eval.verdicts import Verdict
from bass.metrics import format_seconds_or_none

# Each source line in its own span (`linespans`), so that a wrapped line can hang at its own indentation
_FORMATTER = HtmlFormatter(cssclass="bass-hl", nowrap=False, linespans="bass-line")
_LINE_SPAN = re.compile(r'<span id="bass-line-(\d+)">')
_LEXER = PythonLexer(stripnl=False, ensurenl=False)

BADGES = {
    "passed": ("PASS", "ok"), "ran": ("RUNS · NO TESTS", "ok"), "failed": ("FAIL", "bad"), "error": ("ERROR", "bad"),
    "timeout": ("TIMEOUT", "warn"), "memory": ("OUT OF MEMORY", "warn"), "crashed": ("CRASHED", "bad"),
    "untested": ("NO TESTS", "muted"), "cancelled": ("STOPPED · UNTESTED", "muted"),
}
FINISH_NAMES = {"eos": "end of text", "stop": "stop string", "length": "token limit", "budget": "time budget",
                "cancelled": "cancelled"}


def plural(n: int, word: str, many: str | None = None) -> str:
    """'1 token', '2 tokens' ("sequence" → "sequences"; `many` for irregular words)."""
    return f"{n} {word if n == 1 else many or word + 's'}"


def highlight(code: str) -> str:
    """Python source → highlighted HTML (escaped by pygments), one block per line whose wrapped continuation
    lines start at the line's own indentation plus two columns, not at column 0 (a hanging indent)."""
    if not code:
        return '<div class="bass-hl"><pre><span class="bass-empty">…</span></pre></div>'
    lines = code.split("\n")

    def hang(match: re.Match) -> str:
        line = lines[int(match.group(1)) - 1] if int(match.group(1)) <= len(lines) else ""
        indent = len(line) - len(line.lstrip(" \t")) + 2
        return f'<span class="bass-line" style="--hang:{indent}ch">'

    return _LINE_SPAN.sub(hang, _pyg_highlight(code, _LEXER, _FORMATTER))


def copy_button(code: str, what: str) -> str:
    """A button that copies `code` (kept in a hidden textarea beside it) and says so where it was pressed."""
    script = ("const t=this.parentElement.querySelector('textarea');const b=this;"
              "(navigator.clipboard?navigator.clipboard.writeText(t.value):Promise.reject())"
              ".catch(()=>{t.hidden=false;t.select();document.execCommand('copy');t.hidden=true;})"
              ".finally(()=>{b.textContent='Copied';setTimeout(()=>{b.textContent='Copy'},1500);});")
    return (f'<span class="bass-copy-wrap"><button type="button" class="bass-copy" aria-label="Copy {escape(what)}" '
            f'onclick="{escape(script)}">Copy</button>'
            f'<textarea hidden aria-hidden="true" tabindex="-1">{escape(code)}</textarea></span>')


def status_html(title: str, detail: str = "", fraction: float | None = None, kind: str = "info") -> str:
    """A status line with a progress bar: determinate with `fraction` in [0, 1], animated without.

    kind: info | ok | error | idle. Error boxes carry `bass-error` so tests and users can spot them.
    """
    bar = ""
    if kind == "info":
        if fraction is None:
            bar = '<div class="bass-bar"><div class="bass-bar-fill bass-indeterminate"></div></div>'
        else:
            pct = max(0.0, min(1.0, fraction)) * 100
            bar = f'<div class="bass-bar"><div class="bass-bar-fill" style="width:{pct:.1f}%"></div></div>'
    detail_html = f'<div class="bass-status-detail">{escape(detail)}</div>' if detail else ""
    return (f'<div class="bass-status bass-{escape(kind)}" role="status">'
            f'<div class="bass-status-title">{escape(title)}</div>{detail_html}{bar}</div>')


def error_html(message: str, hint: str = "") -> str:
    """A readable error box (never a traceback): what went wrong and what to do."""
    return status_html(f"⚠ {message}", hint, kind="error")


def _card(header: str, badge: str, body_code: str, extra: str = "", classes: str = "", tools: str = "") -> str:
    return (f'<div class="bass-card {classes}"><div class="bass-card-head">{header}'
            f'<span class="bass-card-tools">{badge}{tools}</span></div>{extra}{highlight(body_code)}</div>')


def _seq_name(seq: int) -> str:
    """The sequence's name with its colour in the charts (a swatch), so a card and its line can be matched."""
    return (f'<span class="bass-seq"><i class="bass-swatch" style="background:{seq_colour(seq)}" aria-hidden="true">'
            f'</i>{seq_label(seq)}</span>')


def _badge(label: str, tone: str) -> str:
    return f'<span class="bass-badge bass-badge-{tone}">{escape(label)}</span>'


WAIT_SHOWN_S = 0.5  # a wait in line shorter than this is not worth a mention
SPARK_ROUNDS = 48  # the last rounds a card's acceptance strip shows


def acceptance_strip_html(per_round: Sequence[tuple[int, int]]) -> str:
    """One bar per round: how many of the draft tokens proposed to this sequence the target accepted.

    Bar height is accepted / proposed (a full bar: the whole draft accepted); the number is in the tooltip.
    Empty when the sequence never got a draft (regular decoding).
    """
    if not per_round:
        return ""
    shown = per_round[-SPARK_ROUNDS:]
    bars = "".join(f'<i style="height:{max(8, round(100 * a / p))}%" class="{"bass-spark-0" if a == 0 else ""}" '
                   f'title="{a}/{p} accepted"></i>' for a, p in shown)
    counts = " ".join(str(a) for a, _ in shown)
    total_a, total_p = sum(a for a, _ in per_round), sum(p for _, p in per_round)
    return (f'<div class="bass-spark" title="draft tokens accepted per round: {escape(counts)}">'
            f'<span class="bass-spark-label">accepted/round · {total_a}/{total_p}</span>'
            f'<span class="bass-spark-bars" data-accepted="{escape(counts)}">{bars}</span></div>')


def _live_badge(reason: str | None, verdict: Verdict[TestReport] | None) -> str:
    if verdict is not None:
        label, tone = BADGES.get(verdict.value.status, (verdict.value.status.upper(), "bad"))
        return _badge(label, tone)
    if reason is None:
        return _badge("running", "live")
    if reason == "cancelled":
        return _badge(BADGES["cancelled"][0], "muted")
    return _badge(f"done: {FINISH_NAMES.get(reason, reason)} · testing…", "muted")


def live_cards_html(run: LiveRun, verdicts: Mapping[int, Verdict[TestReport]] | None = None,
                    limit_chars: int = 4000) -> str:
    """The k candidates as they stream, side by side, each with its own speed and acceptance so far.

    A finished candidate shows its verdict (PASS/FAIL…) as soon as the sandbox gave it, while the others
    are still running.
    """
    verdicts = verdicts or {}
    cards = []
    for s in range(run.k):
        text = run.texts[s]
        if len(text) > limit_chars:  # keep each update small; the full text is in the final ranking
            text = "…" + text[-limit_chars:]
        acc, rate = run.acceptance(s), run.rate(s)
        facts = plural(run.tokens[s], "token") + ("" if rate is None else f" · {rate:.1f} tok/s")
        if acc is not None:
            facts += f" · acc {acc:.0%}"
        reason, verdict = run.finish_reasons[s], verdicts.get(s)
        if verdict is not None:
            facts += f" · tests {verdict.value.tests_passed}/{verdict.value.tests_total}"
        header = f'{_seq_name(s)}<span class="bass-facts">{escape(facts)}</span>'
        state = "bass-live-running" if reason is None else "bass-live-finished"
        cards.append(_card(header, _live_badge(reason, verdict), text, acceptance_strip_html(run.per_round[s]),
                           classes=f"bass-live {state}"))
    return f'<div class="bass-grid" data-k="{run.k}">{"".join(cards)}</div>'


def ranked_badge(row: RankedCandidate) -> tuple[str, str]:
    """A card's badge: the verdict; for a candidate without one, why (no tests, or cut before it finished)."""
    if row.status == "untested" and row.tests_given:
        cut = {"budget": "CUT AT TIME BUDGET · UNTESTED", "length": "TOKEN LIMIT · UNTESTED"}
        return cut.get(row.finish_reason, "UNTESTED"), "muted"
    return BADGES.get(row.status, (row.status.upper(), "bad"))


def ranked_cards_html(rows: Sequence[RankedCandidate], note: str = "",
                      per_round: Sequence[Sequence[tuple[int, int]]] | None = None) -> str:
    """Candidates after testing, best first: badge, tests x/y, first failing assertion, run time, speed, the
    acceptance strip (`per_round[seq]`, as on the live card) and a copy button for the program it ran.
    Only a passing best candidate is outlined in green."""
    cards = []
    for row in rows:
        label, tone = ranked_badge(row)
        rep = row.report
        facts = [f"#{row.rank}"]
        if rep is not None:
            facts.append(f"tests {rep.tests_passed}/{rep.tests_total}")
            facts.append(f"ran {rep.run_time_s:.2f} s")
        facts.append(f"{plural(row.tokens, 'token')} · {row.ms_per_token:.0f} ms/tok")
        if row.acceptance_rate is not None:
            facts.append(f"acc {row.acceptance_rate:.0%}")
        facts.append(FINISH_NAMES.get(row.finish_reason, row.finish_reason))
        header = f'{_seq_name(row.seq)}<span class="bass-facts">{escape(" · ".join(facts))}</span>'
        extra = acceptance_strip_html(per_round[row.seq]) if per_round and row.seq < len(per_round) else ""
        if rep is not None and not rep.passed:
            why = rep.first_failure or rep.detail
            if why:
                extra += f'<div class="bass-failure">{escape(_clip(why, 400))}</div>'
        best = " bass-best" if row.rank == 1 and row.passed else ""
        cards.append(_card(header, _badge(label, tone), row.shown, extra,
                           classes=f"bass-ranked bass-status-{escape(row.status)}{best}",
                           tools=copy_button(row.code, f"{seq_label(row.seq)}'s program")))
    note_html = f'<div class="bass-note">{escape(note)}</div>' if note else ""
    return f'{note_html}<div class="bass-grid bass-ranking" data-count="{len(rows)}">{"".join(cards)}</div>'


def summary_html(summary: PassSummary, mean_ms_per_token: float, acceptance: float | None,
                 tokens_per_round: float, timing: RunTiming, method: str) -> str:
    """The headline numbers of this prompt: time to first pass, Pass@First / Pass@All badges, latency,
    acceptance. Every time is from one origin, the start of the run's prefill (`app.timing`): the time to
    first pass (the engine's), when that PASS was shown (the page's) and the wall time; a wait in line
    before it is stated apart."""
    pass_known_s = timing.pass_shown_s
    parts = []
    checked = summary.total if summary.checked is None else summary.checked
    if summary.tested and checked == 0:
        parts.append(f"tests given, but none of the {plural(summary.total, 'candidate')} finished to be tested "
                     "(stopped, or cut by the time budget)")
    elif summary.tested:
        first = format_seconds_or_none(summary.first_pass_s)
        known = f" (PASS shown at {pass_known_s:.1f} s)" if pass_known_s is not None else ""
        parts.append(f'<span class="bass-ttfp">time to first pass <b>{first}</b>{escape(known)}</span>')
        for name, ok in (("Pass@First", summary.pass_first), ("Pass@All", summary.pass_all)):
            parts.append(f'{name} {_badge("PASS" if ok else "FAIL", "ok" if ok else "bad")}')
        untested = summary.total - checked
        parts.append(f"<b>{summary.passed}/{summary.total}</b> candidates pass"
                     + (f" ({untested} untested: cut or stopped before they finished)" if untested else ""))
    else:
        parts.append("no tests given: candidates ranked by whether they run, then by finish time")
    parts.append(f"<b>{mean_ms_per_token:.0f} ms/token</b> per sequence ({escape(method)})")
    if acceptance is not None:
        parts.append(f"acceptance <b>{acceptance:.0%}</b> · {tokens_per_round:.2f} tokens/round")
    wall = f"wall {timing.wall_s:.1f} s from the start of prefill"
    if timing.waited_s >= WAIT_SHOWN_S:
        wall += f", after {timing.waited_s:.1f} s in line"
    parts.append(wall)
    return f'<div class="bass-summary">{" · ".join(parts)}</div>'


def _clip(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"
