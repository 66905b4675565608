"""The report of `bench/real_bench.py`: ratios, table and plot, as pure functions of the rows it measured.

    python -m bench.plot_real RESULTS.json [OUT.png]     (re-renders the table and the plot from the JSON)

Left panel: per-sequence ms/token against k, one line per method (regular, BASS with each drafter,
single-sequence). Right panel: speed-up over regular decoding at the same k of every row at the
policy k (draft-length policies, with and without the streaming verdict tester), 1.0 marked.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bass.config import DraftLengthConfig

SETTINGS = ("projections", "proposals")  # pairs whose rows hold their setting in the field named like the pair


def policy_label(cfg: DraftLengthConfig) -> str:
    """A row's name for a draft-length policy: "auto", "fixed L=3", "heuristic" (from l0 = 7, the paper's) or the
    policy."""
    if cfg.policy == "auto":
        return "auto"
    if cfg.policy == "fixed":
        return f"fixed L={cfg.l0}"
    return cfg.policy if cfg.l0 == 7 else f"{cfg.policy} from L={cfg.l0}"


# the drafters' own rows run the engine's default policy, left out of their label
DEFAULT_POLICY = policy_label(DraftLengthConfig())
UNNAMED_POLICIES = (None, DEFAULT_POLICY)


def row_label(r: dict) -> str:
    """'regular', 'BASS model', 'BASS model heuristic', 'BASS model +verdicts (service)', 'single model',
    'regular (look-ahead off)'."""
    ahead = "" if r.get("pair") != "look-ahead" else f" (look-ahead {'on' if r['look_ahead'] else 'off'})"
    if r.get("pair") in SETTINGS:
        ahead = f" ({r[r['pair']]})"
    if r["method"] == "regular":
        return "regular" + ahead
    name = f"{'BASS' if r['method'] == 'bass' else 'single'} {r['drafter']}"
    if r.get("policy") not in UNNAMED_POLICIES:
        name += f" {r['policy']}"
    return name + (f" +verdicts ({r['verdicts']})" if r.get("verdicts") else "") + ahead


def add_ratios(rows: list[dict]) -> None:
    """x_regular = regular's ms/token/seq / the row's at the same k (> 1: faster than regular decoding);
    x_throughput = the row's tokens/s / regular's. None where no regular row has that k. A row of the
    look-ahead, projections or proposals pair is divided by the regular row of its own pair with its own
    setting."""
    def key(r: dict) -> tuple:
        if r.get("pair") in SETTINGS:
            return r["k"], r["pair"], r[r["pair"]]
        return r["k"], r["look_ahead"] if r.get("pair") == "look-ahead" else None

    regular = {key(r): r for r in rows if r["method"] == "regular"
               and r.get("pair") in (None, "look-ahead", *SETTINGS)}
    for r in rows:
        base = regular.get(key(r)) or regular.get((r["k"], None))
        r["x_regular"] = base["ms_per_token"] / r["ms_per_token"] if base and r["ms_per_token"] > 0 else None
        r["x_throughput"] = r["throughput"] / base["throughput"] if base and base["throughput"] > 0 else None


def _num(x, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def format_table(rows: list[dict]) -> str:
    """One aligned line per row: the columns of the module docstring of bench/real_bench.py."""
    width = max([len(row_label(r)) for r in rows] + [6])
    head = (f"{'method':<{width}} {'k':>3} {'ms/tok/seq':>10} {'tok/s':>8} {'x_reg':>6} {'accept':>6} "
            f"{'tok/round':>9} {'mean L':>6}")
    lines = [head]
    for r in rows:
        lines.append(f"{row_label(r):<{width}} {r['k']:>3} {r['ms_per_token']:>10.2f} {r['throughput']:>8.1f} "
                     f"{_num(r.get('x_regular'), '.2f'):>6} {_num(r.get('acceptance'), '.3f'):>6} "
                     f"{r['tokens_per_round']:>9.2f} {r['mean_draft_length']:>6.2f}")
    return "\n".join(lines)


def plot(results: dict, path: str | Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows, info = results["rows"], results["info"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    main = [r for r in rows if not r.get("pair") and r.get("policy") in UNNAMED_POLICIES]
    for label in dict.fromkeys(row_label(r) for r in main):
        pts = sorted((r["k"], r["ms_per_token"]) for r in main if row_label(r) == label)
        left.plot([k for k, _ in pts], [m for _, m in pts], marker="o", label=label)
    left.set(xscale="log", xlabel="k (sequences per prompt)", ylabel="ms / token / sequence",
             title="per-sequence latency (lower is better)")
    ks = sorted({r["k"] for r in rows})
    left.set_xticks(ks, [str(k) for k in ks])
    left.legend(fontsize=8)
    pk = info.get("policy_k")
    side = [r for r in rows if r["k"] == pk and r.get("x_regular") is not None]
    right.barh([row_label(r) for r in side], [r["x_regular"] for r in side], color="tab:blue")
    right.axvline(1.0, color="black", lw=1)
    right.set(xlabel="speed-up over regular decoding (ms/token/seq ratio)", title=f"k = {pk}")
    right.tick_params(axis="y", labelsize=8)
    fig.suptitle(f"{info.get('target', '')}: {info.get('device', '')}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str]) -> None:
    results = json.loads(Path(argv[0]).read_text())
    out = Path(argv[1]) if len(argv) > 1 else Path(argv[0]).with_suffix(".png")
    plot(results, out)
    print(format_table(results["rows"]))


if __name__ == "__main__":
    main(sys.argv[1:])
