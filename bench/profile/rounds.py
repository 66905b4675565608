"""Where one BASS (or regular) round's time goes: torch.profiler's top operators, and a split of the wall
time. `profile_round` (`bench/gpu_bench.py`): CUDA events around every target and draft forward, GPU
time without host syncs. `round_breakdown` (`bench/real_bench.py --profile`, CPU or GPU): the device is
synchronised around the drafter's proposal and the target's verify, so wall time splits exactly into

    round = drafter (propose, host and device) + verify (target forward) + host bookkeeping (the rest:
            sampling and acceptance, the round's host copy, stop strings, cache rollback, Python)

The syncs cost a little themselves: the split is for profiling runs only, never for timed rows. They also
leave nothing for look-ahead (`bass.decode.pipeline`) to overlap, so `round_breakdown` turns it off: the split
is of rounds run one after another, and on CUDA "verify" holds the rule captured with the forward.

`pipelined_round` (`bench.profile.steps`): rounds as the engine runs them, look-ahead on where the engine
has it (each round launched before the previous one is read), no syncs inside. Then only the device's
occupancy says where time goes: over the decode window of one profiled generation,

    busy = |union of the kernel / memcpy / memset intervals|    (overlapping kernels count once)
    idle = wall - busy                                          (the device waits for the host)

per round; a host-bound round shows as idle, one the device bounds as busy ~ wall."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch.autograd import DeviceType

from bass.config import SamplingParams
from bass.drafters.base import Drafter
from bench.common import profiler_tables, sync

if TYPE_CHECKING:
    from torch.autograd.profiler_util import FunctionEvent

    from bass.engine import Engine
    from bass.events import GenerationResult


class _Timed:
    """A forward callable with CUDA events around each call (no host sync) and a profiler label."""

    def __init__(self, fn, label: str, log: list):
        self.__dict__.update(fn=fn, label=label, log=log)

    def __call__(self, *args, **kwargs):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        with torch.profiler.record_function(self.label):
            out = self.fn(*args, **kwargs)
        end.record()
        self.log.append((self.label, start, end))
        return out

    def __getattr__(self, name: str):
        return getattr(self.fn, name)


@contextlib.contextmanager
def batches_profiled(engine, activities: list) -> Iterator[list]:
    """torch.profiler over the engine's batches on its device thread, where they run (`bass.engine.scheduler`): the
    list yielded holds each batch's profile once the block ends (which waits for the last batch to end)."""
    from torch.profiler import profile

    from bass.engine import batch

    run, profiles = batch.Batch.run, []

    def profiled(self) -> None:
        with profile(activities=activities) as prof, torch.profiler.record_function(DECODE_MARK):
            run(self)
            sync()
        profiles.append(prof)

    batch.Batch.run = profiled
    try:
        yield profiles
        engine.scheduler.settle()
    finally:
        batch.Batch.run = run


def profile_round(engine, prompt: list[int], k: int, params: SamplingParams, n: int, out: Path, info: dict,
                  method: str = "bass") -> None:
    """Where a round's time goes: GPU time of the verify and the draft steps (CUDA events), the rest of
    the wall time (sampling, cache bookkeeping, host syncs, Python), and torch.profiler's top ops."""
    from torch.profiler import ProfilerActivity

    if not hasattr(engine, "_target_fwd"):
        raise RuntimeError("this engine has no _target_fwd / _draft_fwd to time")
    params = dataclasses.replace(params, max_new_tokens=n)
    saved, log = (engine._target_fwd, engine._draft_fwd), []
    _set_target(engine, _Timed(saved[0], "target forward", log))
    engine._draft_fwd = _Timed(saved[1] or engine.draft.model, "draft forward", log)
    try:
        for _ in engine.stream([prompt], k=k, params=params, method=method):
            pass
        log.clear()
        result = None
        for ev in engine.stream([prompt], k=k, params=params, method=method):
            result = ev.result or result
        torch.cuda.synchronize()
        st = result.stats
        rounds = len(st.draft_lengths)
        gpu = {lab: sum(s.elapsed_time(e) for lab2, s, e in log if lab2 == lab) for lab in ("target forward",
                                                                                            "draft forward")}
        log_drafts = any(lab == "draft forward" for lab, _, _ in log)
        wall = 1e3 * st.decode_s
        summary = dict(k=k, new_tokens=n, rounds=rounds, wall_ms=wall, verify_ms=gpu["target forward"],
                       draft_ms=gpu["draft forward"], draft_steps=sum(st.draft_lengths),
                       other_ms=wall - gpu["target forward"] - gpu["draft forward"])
        with batches_profiled(engine, [ProfilerActivity.CPU, ProfilerActivity.CUDA]) as profiles:
            for _ in engine.stream([prompt], k=k, params=params, method=method):
                pass
    finally:
        _set_target(engine, saved[0])
        engine._draft_fwd = saved[1]
    (out / f"profile_{method}.txt").write_text(profiler_tables(profiles[-1]))
    info.setdefault("profile", {})[method] = summary
    r = max(rounds, 1)
    # a proposal replayed as one graph (`bass.drafters.chain.chained_proposal`) never calls the draft's forward
    chained = "; the chained proposals too" if summary["draft_steps"] and not log_drafts else ""
    print(f"    profile {method} k={k}, {n} tokens: {wall / r:.2f} ms/round over {rounds} rounds = verify "
          f"{summary['verify_ms'] / r:.2f} (GPU) + draft {summary['draft_ms'] / r:.2f} (GPU, "
          f"{summary['draft_steps'] / r:.1f} steps) + other {summary['other_ms'] / r:.2f} (sampling, cache, "
          f"syncs, Python{chained})", flush=True)


