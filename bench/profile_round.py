"""Where one BASS (or regular) round's time goes: torch.profiler's top operators, and a split of the wall
time. `profile_round` (`bench/gpu_bench.py`): CUDA events around every target and draft forward, GPU
time without host syncs. `round_breakdown` (`bench/real_bench.py --profile`, CPU or GPU): the device is
synchronised around the drafter's proposal and the target's verify, so wall time splits exactly into

    round = drafter (propose, host and device) + verify (target forward) + host bookkeeping (the rest:
            sampling and acceptance, the round's host copy, stop strings, cache rollback, Python)

The syncs cost a little themselves: the split is for profiling runs only, never for timed rows. They also
leave nothing for look-ahead (`bass.speculative`) to overlap, so `round_breakdown` turns it off: the split
is of rounds run one after another, and on CUDA "verify" holds the rule captured with the forward."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import torch

from bass.config import SamplingParams
from bass.drafters import Drafter


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


def profile_round(engine, prompt: list[int], k: int, params: SamplingParams, n: int, out: Path, info: dict,
                  method: str = "bass") -> None:
    """Where a round's time goes: GPU time of the verify and the draft steps (CUDA events), the rest of
    the wall time (sampling, cache bookkeeping, host syncs, Python), and torch.profiler's top ops."""
    from torch.profiler import ProfilerActivity, profile

    if not hasattr(engine, "_target_fwd"):
        raise RuntimeError("this engine has no _target_fwd / _draft_fwd to time")
    params = dataclasses.replace(params, max_new_tokens=n)
    saved, log = (engine._target_fwd, engine._draft_fwd), []
    engine._target_fwd = _Timed(saved[0], "target forward", log)
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
        wall = 1e3 * st.decode_s
        summary = dict(k=k, new_tokens=n, rounds=rounds, wall_ms=wall, verify_ms=gpu["target forward"],
                       draft_ms=gpu["draft forward"], draft_steps=sum(st.draft_lengths),
                       other_ms=wall - gpu["target forward"] - gpu["draft forward"])
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in engine.stream([prompt], k=k, params=params, method=method):
                pass
            torch.cuda.synchronize()
    finally:
        engine._target_fwd, engine._draft_fwd = saved
    (out / f"profile_{method}.txt").write_text(profiler_tables(prof))
    info.setdefault("profile", {})[method] = summary
    r = max(rounds, 1)
    print(f"    profile {method} k={k}, {n} tokens: {wall / r:.2f} ms/round over {rounds} rounds = verify "
          f"{summary['verify_ms'] / r:.2f} (GPU) + draft {summary['draft_ms'] / r:.2f} (GPU, "
          f"{summary['draft_steps'] / r:.1f} steps) + other {summary['other_ms'] / r:.2f} (sampling, cache, "
          f"syncs, Python)", flush=True)


def profiler_tables(prof, rows: int = 20) -> str:
    """torch.profiler's top operators by self CPU time, and by self device time where a GPU ran."""
    ka = prof.key_averages()
    tables = ["top ops by self CPU time\n" + ka.table(sort_by="self_cpu_time_total", row_limit=rows)]
    if torch.cuda.is_available():
        for key in ("self_device_time_total", "self_cuda_time_total"):
            try:
                tables.append("top ops by self CUDA time\n" + ka.table(sort_by=key, row_limit=rows))
                break
            except (AttributeError, KeyError, ValueError):
                continue
    return "\n\n".join(tables)


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


class _SyncTimed:
    """A target forward with the device synchronised around each call; its wall time adds to `spent`
    unless `paused()` (calls made from inside the drafter, e.g. layer-skip's, are the drafter's time)."""

    def __init__(self, fn, spent: dict, paused):
        self.__dict__.update(fn=fn, spent=spent, paused=paused)

    def __call__(self, *args, **kwargs):
        if self.paused():
            return self.fn(*args, **kwargs)
        _sync()
        t = time.perf_counter()
        with torch.profiler.record_function("verify (target forward)"):
            out = self.fn(*args, **kwargs)
        _sync()
        self.spent["verify"] += time.perf_counter() - t
        return out

    def __getattr__(self, name: str):
        return getattr(self.fn, name)


class _TimedDrafter(Drafter):
    """A drafter whose proposals are timed with the device synchronised around them."""

    def __init__(self, inner: Drafter, spent: dict):
        self.inner, self.spent, self.inside = inner, spent, False
        self.proposes, self.name = inner.proposes, getattr(inner, "name", type(inner).__name__)

    def prefill(self, prompts, samples, capacity, features=None):
        self.inner.prefill(prompts, samples, capacity, features)

    def _timed(self, name: str, *args):
        _sync()
        t, self.inside = time.perf_counter(), True
        try:
            with torch.profiler.record_function(f"drafter {name}"):
                out = getattr(self.inner, name)(*args)
            _sync()
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
    from torch.profiler import ProfilerActivity, profile

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

    engine._target_fwd = _SyncTimed(saved, spent, paused)
    try:
        run()  # warm-up: graphs captured, caches sized
        spent.update(draft=0.0, verify=0.0)
        st = run().stats
        draft_s, verify_s = spent["draft"], spent["verify"]  # before the profiled run adds to them
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
        with profile(activities=activities) as prof:
            run()
            _sync()
    finally:
        engine._target_fwd = saved
    (out / f"profile_{label}.txt").write_text(profiler_tables(prof))
    rounds = max(1, len(st.draft_lengths))
    wall, draft, verify = (1e3 * x / rounds for x in (st.decode_s, draft_s, verify_s))
    summary = dict(label=label, method=method, drafter=drafter, k=k, rounds=rounds, wall_ms_per_round=wall,
                   draft_ms_per_round=draft, verify_ms_per_round=verify, host_ms_per_round=wall - draft - verify,
                   mean_draft_length=sum(st.draft_lengths) / rounds, tokens_per_round=st.tokens_per_round)
    print(f"    profile {label} k={k}: {wall:.2f} ms/round over {rounds} rounds = drafter {draft:.2f} + verify "
          f"{verify:.2f} + host bookkeeping {wall - draft - verify:.2f} (mean L {summary['mean_draft_length']:.1f}, "
          f"{st.tokens_per_round:.2f} tokens/round)", flush=True)
    return summary
