"""Where the cost policy's rows lose to a fixed length's, pooled over the traces of many benchmark runs.

    PYTHONPATH=. python bench/policy_gap.py bench/results/real_bench_2026-11-2[78]_h100*.json --k 8 --fixed 3

One run's rows are a few passes each, and a pass moves by several per cent with the machine (host stalls,
`real_bench.py`), so a gap of that size between two policies shows only over many runs. From every
`real_bench.py` JSON given, this takes the rows at --k of BASS with --drafter, the look-ahead on (the engine's
default), under the cost policy (labelled "cost", or "cost, margin 0", which is the same policy) and at fixed
L = --fixed, and prints:

  passes  every pass of every such row, per kind: how many, their median and mean (ms/token/seq), and the
          medians of each run that has both kinds
  rounds  per kind and draft length, the traced rounds (`real_bench.py --trace`: each row's median pass) at the batch
          bucket of k, each generation's first round apart (it follows the prefill, the look-ahead pipeline is
          not yet full, and its text is the completion's hardest): rounds, their share, drafts accepted per
          sequence (acc), what the cost policy predicted of them (pred), the median and mean round (ms), and
          tokens per ms and sequence, (1 + acc) / mean (time adds up, so the mean, stalls and all)
  where   per kind and batch bucket (first rounds apart), the share of the sequence-milliseconds Σ ms × B and
          the sequence-milliseconds per token: ms/token/seq charges a round to every sequence live in it, so
          this is where a row's headline goes
  slow    per kind, the traced rounds at k's batch bucket that follow a round of their own length (no switch, no
          first round), each over the median of such rounds of its length in its own row: how many, the mean
          excess (ms) and its share of the mean round, and the share of rounds 0.5 ms or more over. Rounds of one
          length in one row are the same work, so the excess is what else ran (host stalls, a proposal run step by
          step while its chain waits for its graph, `bass.graphs`)
  openings  per run, the generations' first rounds at k's batch bucket, per kind and draft length: how many and
          their median (ms). A first round's time moves with the run (the host, what ran before): two lengths'
          first rounds compare within a run, not pooled over runs that drew different lengths
  shapes  per kind, the shapes each pass met without a graph (`deferred_captures_passes`: captured after their
          request, which ran them in a wider graph or step by step), and each pass against its run's fixed-L
          median, grouped by that count (0-1, 2-5, 6 or more); where the runs name them (`deferred_shapes_passes`,
          since the sixtieth pass), the commonest shapes

A length the policy chose whose tokens per ms fall below the fixed row's, while its acc falls below its pred,
was chosen for a promise its rounds did not keep.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from round_trace import summarise  # noqa: E402

from bass.round_costs import B_BUCKETS, bucket  # noqa: E402

COST_LABELS = ("cost", "cost, margin 0")  # a margin of 0 is the default policy (`DraftLengthConfig.length_margin`)


def kind_of(row: dict, k: int, drafter: str, fixed: int) -> str | None:
    """"cost", "fixed" or None: which side of the comparison a benchmark row is on (module docstring)."""
    if row.get("method") != "bass" or row.get("k") != k or row.get("drafter") != drafter:
        return None
    if row.get("look_ahead") is False or row.get("verdicts"):
        return None
    policy = row.get("policy")
    return "cost" if policy in COST_LABELS else "fixed" if policy == f"fixed L={fixed}" else None


def gather(runs: dict[str, dict], k: int, drafter: str, fixed: int) -> dict:
    """{"passes": {kind: [ms]}, "runs": {name: {kind: [ms]}}, "traces": {kind: [trace]}, "row_traces": {kind:
    [each row's traces]}, "run_traces": {name: {kind: [trace]}}, "deferred": {kind: [(run name, shapes met without
    a graph, ms) per pass]}, "named": {kind: Counter of those shapes' names}} of the chosen rows."""
    out: dict = {"passes": defaultdict(list), "runs": {}, "traces": defaultdict(list),
                 "row_traces": defaultdict(list), "run_traces": defaultdict(lambda: defaultdict(list)),
                 "deferred": defaultdict(list), "named": defaultdict(Counter)}
    for name, run in runs.items():
        per: dict[str, list[float]] = defaultdict(list)
        for row in run["rows"]:
            kind = kind_of(row, k, drafter, fixed)
            if kind is None:
                continue
            passes = row.get("ms_per_token_passes") or [row["ms_per_token"]]
            out["passes"][kind] += passes
            per[kind] += passes
            out["traces"][kind] += row.get("traces") or []
            out["row_traces"][kind].append(row.get("traces") or [])
            out["run_traces"][name][kind] += row.get("traces") or []
            deferred = row.get("deferred_captures_passes") or []
            out["deferred"][kind] += [(name, d, ms) for d, ms in zip(deferred, passes, strict=False)]
            for built in row.get("deferred_shapes_passes") or []:
                out["named"][kind].update(built)
        if per:
            out["runs"][name] = dict(per)
    return out


def rounds_table(traces: dict[str, list], k: int) -> list[dict]:
    """The "rounds" table (module docstring): one dict per (kind, first round or not, L) at k's batch bucket,
    from `round_trace.summarise` over each generation's first round and over the rest."""
    full, out = bucket(k, B_BUCKETS), []
    for kind, gens in sorted(traces.items()):
        for first, part in ((False, [t[1:] for t in gens]), (True, [t[:1] for t in gens])):
            groups = {L: g for (L, b), g in summarise(part).items() if b == full}
            total = sum(g["n"] for g in groups.values())
            out += [dict(kind=kind, first=first, L=L, rounds=g["n"], share=g["n"] / total, acc=g["acc"],
                         pred=g["pred"], median_ms=g["median"], mean_ms=g["mean"],
                         tokens_per_ms=None if g["acc"] is None else (1 + g["acc"]) / g["mean"])
                    for L, g in groups.items()]
    return out


def where_table(traces: dict[str, list]) -> list[dict]:
    """The "where" table (module docstring): per kind and batch bucket ("first": generations' first rounds),
    the share of Σ ms × B and Σ ms × B / Σ tokens, tokens = (accepted + B) per round."""
    seq_ms: dict[tuple, float] = defaultdict(float)
    tokens: dict[tuple, float] = defaultdict(float)
    for kind, gens in traces.items():
        for trace in gens:
            for i, (_L, B, ms, _sample, _ahead, *counts) in enumerate(trace):
                if not counts or counts[0] is None:
                    continue
                key = (kind, "first" if i == 0 else bucket(B, B_BUCKETS))
                seq_ms[key] += ms * B
                tokens[key] += counts[0] + B
    for kind in {kind for kind, _ in seq_ms}:  # the row's whole, under batch "all"
        seq_ms[(kind, "all")] = sum(v for (c, _), v in seq_ms.items() if c == kind)
        tokens[(kind, "all")] = sum(v for (c, _), v in tokens.items() if c == kind)
    order = sorted(seq_ms, key=lambda key: (key[1] == "all", key[0], key[1] != "first",
                                            key[1] if isinstance(key[1], int) else 0))
    return [dict(kind=kind, batch=b, share=seq_ms[(kind, b)] / seq_ms[(kind, "all")],
                 seq_ms_per_token=seq_ms[(kind, b)] / tokens[(kind, b)]) for kind, b in order]


def slow_table(row_traces: dict[str, list], k: int, over_ms: float = 0.5) -> list[dict]:
    """The "slow" table (module docstring): per kind, rounds at k's batch bucket after a round of their length,
    each against its row's median for that length."""
    full, out = bucket(k, B_BUCKETS), []
    for kind, rows in sorted(row_traces.items()):
        excess, means = [], []
        for traces in rows:
            steady = [(L, ms) for trace in traces for prev, (L, B, ms, *_) in zip(trace, trace[1:], strict=False)
                      if bucket(B, B_BUCKETS) == full and prev[0] == L and bucket(prev[1], B_BUCKETS) == full]
            by_length: dict[int, list[float]] = defaultdict(list)
            for L, ms in steady:
                by_length[L].append(ms)
            median = {L: statistics.median(v) for L, v in by_length.items()}
            excess += [ms - median[L] for L, ms in steady]
            means += [ms for _, ms in steady]
        if excess:
            out.append(dict(kind=kind, rounds=len(excess), mean_excess_ms=statistics.fmean(excess),
                            share_of_round=statistics.fmean(excess) / statistics.fmean(means),
                            share_over=sum(e >= over_ms for e in excess) / len(excess)))
    return out


def openings_table(run_traces: dict[str, dict], k: int) -> list[dict]:
    """The "openings" table (module docstring): per run, kind and L, the first rounds at k's batch bucket."""
    full, out = bucket(k, B_BUCKETS), []
    for name, kinds in run_traces.items():
        for kind, gens in sorted(kinds.items()):
            by_length: dict[int, list[float]] = defaultdict(list)
            for L, B, ms, *_ in (t[0] for t in gens if t):
                if bucket(B, B_BUCKETS) == full:
                    by_length[L].append(ms)
            out += [dict(run=name, kind=kind, L=L, rounds=len(v), median_ms=statistics.median(v))
                    for L, v in sorted(by_length.items())]
    return out


SHAPE_BINS = ((0, 1), (2, 5), (6, None))  # shapes met without a graph in a pass: the "shapes" table's groups
TOP_SHAPES = 4  # ... and how many of the commonest named shapes it lists


def shapes_table(got: dict) -> list[dict]:
    """The "shapes" table (module docstring): per kind, the mean count of shapes a pass met without a graph, and
    per group of that count the passes' median ratio to their run's fixed-L median (None without one), and the
    TOP_SHAPES commonest of the shapes the runs name, with their counts."""
    fixed = {name: statistics.median(per["fixed"]) for name, per in got["runs"].items() if "fixed" in per}
    out = []
    for kind, passes in sorted(got["deferred"].items()):
        if not passes:  # rows from before the benchmark counted them
            continue
        row = dict(kind=kind, passes=len(passes), mean_shapes=statistics.fmean(d for _, d, _ in passes))
        for lo, hi in SHAPE_BINS:
            ratios = [ms / fixed[name] for name, d, ms in passes
                      if name in fixed and d >= lo and (hi is None or d <= hi)]
            row[f"{lo}-{'' if hi is None else hi}"] = (len(ratios), statistics.median(ratios) if ratios else None)
        row["commonest"] = got["named"][kind].most_common(TOP_SHAPES)
        out.append(row)
    return out


def format_report(got: dict, rounds: list[dict], where: list[dict], fixed: int,
                  slow: list[dict] = (), shapes: list[dict] = (), openings: list[dict] = ()) -> str:
    def f(x, spec=".3f"):
        return "-" if x is None else format(x, spec)

    names = {"cost": "cost", "fixed": f"fixed L={fixed}"}
    lines = ["passes (ms/token/seq)"]
    for kind, xs in sorted(got["passes"].items()):
        lines.append(f"  {names[kind]:<12} {len(xs):4d} passes  median {statistics.median(xs):.3f}  "
                     f"mean {statistics.fmean(xs):.3f}")
    both = {n: r for n, r in got["runs"].items() if len(r) == 2}
    for name, per in both.items():
        lines.append(f"  {name:<44} cost {statistics.median(per['cost']):.3f}  "
                     f"fixed {statistics.median(per['fixed']):.3f}")
    lines.append("rounds at the full batch bucket")
    lines.append(f"  {'kind':<12} {'round':<6} {'L':>2} {'rounds':>6} {'share':>6} {'acc':>6} {'pred':>6} "
                 f"{'median':>6} {'mean':>5} {'tok/ms/seq':>10}")
    for r in rounds:
        lines.append(f"  {names[r['kind']]:<12} {'first' if r['first'] else 'later':<6} {r['L']:>2} {r['rounds']:>6} "
                     f"{r['share']:>6.2f} {f(r['acc']):>6} {f(r['pred']):>6} {r['median_ms']:>6.2f} "
                     f"{r['mean_ms']:>5.2f} {f(r['tokens_per_ms']):>10}")
    lines.append("where the sequence-milliseconds go")
    for w in where:
        lines.append(f"  {names[w['kind']]:<12} batch {w['batch']!s:<6} share {w['share']:.3f}  "
                     f"seq-ms/token {w['seq_ms_per_token']:.4f}")
    if slow:
        lines.append("slow rounds at the full batch bucket (after a round of their length, against their row's median)")
        for r in slow:
            lines.append(f"  {names[r['kind']]:<12} {r['rounds']:5d} rounds  mean excess {r['mean_excess_ms']:.3f} ms "
                         f"({r['share_of_round']:.1%} of a round)  0.5 ms or more over: {r['share_over']:.1%}")
    if openings:
        lines.append("first rounds at the full batch bucket, per run: rounds x median ms")
        for name in dict.fromkeys(o["run"] for o in openings):
            cells = [f"{names['fixed'] if o['kind'] == 'fixed' else 'cost L=' + str(o['L'])}: "
                     f"{o['rounds']} x {o['median_ms']:.2f}" for o in openings if o["run"] == name]
            lines.append(f"  {name:<44} " + "   ".join(cells))
    if shapes:
        lines.append("shapes a pass met without a graph, and the pass against its run's fixed-L median")
        for r in shapes:
            groups = "  ".join(f"{key}: {n} passes {f(ratio)}" for key, (n, ratio) in
                               ((key, r[key]) for key in r if "-" in key))
            lines.append(f"  {names[r['kind']]:<12} {r['passes']:4d} passes, {r['mean_shapes']:.1f} a pass   {groups}")
            if r.get("commonest"):
                lines.append("    commonest: " + ", ".join(f"{name} x{n}" for name, n in r["commonest"]))
    return "\n".join(lines)


def run_names(paths: list[Path]) -> list[str]:
    """Each run's name in the tables: its file name, with as many of its folders before it as tell it from the
    others' (the `ab` stage's runs are all real_bench.json: keyed by file name, they overwrote one another)."""
    depth, deepest = 1, max(len(path.parts) for path in paths)
    while True:
        names = ["/".join(path.parts[-depth:]) for path in paths]
        if len(set(names)) == len(names) or depth >= deepest:
            return names
        depth += 1


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", type=Path, nargs="+", help="real_bench.py JSONs (with --trace for the round tables)")
    p.add_argument("--k", type=int, default=8)
    p.add_argument("--drafter", default="model")
    p.add_argument("--fixed", type=int, default=3, help="the fixed length the cost policy is set against")
    p.add_argument("--out", type=Path, default=None, help="also write the tables as JSON")
    a = p.parse_args(argv)
    got = gather({name: json.loads(path.read_text()) for name, path in zip(run_names(a.runs), a.runs, strict=True)},
                 a.k, a.drafter, a.fixed)
    if not got["passes"]:
        raise SystemExit(f"no BASS row with drafter {a.drafter!r} at k = {a.k} under the cost policy or fixed "
                         f"L = {a.fixed} in these files")
    rounds, where = rounds_table(got["traces"], a.k), where_table(got["traces"])
    slow, shapes = slow_table(got["row_traces"], a.k), shapes_table(got)
    openings = openings_table(got["run_traces"], a.k)
    print(format_report(got, rounds, where, a.fixed, slow, shapes, openings))
    out = dict(passes={kind: xs for kind, xs in got["passes"].items()}, runs=got["runs"], rounds=rounds, where=where,
               slow=slow, shapes=shapes, openings=openings)
    if a.out:
        a.out.write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
