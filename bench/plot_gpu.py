"""The report of `bench/gpu_bench.py`: derived columns, table and plot, from the rows it measured.

    python -m bench.plot_gpu RESULTS.json [OUT.png]     (re-renders the table and the plot from the JSON)

Left panel: per-sequence ms/token against k at the main acceptance, one line per method, the
bandwidth floors of BASS-ragged and of regular decoding dashed. Right panel: BASS-ragged at k=8
against the measured per-token acceptance, with regular decoding for reference. Pure functions of
the JSON, so the picture can be redrawn on any machine with matplotlib.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bass.metrics import gpu_utilization


# ---- arithmetic (pure; tests/bench checks it against hand-computed values) ----------------------------
def kv_bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int, elem_size: int = 2) -> int:
    """K and V of one token in every layer."""
    return 2 * num_layers * num_kv_heads * head_dim * elem_size


def pass_bytes(weights: int, kv_per_token: int, prompt_len: int, batch: int, mean_suffix: float) -> float:
    """Bytes one forward over `batch` sequences reads: weights once, the shared prompt's K/V once, each
    sequence's own K/V (mean length `mean_suffix` over the run)."""
    return weights + kv_per_token * (prompt_len + batch * mean_suffix)


def floor_ms_per_token(target_passes: int, draft_passes: int, target_pass_bytes: float, draft_pass_bytes: float,
                       bandwidth: float, new_tokens: int, sequential: int = 1) -> float:
    """Per-sequence ms/token if every pass ran at the copy bandwidth.

    All passes of a batch end together, so each sequence waits for all of them / new_tokens. With
    `sequential` = k sequences run one after another, sequence j waits for j/k of the work; the mean over
    j = 1..k is (k + 1) / (2k).
    """
    seconds = (target_passes * target_pass_bytes + draft_passes * draft_pass_bytes) / bandwidth
    return 1e3 * seconds * (sequential + 1) / (2 * sequential) / new_tokens


def hf_ms_per_token(t_full_s: float, t_first_s: float, new_tokens: int) -> float:
    """`generate` times of new_tokens and of 1 token: the difference is decoding after the prefill."""
    return 1e3 * (t_full_s - t_first_s) / new_tokens


def sequential_ms_per_token(t_each_s: float, t_prefill_s: float, k: int, new_tokens: int) -> float:
    """k sequences one after another, each taking t_each_s (its own prefill included), the clock started
    after the first prefill: sequence j ends at j * t_each - t_prefill; mean over j of that / new_tokens."""
    return 1e3 * ((k + 1) / 2 * t_each_s - t_prefill_s) / new_tokens


def add_derived(rows: list[dict], *, peak_flops: float, flops_per_token: float) -> None:
    """Utilisation and speed-ups over our regular and HF's regular decoding at the same k, in place."""
    ours = {r["k"]: r["ms_per_token"] for r in rows if r["method"] == "regular (ours)"}
    hf = {r["k"]: r["ms_per_token"] for r in rows if r["method"].startswith("HF generate")}
    for r in rows:
        r["util"] = gpu_utilization(flops_per_token, r["throughput"], peak_flops) if r["throughput"] else None
        r["x_regular"] = ours[r["k"]] / r["ms_per_token"] if r["k"] in ours else None
        r["x_hf"] = hf[r["k"]] / r["ms_per_token"] if r["k"] in hf else None



COLUMNS = [  # (header, row key, format, width)
    ("method", "method", "{}", 26), ("k", "k", "{}", 3), ("a_tgt", "alpha_target", "{:.1f}", 5),
    ("alpha", "alpha", "{:.2f}", 5), ("acc", "acceptance", "{:.2f}", 4), ("ms/tok/seq", "ms_per_token", "{:.2f}", 10),
    ("floor", "floor_ms", "{:.2f}", 5), ("tok/rnd", "tokens_per_round", "{:.2f}", 7),
    ("tok/s", "throughput", "{:.0f}", 6), ("util%", "util", "{:.1f}", 5), ("x_ours_reg", "x_regular", "{:.2f}", 10),
    ("x_hf_reg", "x_hf", "{:.2f}", 8),
]


def format_table(rows: list[dict]) -> str:
    """One line per row; '-' where a column does not apply (e.g. acceptance of regular decoding)."""
    lines = [" ".join(f"{h:>{w}}" for h, _, _, w in COLUMNS)]
    for r in rows:
        cells = []
        for _, key, fmt, w in COLUMNS:
            v = r.get(key)
            v = 100 * v if key == "util" and v is not None else v
            cells.append(f"{'-' if v is None else fmt.format(v):>{w}}")
        lines.append(" ".join(cells))
    return "\n".join(lines)


def series(rows: list[dict], method: str, key: str = "ms_per_token", alpha: float | None = None) -> tuple[list, list]:
    """(k values, `key` values) of one method, at acceptance target `alpha` when given, sorted by k."""
    pts = sorted((r["k"], r[key]) for r in rows if r["method"] == method and r.get(key) is not None
                 and (alpha is None or r.get("alpha_target") in (None, alpha)))
    return [k for k, _ in pts], [v for _, v in pts]


def plot(results: dict, path: str | Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows, info = results["rows"], results["info"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5), gridspec_kw={"width_ratios": [3, 2]})
    methods = sorted({r["method"] for r in rows})
    for m in methods:
        ks, ms = series(rows, m, alpha=0.8)
        if ks:
            left.plot(ks, ms, marker="o", label=m, linestyle="-" if len(ks) > 1 else "none")
    for m in ("BASS-ragged", "regular (ours)"):
        ks, fl = series(rows, m, "floor_ms", alpha=0.8)
        if ks:
            left.plot(ks, fl, linestyle="--", color="grey", linewidth=1)
            left.annotate(f"floor {m.split()[0]}", (ks[-1], fl[-1]), fontsize=7, color="grey")
    left.set(xscale="log", yscale="log", xlabel="k (sequences per prompt)", ylabel="ms / token / sequence",
             title="per-sequence latency, alpha ~ 0.8 (lower is better)")
    left.set_xticks([1, 2, 4, 8, 16, 32], labels=["1", "2", "4", "8", "16", "32"])
    left.grid(True, which="both", alpha=0.3)
    if left.get_legend_handles_labels()[0]:
        left.legend(fontsize=7)
    k8 = sorted((r["alpha"], r["ms_per_token"]) for r in rows if r["method"] == "BASS-ragged" and r["k"] == 8)
    if k8:
        right.plot([a for a, _ in k8], [m for _, m in k8], marker="o", label="BASS-ragged")
    reg = [r["ms_per_token"] for r in rows if r["method"] == "regular (ours)" and r["k"] == 8]
    if reg:
        right.axhline(reg[0], color="grey", linestyle=":", label="regular (ours)")
    right.set(xlabel="measured per-token acceptance alpha", ylabel="ms / token / sequence", title="k = 8")
    right.grid(True, alpha=0.3)
    if right.get_legend_handles_labels()[0]:
        right.legend(fontsize=7)
    fig.suptitle(f"synthetic acceptance, random bf16 weights, Llama-7B shapes — {info['device']}", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    src = Path(sys.argv[1])
    data = json.loads(src.read_text())
    print(format_table(data["rows"]))
    plot(data, sys.argv[2] if len(sys.argv) > 2 else src.with_suffix(".png"))
