"""Where a request's opening goes, per draft-length policy: its prefill, its first round and its second.

    PYTHONPATH=. python bench/opening.py --target /var/tmp/<target>.gguf --k 8 --fixed-l 3 --out bench/results/
    PYTHONPATH=. python bench/opening.py --target <tiny folder> --draft <tiny folder> --k 2 --max-new-tokens 8

`policy_gap.py` found the cost policy's requests opening slower than fixed L = 3's on an H200 at k = 8: first
rounds of 3.4-3.9 ms against 2.6-2.7, where both drafted L = 2 or 3 from the same first step
(`bench/results/policy_gap_2026-12-02_h200_widths.txt`). One model load; the policies' requests over the same
prompts, interleaved prompt by prompt (`real_passes.measure`'s order, after its warm-up pass), then three views
(what they showed, and the change they led to: README, Real weights, the sixty-second pass):

  opening   per policy, the median over its requests of: the prefill (ms, the engine's prefill_s), rounds 1 and 2
            as the decode clock reads them (their results read, `round_ends_s`), the host's wait in each round's
            one synchronisation (`round_waits_s`: the rest of a round is host work the device did not hide), and
            each round's draft length; once as benchmarked and once with the device synchronised before every
            request, "idle in" being what that synchronisation waited (the previous request's work still queued)
  host      the synced requests' host clock around the round loop's steps (`labelled`): per policy and window (the
            prefill, round 1, round 2, each to its `policy.update`), the median ms each step held the host
  profile   one request per policy under torch.profiler, the round loop's steps labelled (`labelled`): the opening's
            labelled host spans in order (ms from the prefill's start, ms long), and per window (the prefill,
            round 1, round 2) the device's busy ms (the union of its kernel and copy intervals) and the host ops
            of most self time.

On a CPU the profile has no device work (busy is None) and the waits are 0: the plumbing CI checks.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from profile_round import interval_union, is_device_work, sync  # noqa: E402

import bass.speculative as spec  # noqa: E402
import bass.transfer as transfer  # noqa: E402
from bass.config import DraftLengthConfig, EngineConfig, SamplingParams  # noqa: E402
from bass.device import device_line  # noqa: E402
from bass.draft_length import DraftLengthPolicy  # noqa: E402
from bass.engine import Engine  # noqa: E402
from bass.events import GenerationResult  # noqa: E402

LABEL = "opening:"  # the prefix of the record_function labels below


@contextlib.contextmanager
def labelled(clock: list | None = None) -> Iterator[None]:
    """Label the round loop's steps for the profiler while the block runs: the target's prefill and the drafter's,
    the policy's decision (`lengths`) and its update, a round's launch (`bass.speculative._launch`: the drafter's
    `propose`, then `_verify`), the drafter's `commit`, the reads of the first tokens and of each round's results
    (`HostRead.tolist`) and the host's waits for the device (`torch.cuda.Event.synchronize`). With `clock`, each
    step's host span (start, end, label) in µs of the host clock is appended to it as well."""
    from bass.drafters import Drafter

    patched: list[tuple[object, str, Callable]] = []

    def wrap(owner: object, attr: str, label: str) -> None:
        fn = getattr(owner, attr)

        def labelled_fn(*args, **kwargs):
            t = time.perf_counter()
            try:
                with torch.profiler.record_function(LABEL + label):
                    return fn(*args, **kwargs)
            finally:
                if clock is not None:
                    clock.append((1e6 * t, 1e6 * time.perf_counter(), label))

        patched.append((owner, attr, fn))
        setattr(owner, attr, labelled_fn)

    wrap(Engine, "_prefill", "prefill target")
    for method, label in (("prefill", "prefill draft"), ("propose", "propose"), ("commit", "commit")):
        for cls in {c for c in _subclasses(Drafter) if method in vars(c)}:
            wrap(cls, method, label)
    wrap(DraftLengthPolicy, "lengths", "policy.lengths")
    wrap(DraftLengthPolicy, "update", "policy.update")
    wrap(spec, "_launch", "launch")
    wrap(spec, "_verify", "verify")
    if hasattr(transfer, "HostRead"):  # (the code before it read the first tokens inside the target's prefill)
        wrap(transfer.HostRead, "tolist", "read")
    if torch.cuda.is_available():
        wrap(torch.cuda.Event, "synchronize", "wait")
    try:
        yield
    finally:
        for owner, attr, fn in reversed(patched):
            setattr(owner, attr, fn)


def _subclasses(cls: type) -> list[type]:
    out = []
    for sub in cls.__subclasses__():
        out += [sub, *_subclasses(sub)]
    return out