def _set_target(engine: Engine, forward) -> None:
    """Make `forward` what the engine's drafters and its device thread call for the target."""
    engine._target_fwd = engine.runner.target_forward = forward


class _SyncTimed:
    """A target forward with the device synchronised around each call; its wall time adds to `spent`
    unless `paused()` (calls made from inside the drafter, e.g. layer-skip's, are the drafter's time)."""

    def __init__(self, fn, spent: dict, paused):
        self.__dict__.update(fn=fn, spent=spent, paused=paused)

    def __call__(self, *args, **kwargs):
        if self.paused():
            return self.fn(*args, **kwargs)
        sync()
        t = time.perf_counter()
        with torch.profiler.record_function("verify (target forward)"):
            out = self.fn(*args, **kwargs)
        sync()
        self.spent["verify"] += time.perf_counter() - t
        return out

    def __getattr__(self, name: str):
        return getattr(self.fn, name)


class _TimedDrafter(Drafter):
    """A drafter whose proposals are timed with the device synchronised around them."""

    def __init__(self, inner: Drafter, spent: dict):
        self.inner, self.spent, self.inside = inner, spent, False
        self.proposes, self.name = inner.proposes, getattr(inner, "name", type(inner).__name__)
        self.reads_verify = inner.reads_verify

    def prefill(self, prompts, samples, capacity, features=None):
        self.inner.prefill(prompts, samples, capacity, features)

    def _timed(self, name: str, *args):
        sync()
        t, self.inside = time.perf_counter(), True
        try:
            with torch.profiler.record_function(f"drafter {name}"):
                out = getattr(self.inner, name)(*args)
            sync()
        finally:
            self.inside = False
        self.spent["draft"] += time.perf_counter() - t
        return out

    def propose(self, *args):
        return self._timed("propose", *args)

    def follows(self):
        return self.inner.follows()

    def verified(self, emitted, accepted):
        self.inner.verified(emitted, accepted)

    def withdraw(self):
        self.inner.withdraw()

    def commit(self, histories):  # a feature draft's scatter, truncate and catch-up forward are drafter work
        return self._timed("commit", histories)

    def select(self, rows):
        return self._timed("select", rows)


