"""Pass@First and Pass@All against the time budget, per method, from `python -m bass eval humaneval
--budgets ... --methods ... --out F.json`, beside the paper's figures (7.8B model on an A100).

    python -m bench.budget plot F.json [G.json ...] [OUT.png]

Several files (e.g. one run per method, to keep each within a device call's time limit) are merged:
their methods side by side, which needs the same budgets in each.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bass.eval.budgets import budget_key, format_budget_table

# BASS, Qian et al. 2024: HumanEval within a time budget, 7.8B target on an A100
PAPER = {"pass_at_first": 0.43, "pass_at_all": 0.61}


def curves(report: dict) -> dict[str, dict[str, list[tuple[float, float]]]]:
    """{method: {metric: [(budget, value), ...]}} for Pass@First and Pass@All, budgets ascending."""
    out = {}
    for method, r in report["methods"].items():
        pts = [(b, r["by_budget"][budget_key(b)]["summary"]) for b in sorted(report["budgets"])]
        out[method] = {m: [(b, s.get(m, 0.0)) for b, s in pts] for m in PAPER}
    return out


def plot(report: dict, path: str | Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    data = curves(report)
    for ax, (metric, title) in zip(axes, (("pass_at_first", "Pass@First"), ("pass_at_all", "Pass@All")),
                                   strict=True):
        for method, series in data.items():
            ax.plot([b for b, _ in series[metric]], [v for _, v in series[metric]], marker="o", label=method)
        ax.axhline(PAPER[metric], color="gray", ls="--", lw=1, label=f"paper, 7.8B on A100 ({PAPER[metric]:.0%})")
        ax.set(xlabel="time budget per problem (s, prefill included)", title=title, ylim=(0, 1))
        ax.legend(fontsize=8)
    axes[0].set_ylabel("share of problems")
    first = next(iter(report["methods"].values()))
    fig.suptitle(f"HumanEval, {first['config']['target']}, k={first['config']['k']}, "
                 f"{first['summary']['problems']} problems; {report.get('device', '')}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def merge(reports: list[dict]) -> dict:
    """One report with the methods of all of `reports` (the first's device line and budgets)."""
    budgets = reports[0]["budgets"]
    for r in reports[1:]:
        if r["budgets"] != budgets:
            raise ValueError(f"cannot merge runs with budgets {budgets} and {r['budgets']}: use the same --budgets")
    return {**reports[0], "methods": {m: v for r in reports for m, v in r["methods"].items()},
            "seconds": sum(r.get("seconds", 0.0) for r in reports)}


def main(argv: list[str]) -> None:
    inputs = [a for a in argv if a.endswith(".json")]
    report = merge([json.loads(Path(p).read_text()) for p in inputs])
    pngs = [a for a in argv if a.endswith(".png")]
    out = Path(pngs[0]) if pngs else Path(inputs[0]).with_suffix(".png")
    plot(report, out)
    print(format_budget_table(report["methods"], report["budgets"]))


if __name__ == "__main__":
    main(sys.argv[1:])