def opening_of(result: GenerationResult) -> dict:
    """A request's opening from its result: prefill, rounds 1 and 2 (ms), their waits (ms) and draft lengths."""
    st = result.stats
    ends, waits, lengths = list(st.round_ends_s), list(st.round_waits_s), list(st.draft_lengths)
    out = {"prefill_ms": 1e3 * st.prefill_s}
    for i in (0, 1):
        if i < len(ends):
            out[f"round{i + 1}_ms"] = 1e3 * (ends[i] - (ends[i - 1] if i else 0.0))
            out[f"wait{i + 1}_ms"] = 1e3 * waits[i] if i < len(waits) else None
            out[f"L{i + 1}"] = lengths[i] if i < len(lengths) else None
    return out


def _median(rows: list[dict], key: str) -> float | None:
    values = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(values) if values else None


def summary(rows: list[dict]) -> dict:
    """The medians of `opening_of`'s figures (and "idle in") over requests, with the commonest L1 and L2."""
    keys = ("idle_in_ms", "prefill_ms", "round1_ms", "wait1_ms", "round2_ms", "wait2_ms")
    out = {key: _median(rows, key) for key in keys}
    for key in ("L1", "L2"):
        values = [r[key] for r in rows if r.get(key) is not None]
        out[key] = max(set(values), key=values.count) if values else None
    out["requests"] = len(rows)
    return out


def windows_of(spans: list[tuple[float, float, str]]) -> list[tuple[str, float, float]]:
    """(name, start, end) of a request's opening windows from its labelled spans (start, end, label) in order: the
    prefill, from its first span to the end of the last one begun before the first `policy.lengths` (the prefills
    and the first tokens' read); round 1 and round 2, each to its `policy.update`."""
    t0 = spans[0][0]
    first_round = min((a for a, _, name in spans if name == "policy.lengths"), default=math.inf)
    prefilled = max(end for a, end, _ in spans if a < first_round)
    updates = [end for _, end, name in spans if name == "policy.update"][:2]
    return [("prefill", t0, prefilled)] + [(f"round {i + 1}", prefilled if i == 0 else updates[i - 1], end)
                                           for i, end in enumerate(updates)]


def host_split(spans: list[tuple[float, float, str]]) -> dict[str, dict[str, float]]:
    """Per opening window, the ms of host time each label's spans spent inside it (a span counts in the window it
    starts in; nested labels count in their own right: a launch holds its propose and verify)."""
    out: dict[str, dict[str, float]] = {}
    for name, w0, w1 in windows_of(spans):
        got = out.setdefault(name, defaultdict(float))
        for a, b, label in spans:
            if w0 <= a < w1:
                got[label] += (b - a) / 1e3
    return {name: dict(v) for name, v in out.items()}


def profile_windows(events, top: int = 6) -> dict:
    """The profile view of one request (module docstring) from torch.profiler's `events()`: the labelled host spans
    of its opening and, per window, device busy ms (None without device work) and the host ops of most self time."""
    spans = sorted((e.time_range.start, e.time_range.end, e.name[len(LABEL):]) for e in events
                   if e.name.startswith(LABEL) and e.device_type == torch.autograd.DeviceType.CPU)
    if not spans:
        return {"spans": [], "windows": []}
    t0 = spans[0][0]
    bounds = windows_of(spans)
    end_all = bounds[-1][2]
    windows = []
    for name, w0, w1 in bounds:
        busy = [(max(e.time_range.start, w0), min(e.time_range.end, w1)) for e in events if is_device_work(e)]
        ops = defaultdict(float)
        for e in events:
            if (e.device_type == torch.autograd.DeviceType.CPU and w0 <= e.time_range.start < w1
                    and not e.name.startswith(LABEL)):
                ops[e.name] += e.self_cpu_time_total
        most = sorted(ops.items(), key=lambda kv: -kv[1])[:top]
        windows.append({"window": name, "ms": (w1 - w0) / 1e3,
                        "device_busy_ms": interval_union(busy) / 1e3 if any(b > a for a, b in busy) else None,
                        "top_host_ops": [(n, round(us / 1e3, 4)) for n, us in most]})
    return {"spans": [(round((a - t0) / 1e3, 4), round((b - a) / 1e3, 4), name) for a, b, name in spans
                      if a <= end_all],
            "windows": windows}