def round_breakdown(engine, prompt: str, k: int, params: SamplingParams, method: str, drafter: str | None,
                    out: Path, label: str, **stream_kwargs) -> dict:
    """Mean wall ms per round split into drafter, verify and host bookkeeping (module docstring) over one
    generation, after a warm-up one; then torch.profiler's tables of a third into `out/profile_<label>.txt`."""
    from torch.profiler import ProfilerActivity

    spent = {"draft": 0.0, "verify": 0.0}
    saved = engine._target_fwd  # the drafter is built below, so layer-skip drafts through the wrapper too
    timed_drafter: list[_TimedDrafter] = []

    def paused() -> bool:
        return bool(timed_drafter) and timed_drafter[-1].inside

    def run():
        kw = dict(k=k, params=params, method=method, look_ahead=False, **stream_kwargs)  # the syncs would
        # serialise look-ahead anyway
        if method == "bass":
            timed_drafter.append(_TimedDrafter(engine.new_drafter(drafter), spent))
            kw["drafter"] = timed_drafter[-1]
        return engine.generate(prompt, **kw)

    _set_target(engine, _SyncTimed(saved, spent, paused))
    try:
        run()  # warm-up: graphs captured, caches sized
        spent.update(draft=0.0, verify=0.0)
        st = run().stats
        draft_s, verify_s = spent["draft"], spent["verify"]  # before the profiled run adds to them
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
        with batches_profiled(engine, activities) as profiles:
            run()
    finally:
        _set_target(engine, saved)
    (out / f"profile_{label}.txt").write_text(profiler_tables(profiles[-1]))
    rounds = max(1, len(st.draft_lengths))
    wall, draft, verify = (1e3 * x / rounds for x in (st.decode_s, draft_s, verify_s))
    summary = dict(label=label, method=method, drafter=drafter, k=k, rounds=rounds, wall_ms_per_round=wall,
                   draft_ms_per_round=draft, verify_ms_per_round=verify, host_ms_per_round=wall - draft - verify,
                   mean_draft_length=sum(st.draft_lengths) / rounds, tokens_per_round=st.tokens_per_round)
    print(f"    profile {label} k={k}: {wall:.2f} ms/round over {rounds} rounds = drafter {draft:.2f} + verify "
          f"{verify:.2f} + host bookkeeping {wall - draft - verify:.2f} (mean L {summary['mean_draft_length']:.1f}, "
          f"{st.tokens_per_round:.2f} tokens/round)", flush=True)
    return summary


# ---- the pipelined view: rounds as the engine runs them (look-ahead at its default), GPU busy vs idle -----
DECODE_MARK = "pipelined decode"  # a record_function over a profiled batch (`batches_profiled`), its prefill included
DEVICE_WORK = ("kernel", "gpu_memcpy", "gpu_memset")  # kineto activity types that occupy the device


def interval_union(intervals: Iterable[tuple[float, float]]) -> float:
    """Total length covered by (start, end) `intervals` in any order: overlaps count once, empty ones not at all."""
    total, reach = 0.0, -math.inf
    for start, end in sorted(i for i in intervals if i[1] > i[0]):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def is_device_work(ev: FunctionEvent) -> bool:
    """A kernel, memcpy or memset on the device: not a host event, not the device-side span of a
    `record_function` (it covers gaps), not a sync. torch versions without `activity_type` fall back to
    every device event but user annotations."""
    if ev.device_type == DeviceType.CPU or getattr(ev, "is_user_annotation", False) or ev.name == DECODE_MARK:
        return False
    kind = getattr(ev, "activity_type", None)
    return kind in DEVICE_WORK if kind else True


def _top(spent: dict[str, list[float]], rounds: int, what: str, n: int = 8) -> str:
    """The `n` names of most total µs in `spent` (name -> durations): ms and calls per round."""
    rows = sorted(spent.items(), key=lambda kv: -sum(kv[1]))[:n]
    return "\n".join([f"top {n} {what}\n    ms/round  calls/round  name"] + [
        f"  {sum(d) / 1e3 / rounds:10.4f}  {len(d) / rounds:11.2f}  {name[:60]}" for name, d in rows])


def device_busy(events: Sequence[FunctionEvent], rounds: int, top: int = 8) -> tuple[float | None, str]:
    """(µs the device worked during the decode window, a report of the top kernels and host ops per round)
    from a profile's `events()`. Busy is the length of the union of the kernel / memcpy / memset intervals
    clipped to the window (`DECODE_MARK`): kernels that overlap (streams, graph branches) count once; the
    report lists the `top` kernels. It is None, never 0, where the window or any device work is missing (no
    GPU, or the profiler lost them)."""
    marks = [e for e in events if e.name == DECODE_MARK and e.device_type == DeviceType.CPU]
    if not marks:
        return None, f"no {DECODE_MARK!r} range in the profile: nothing measured"
    w0, w1 = marks[0].time_range.start, marks[0].time_range.end
    kernels, ops = defaultdict(list), defaultdict(list)
    spans = []
    for e in events:
        start, end = max(e.time_range.start, w0), min(e.time_range.end, w1)
        if is_device_work(e):
            if end > start:
                spans.append((start, end))
                kernels[e.name].append(end - start)
        elif (e.device_type == DeviceType.CPU and w0 <= e.time_range.start < w1 and e.name != DECODE_MARK
              and not getattr(e, "is_user_annotation", False)):
            ops[e.name].append(e.self_cpu_time_total)
    report = _top(kernels, rounds, "device kernels / copies by time in the window", top) if kernels else (
        "no device kernels in the window (no GPU, or the profiler recorded none): GPU busy unknown")
    return (interval_union(spans) if spans else None), report + "\n\n" + _top(ops, rounds, "host ops by self CPU time")


