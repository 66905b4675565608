"""The app's CSS: candidate grid, cards, badges, the status bar, and pygments colours for both themes."""

from __future__ import annotations

from pygments.formatters import HtmlFormatter

from app.compare_html import COMPARE_CSS

_LAYOUT = """
.bass-grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(320px, 1fr)); gap: 10px; }
.bass-card { border: 1px solid var(--border-color-primary); border-radius: 8px; overflow: hidden;
             background: var(--block-background-fill); display: flex; flex-direction: column; }
.bass-card-head { display: flex; justify-content: space-between; align-items: center; gap: 6px;
                  padding: 6px 10px; font-size: 0.85em; border-bottom: 1px solid var(--border-color-primary); }
.bass-seq { font-weight: 600; margin-right: 8px; }
.bass-facts { color: var(--body-text-color-subdued); font-variant-numeric: tabular-nums; }
.bass-card .bass-hl { margin: 0; max-height: 340px; overflow: auto; }
.bass-card .bass-hl pre { margin: 0; padding: 8px 10px; font-size: 0.8em; line-height: 1.35;
                          white-space: pre-wrap; overflow-wrap: anywhere; background: transparent; border: 0; }
.bass-best { border: 2px solid #16a34a; box-shadow: 0 0 0 3px rgba(22, 163, 74, 0.15); }
.bass-failure { padding: 6px 10px; font-family: var(--font-mono); font-size: 0.78em; white-space: pre-wrap;
                color: #b91c1c; background: rgba(220, 38, 38, 0.07);
                border-bottom: 1px solid var(--border-color-primary); }
.dark .bass-failure { color: #fca5a5; }
.bass-badge { border-radius: 999px; padding: 1px 9px; font-size: 0.78em; font-weight: 700; white-space: nowrap; }
.bass-badge-ok { background: #16a34a; color: white; }
.bass-badge-bad { background: #dc2626; color: white; }
.bass-badge-warn { background: #d97706; color: white; }
.bass-badge-muted { background: var(--neutral-200); color: var(--neutral-800); }
/* No endless animation while decoding: each frame is painted on the visitor's CPU, which may be the one the engine
   runs on (a small machine serving itself); "running" and the progress bar say it already. */
.bass-badge-live { background: #2563eb; color: white; }
.bass-note { margin: 4px 0 8px; color: var(--body-text-color-subdued); }
.bass-status { border-radius: 8px; padding: 8px 12px; border: 1px solid var(--border-color-primary); }
.bass-status-title { font-weight: 600; }
.bass-status-detail { font-size: 0.88em; color: var(--body-text-color-subdued); margin-top: 2px; }
.bass-error { border-color: #dc2626; background: rgba(220, 38, 38, 0.08); }
.bass-ok { border-color: #16a34a; background: rgba(22, 163, 74, 0.07); }
.bass-bar { height: 6px; border-radius: 3px; background: var(--neutral-200); margin-top: 6px; overflow: hidden; }
.bass-bar-fill { height: 100%; background: var(--color-accent); transition: width 0.3s; }
.bass-indeterminate { width: 35%; animation: bass-slide 1.3s ease-in-out infinite; }
@keyframes bass-slide { 0% { transform: translateX(-100%); } 100% { transform: translateX(290%); } }
.bass-summary { font-size: 1.02em; padding: 4px 2px; }
.bass-summary .bass-badge { margin: 0 4px; }
.bass-empty { color: var(--body-text-color-subdued); }
#bass-header h1 { margin-bottom: 0; }
.bass-spark { display: flex; align-items: flex-end; gap: 8px; padding: 4px 10px; font-size: 0.75em;
              color: var(--body-text-color-subdued); border-bottom: 1px solid var(--border-color-primary); }
.bass-spark-label { white-space: nowrap; }
.bass-spark-bars { display: flex; align-items: flex-end; gap: 1px; height: 22px; flex: 1; }
.bass-spark-bars i { display: block; width: 5px; background: #2563eb; border-radius: 1px 1px 0 0; }
.bass-spark-bars i.bass-spark-0 { background: var(--neutral-300); }
.bass-ttfp b { color: #15803d; }
/* The slider's number box is sized for 3 digits by default: "1024" was cut to "102" with a scroll bar. */
#bass-max-new input[type=number] { min-width: 9ch !important; width: 9ch !important; box-sizing: content-box; }
#bass-max-new .head, #bass-max-new .tab-like-container { overflow: visible; }
/* A wrapped line hangs at its own indentation (`render.highlight` sets --hang per line), not at column 0. */
.bass-card .bass-hl .bass-line { display: block; padding-left: var(--hang, 2ch);
                                 text-indent: calc(-1 * var(--hang, 2ch)); }
.bass-swatch { display: inline-block; width: 0.75em; height: 0.75em; border-radius: 2px; margin-right: 5px;
               vertical-align: -0.05em; }
.bass-card-tools { display: flex; align-items: center; gap: 6px; }
.bass-copy { font-size: 0.78em; padding: 1px 8px; border-radius: 6px; border: 1px solid var(--border-color-primary);
             background: var(--button-secondary-background-fill); cursor: pointer; }
.bass-copy:focus-visible { outline: 2px solid var(--color-accent); }
#bass-compare, #bass-generate, #bass-stop { white-space: nowrap; min-width: max-content; }
#bass-tests textarea { font-family: var(--font-mono); font-size: 0.85em; }
"""


def app_css() -> str:
    """Layout rules plus pygments' light style, and a dark style scoped under Gradio's `.dark` root class."""
    light = _scoped_rules("default", ".bass-hl")
    dark = _scoped_rules("monokai", ".dark .bass-hl")
    return _LAYOUT + COMPARE_CSS + light + "\n" + dark + "\n.bass-hl, .dark .bass-hl { background: transparent; }\n"


def _scoped_rules(style: str, scope: str) -> str:
    """Pygments' rules for one style, without its unscoped `pre`/line-number rules that would restyle
    every `<pre>` of the page."""
    rules = HtmlFormatter(style=style).get_style_defs(scope).splitlines()
    return "\n".join(r.split(" /*")[0] for r in rules if r.startswith(scope))