def _median_split(splits: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Per window and label, the median over requests of `host_split`'s ms (0 where a request had none)."""
    windows = dict.fromkeys(w for s in splits for w in s)
    return {w: {label: round(statistics.median(s.get(w, {}).get(label, 0.0) for s in splits), 4)
                for label in dict.fromkeys(x for s in splits for x in s.get(w, {}))} for w in windows}


def format_report(opening: dict[str, dict[str, dict]], host: dict[str, dict], profiles: dict[str, dict]) -> str:
    """The views as text (module docstring)."""
    cols = ("idle_in_ms", "prefill_ms", "round1_ms", "wait1_ms", "L1", "round2_ms", "wait2_ms", "L2")
    lines = ["opening (median over requests; ms)", "  mode         policy         requests " +
             " ".join(f"{c.replace('_ms', ''):>8}" for c in cols)]
    for mode, per in opening.items():
        for policy, s in per.items():
            cells = " ".join(f"{'-' if s[c] is None else (f'{s[c]:.3f}' if c.endswith('_ms') else s[c]):>8}"
                             for c in cols)
            lines.append(f"  {mode:<12} {policy:<14} {s['requests']:>8} {cells}")
    lines.append("host (synced requests, unprofiled: median ms of each step's host spans per window)")
    for policy, per in host.items():
        for window, labels in per.items():
            lines.append(f"  {policy:<14} {window:<8} " + ", ".join(f"{k} {v:.3f}" for k, v in labels.items()))
    for policy, prof in profiles.items():
        lines.append(f"profile: {policy}")
        for w in prof["windows"]:
            busy = w["device_busy_ms"]
            lines.append(f"  {w['window']:<8} {w['ms']:7.3f} ms, device busy {'-' if busy is None else f'{busy:.3f}'}; "
                         "host ops: " + ", ".join(f"{n[:32]} {ms:.3f}" for n, ms in w["top_host_ops"]))
        lines.append("  spans (ms from the prefill's start, ms long): " + "; ".join(
            f"{a:.2f}+{d:.3f} {name}" for a, d, name in prof["spans"]))
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", default="embedded", help="'embedded', a .gguf file, a folder (tests: a tiny model)")
    p.add_argument("--draft", default="auto", help="'auto' (the trained draft that ships for the target) or a spec")
    p.add_argument("--drafter", default="model")
    p.add_argument("--backend", default="auto")
    p.add_argument("--k", type=int, default=8)
    p.add_argument("--prompts", type=int, default=8, help="the first N HumanEval prompts")
    p.add_argument("--fixed-l", type=int, default=3, help="the fixed length beside the cost policy")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--repeats", type=int, default=2, help="passes over the prompts in each mode")
    p.add_argument("--trace", action="store_true", help="the policies trace their rounds, as `real_bench.py --trace`")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="bench/results/")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    from sandbox import load_humaneval

    a = parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    engine = Engine(EngineConfig(target=a.target, draft=a.draft, drafter="auto", backend=a.backend))
    prompts = [p.prompt for p in load_humaneval()[:a.prompts]]
    params = SamplingParams(temperature=0.8, top_p=0.95, max_new_tokens=a.max_new_tokens, seed=a.seed)
    policies = {"cost": DraftLengthConfig(trace=a.trace),
                f"fixed L={a.fixed_l}": DraftLengthConfig(policy="fixed", l0=a.fixed_l, trace=a.trace)}
    engine.warm_draft_lengths(prompts[0], params, k=a.k, method="bass", drafter=a.drafter)

    def run(i: int, p: int, cfg: DraftLengthConfig) -> GenerationResult:
        return engine.generate(prompts[i], k=a.k, method="bass", drafter=a.drafter, draft_length=cfg,
                               params=dataclasses.replace(params, seed=a.seed + p))

    for i in range(len(prompts)):  # the warm-up pass: each prompt's shapes captured
        for cfg in policies.values():
            run(i, 0, cfg)
    opening: dict[str, dict[str, dict]] = {}
    splits: dict[str, list[dict]] = {name: [] for name in policies}  # the synced requests' host splits
    for mode in ("benchmarked", "synced"):
        rows: dict[str, list[dict]] = {name: [] for name in policies}
        for p in range(1, a.repeats + 1):
            for i in range(len(prompts)):
                for name, cfg in policies.items():
                    t = time.perf_counter()
                    if mode == "synced":
                        sync()
                    idle_in = 1e3 * (time.perf_counter() - t) if mode == "synced" else None
                    clock: list = []
                    with labelled(clock) if mode == "synced" else contextlib.nullcontext():
                        result = run(i, p + (mode == "synced") * a.repeats, cfg)
                    rows[name].append({"idle_in_ms": idle_in, **opening_of(result)})
                    if clock:
                        splits[name].append(host_split(sorted(clock)))
        opening[mode] = {name: summary(r) for name, r in rows.items()}
    host = {name: _median_split(s) for name, s in splits.items()}
    profiles = {}
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    for j, (name, cfg) in enumerate(policies.items()):
        with labelled(), profile(activities=activities) as prof:
            run(j % len(prompts), 2 * a.repeats + 1, cfg)
        profiles[name] = profile_windows(prof.events())
    report = dict(device=device_line(engine.device), k=a.k, prompts=len(prompts), max_new_tokens=a.max_new_tokens,
                  args=vars(a), opening=opening, host=host, profiles=profiles)
    (out / "opening.json").write_text(json.dumps(report, indent=1, default=str))
    text = f"{report['device']}\n{format_report(opening, host, profiles)}"
    (out / "opening.txt").write_text(text + "\n")
    print(text)
    return report


if __name__ == "__main__":
    main()