def _generation(engine: Engine, prompt: str, mark: str | None, **kw) -> tuple[GenerationResult, float, float]:
    """Stream one generation: (result, s to the "prefill" event, s from it to the end), the device synchronised
    before the first clock and before the last; with `mark`, a `record_function(mark)` spans the decode part."""
    rf, result = None, None
    sync()
    t0 = t1 = time.perf_counter()
    try:
        for ev in engine.stream(prompt, **kw):
            if ev.kind == "prefill":
                t1 = time.perf_counter()
                if mark:
                    rf = torch.profiler.record_function(mark)
                    rf.__enter__()
            result = ev.result or result
        sync()
        t2 = time.perf_counter()
    finally:
        if rf is not None:
            rf.__exit__(None, None, None)
    return result, t1 - t0, t2 - t1


@contextlib.contextmanager
def launches_counted() -> Iterator[dict[str, int]]:
    """Count the rounds `bass.decode.pipeline` launches before the round before them is read ("ahead": its
    `launch` gets no histories; a relaunch after a full-sort redo counts too) and after it ("in_order"),
    while the block runs."""
    import bass.decode.round as spec

    counts, launch = {"ahead": 0, "in_order": 0}, spec.launch

    def counted(*args, **kwargs):
        histories = args[4] if len(args) > 4 else kwargs["histories"]  # launch(models, rnd, cache, last, histories)
        counts["ahead" if histories is None else "in_order"] += 1
        return launch(*args, **kwargs)

    spec.launch = counted
    try:
        yield counts
    finally:
        spec.launch = launch


def pipelined_round(engine: Engine, prompt: str, k: int, params: SamplingParams, method: str, drafter: str | None,
                    out: Path, label: str, top: int = 8, **stream_kwargs) -> dict:
    """Rounds as the engine runs them (look-ahead at its default, no syncs inside): after a warm-up, one
    plain timed generation and one under torch.profiler; per round of the profiled one, the decode wall ms,
    the device's busy ms (`device_busy`) and idle = wall - busy, on CPU None. The `top` kernels and host ops go to
    `out/profile_pipelined_<label>_k<k>.txt`."""
    from torch.profiler import ProfilerActivity

    kw = dict(k=k, params=params, method=method, **({"drafter": drafter} if drafter else {}), **stream_kwargs)
    engine.generate(prompt, **kw)  # warm-up: graphs captured at this k, caches sized
    with launches_counted() as launched:
        plain, _, plain_s = _generation(engine, prompt, None, **kw)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with batches_profiled(engine, activities) as profiles:
        result, _, wall_s = _generation(engine, prompt, None, **kw)
    prof = profiles[-1]
    st = result.stats
    rounds = max(1, len(st.draft_lengths))
    try:
        busy_us, report = device_busy(prof.events(), rounds, top)
    except Exception as e:  # a profiler that fails leaves busy unknown (None), not 0; the rest stands
        busy_us, report = None, f"profiler events unavailable: {e!r}"
    wall = 1e3 * wall_s / rounds
    busy = None if busy_us is None else busy_us / 1e3 / rounds
    row = dict(label=label, method=method, drafter=drafter, k=k, rounds=rounds, wall_ms_per_round=wall,
               plain_ms_per_round=1e3 * plain_s / max(1, len(plain.stats.draft_lengths)), gpu_busy_ms_per_round=busy,
               idle_ms_per_round=None if busy is None else wall - busy, tokens_per_round=st.tokens_per_round,
               mean_draft_length=sum(st.draft_lengths) / rounds, tokens=st.tokens, sequences=st.num_sequences,
               launched_ahead=launched["ahead"] / max(1, launched["ahead"] + launched["in_order"]),
               ms_per_token_per_seq=1e3 * wall_s / (st.tokens / st.num_sequences) if st.tokens else None)
    head = (f"{label} k={k}: {rounds} rounds, {wall:.3f} ms/round (profiled; plain {row['plain_ms_per_round']:.3f}), "
            f"GPU busy {'-' if busy is None else f'{busy:.3f}'} ms/round")
    (out / f"profile_pipelined_{label}_k{k}.txt").write_text(head + "\n\n" + report + "\n")
    print(f"    pipelined {head}", flush=True)
    return row
