"""What each round cost, by the round clock, per benchmark row: the cost policy's samples beside what a fixed
length pays (`DraftLengthConfig.trace`, written by `real_bench.py --trace`).

    python -m bench.profile trace bench/results/real_bench.json

The clock (`bass.round_costs.RoundClock`) times a pipelined round from the previous round's end, so over a run
of rounds its times add up to the run's wall time. A row's trace is one list per generation of
(L, B, ms, sample, overlapped, accepted, predicted); older traces may lack the last two. Per row and
(L, batch bucket) the table gives:

  n         rounds;  mean / median ms  all of them
  sample    median of the rounds the cost policy took as cost samples (a fixed length: all but captures)
  same      median of the rounds that followed a round of the same L (in its generation)
  switch    median of the rounds that followed a round of another L
  ahead     share of rounds launched before the round before them ended (the look-ahead pipeline full)
  acc       drafts accepted per sequence, the mean over the rounds (of those that carry a prediction, if any do)
  pred      what the cost policy's estimates expected of those same rounds, per sequence (its calibration: an
            estimate above `acc` makes long drafts look better than they are)

Below the table, per row of the cost policy: its calibration over every drafting round, Σ accepted / Σ predicted.

A cost policy whose "sample" for L sits above a fixed-L row's "mean" misjudges drafting: the question this
table answers.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from bass.round_costs import B_BUCKETS, bucket

Trace = list[list]  # one generation's rounds: [L, B, ms, sample, overlapped, accepted, predicted]


def split_trace(state: dict | None) -> tuple[dict | None, Trace | None]:
    """(a policy's `describe()` without its trace, the trace or None): the account and the rounds, kept apart."""
    if state is None:
        return None, None
    return {k: v for k, v in state.items() if k != "trace"}, state.get("trace")


def summarise(traces: list[Trace]) -> dict[tuple[int, int], dict]:
    """(L, batch bucket) -> n, mean, median, sample, same, switch, ahead (module docstring); None where empty."""
    groups: dict[tuple[int, int], dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for trace in traces:
        prev = None
        for L, B, ms, sample, overlapped, *counts in trace:
            g = groups[(L, bucket(B, B_BUCKETS))]
            g["all"].append(ms)
            if len(counts) > 1 and counts[1] is not None:  # accepted and predicted, per sequence
                g["acc_pred"].append(counts[0] / B)
                g["pred"].append(counts[1] / B)
            elif counts:
                g["acc"].append(counts[0] / B)
            g["ahead"].append(bool(overlapped))
            if sample:
                g["sample"].append(ms)
            if prev is not None:
                g["same" if prev == L else "switch"].append(ms)
            prev = L

    def med(xs: list[float]) -> float | None:
        return statistics.median(xs) if xs else None

    def mean(xs: list[float]) -> float | None:
        return statistics.fmean(xs) if xs else None

    return {key: dict(n=len(g["all"]), mean=statistics.fmean(g["all"]), median=med(g["all"]),
                      sample=med(g["sample"]), same=med(g["same"]), switch=med(g["switch"]),
                      ahead=sum(g["ahead"]) / len(g["ahead"]), acc=mean(g["acc_pred"] or g["acc"]),
                      pred=mean(g["pred"]))
            for key, g in sorted(groups.items())}


def calibration(traces: list[Trace]) -> dict | None:
    """Over every drafting round (L > 0) that carries the cost policy's prediction: rounds, and the drafts
    accepted and predicted per sequence, Σ accepted / Σ B and Σ predicted / Σ B (None: no such round)."""
    rounds = [(B, counts[0], counts[1]) for trace in traces for L, B, _ms, _s, _o, *counts in trace
              if L > 0 and len(counts) > 1 and counts[1] is not None]
    if not rounds:
        return None
    rows = sum(B for B, _, _ in rounds)
    return dict(rounds=len(rounds), acc=sum(a for _, a, _ in rounds) / rows, pred=sum(p for _, _, p in rounds) / rows)


def format_summary(rows: list[dict], min_rounds: int = 5) -> str:
    """A table over every row that carries traces: (L, batch bucket) groups of at least `min_rounds` rounds."""
    def f(x: float | None) -> str:
        return "-" if x is None else f"{x:.2f}"

    lines = [f"{'row':<28} {'L':>3} {'B':>3} {'n':>5} {'mean':>6} {'median':>6} {'sample':>6} {'same':>6} "
             f"{'switch':>6} {'ahead':>5} {'acc':>5} {'pred':>5}"]
    for r in rows:
        if not r.get("traces"):
            continue
        label = f"{r['method']} {r.get('drafter') or ''} {r.get('policy') or ''} k={r['k']}"
        for (L, B), s in summarise(r["traces"]).items():
            if s["n"] >= min_rounds:
                lines.append(f"{label:<28} {L:>3} {B:>3} {s['n']:>5} {f(s['mean']):>6} {f(s['median']):>6} "
                             f"{f(s['sample']):>6} {f(s['same']):>6} {f(s['switch']):>6} {s['ahead']:>5.2f} "
                             f"{f(s['acc']):>5} {f(s['pred']):>5}")
    calibrated = [(r, c) for r in rows if r.get("traces") and (c := calibration(r["traces"]))]
    if calibrated:
        lines.append("calibration over every drafting round: drafts accepted / predicted per sequence")
        for r, c in calibrated:
            label = f"{r['method']} {r.get('drafter') or ''} {r.get('policy') or ''} k={r['k']}"
            lines.append(f"{label:<28} {c['rounds']:>5} rounds  {c['acc']:.3f} / {c['pred']:.3f} = "
                         f"{c['acc'] / c['pred']:.3f}")
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    for path in argv:
        print(format_summary(json.loads(Path(path).read_text())["rows"]))


if __name__ == "__main__":
    main(sys.argv[1:])
