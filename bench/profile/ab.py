"""Two checkouts' real-weights runs side by side: the code before a change ("old") and after it ("new").

    python -m bench.profile ab --old old1.json old2.json --new new1.json new2.json [--out ab.json]

`scripts/gpu_draft.sh ab` runs `bench/real_bench.py` in both checkouts alternately on one machine in one call (old,
new, old, new), so that what the machine does from minute to minute (host stalls, clocks) falls on both; this reads
their JSONs. Per row (k and label, as the runs name them; a label met twice in one run gets its order), it prints
every pass of the old runs and of the new ones, each side's median and new / old of the medians (< 1: the change
made the row faster), and the geometric mean of the pass-by-pass ratios new_i,p / old_i,p of each alternation i.
Every row draws its texts from the seed alone (`real_bench.py`, pass p samples with seed + p; a draft-length policy
follows the accepted counts, never the clock), so its pass p decodes the same text in both checkouts and that ratio
is the change's alone; where the two sides were given different drafts (`ab-draft`: the accept test then draws on
other proposals), which the runs' `info.args.draft` tells, only regular decoding's passes pair and the BASS rows
compare by their medians. Then x regular per side (each BASS row's median over the regular row's of the same side and
k) and each side's prefill (ms, the mean of its runs' `prefill_ms`); a row of a pair (look-ahead off ...) is divided
by the regular row of its own pair, as `real_bench.py` divides it. ms/token/seq starts a sequence's clock after the
prefill, so a change that moves work across that line moves it between these columns: read them together (launching a
request's first round before the host read the first tokens once read 3.5 % better in ms/token/seq at fixed L = 3
with the prefill 0.8-1.2 ms longer: nothing gained end to end).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from collections import defaultdict
from pathlib import Path

from bench.plot_real import add_ratios, row_label


def keyed(rows: list[dict]) -> dict[tuple[int, str], dict]:
    """(k, label) -> row; a label met again at the same k gets ' #2', ' #3' ... in the order of the run."""
    out, seen = {}, defaultdict(int)
    for r in rows:
        label = row_label(r) + (" (interleaved)" if r.get("interleaved") else "")
        seen[(r["k"], label)] += 1
        n = seen[(r["k"], label)]
        out[(r["k"], label + (f" #{n}" if n > 1 else ""))] = r
    return out


def compare(old: list[dict], new: list[dict]) -> list[dict]:
    """One dict per row present in every run (module docstring): k, label, the passes and medians of each side,
    ratio (new / old of the medians) and paired (the geometric mean of new_i,p / old_i,p, None for every BASS row
    when the sides ran different drafts: their texts differ between the sides),
    prefill_old / _new (None where a run has no `prefill_ms`) and x_regular_old / _new (`plot_real.add_ratios` on
    each side's medians; None for regular decoding)."""
    runs = [keyed(run["rows"]) for run in old + new]
    n_old = len(old)
    same_draft = len({run.get("info", {}).get("args", {}).get("draft") for run in old + new}) == 1
    keys = [key for key in runs[0] if all(key in run for run in runs)]
    out = []
    for key in keys:
        passes = [run[key].get("ms_per_token_passes") or [run[key]["ms_per_token"]] for run in runs]
        o, n = [x for p in passes[:n_old] for x in p], [x for p in passes[n_old:] for x in p]
        row = runs[0][key]
        same_texts = row["method"] == "regular" or same_draft
        pairs = [b / a for po, pn in zip(passes[:n_old], passes[n_old:], strict=False) for a, b in zip(po, pn,
                                                                                                      strict=False)]
        prefill = [run[key].get("prefill_ms") for run in runs]
        out.append(dict(k=key[0], label=key[1], old=o, new=n, old_median=statistics.median(o),
                        new_median=statistics.median(n), ratio=statistics.median(n) / statistics.median(o),
                        paired=math.exp(statistics.fmean(math.log(x) for x in pairs)) if same_texts and pairs
                        else None,
                        prefill_old=None if None in prefill else statistics.fmean(prefill[:n_old]),
                        prefill_new=None if None in prefill else statistics.fmean(prefill[n_old:])))
    for side in ("old", "new"):  # each side's medians divided as real_bench divides a run's rows (`add_ratios`)
        rows = [dict(runs[0][key], ms_per_token=r[f"{side}_median"]) for key, r in zip(keys, out, strict=True)]
        add_ratios(rows)
        for r, row in zip(out, rows, strict=True):
            r[f"x_regular_{side}"] = None if row["method"] == "regular" else row["x_regular"]
    return out


def format_table(rows: list[dict]) -> str:
    def f(x, spec=".3f"):
        return "-" if x is None else format(x, spec)

    lines = [f"{'k':>3} {'row':<44} {'old':>7} {'new':>7} {'new/old':>8} {'paired':>7} {'x reg old':>9} "
             f"{'x reg new':>9} {'prefill old':>11} {'new':>5}  passes old | new"]
    for r in rows:
        lines.append(f"{r['k']:>3} {r['label'][:44]:<44} {r['old_median']:>7.3f} {r['new_median']:>7.3f} "
                     f"{r['ratio']:>8.3f} {f(r['paired']):>7} {f(r['x_regular_old'], '.2f'):>9} "
                     f"{f(r['x_regular_new'], '.2f'):>9} {f(r['prefill_old'], '.2f'):>11} "
                     f"{f(r['prefill_new'], '.2f'):>5}  " + " ".join(f"{x:.3f}" for x in r["old"]) + " | "
                     + " ".join(f"{x:.3f}" for x in r["new"]))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--old", nargs="+", required=True, help="real_bench.json of the code before the change")
    p.add_argument("--new", nargs="+", required=True, help="... and after it, as many, in the same order")
    p.add_argument("--out", default=None, help="write the rows as JSON here too")
    a = p.parse_args(argv)
    if len(a.old) != len(a.new):
        p.error(f"--old and --new need as many runs each (alternated): got {len(a.old)} and {len(a.new)}")
    load = [json.loads(Path(f).read_text()) for f in (*a.old, *a.new)]
    rows = compare(load[:len(a.old)], load[len(a.old):])
    if not rows:
        p.error("no row is in every run: were they run with the same arguments?")
    print(format_table(rows))
    if a.out:
        Path(a.out).write_text(json.dumps({"old": a.old, "new": a.new, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
