"""Where one BASS (or regular) round's time goes on the GPU: CUDA events around every target and draft
forward, the rest of the wall time, and torch.profiler's top operators. Used by `bench/gpu_bench.py`."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from bass.config import SamplingParams


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
    ka = prof.key_averages()
    tables = [ka.table(sort_by="self_cpu_time_total", row_limit=20)]
    for key in ("self_device_time_total", "self_cuda_time_total"):
        try:
            tables.append(ka.table(sort_by=key, row_limit=20))
            break
        except (AttributeError, KeyError, ValueError):
            continue
    (out / f"profile_{method}.txt").write_text("\n\n".join(tables))
    info.setdefault("profile", {})[method] = summary
    r = max(rounds, 1)
    print(f"    profile {method} k={k}, {n} tokens: {wall / r:.2f} ms/round over {rounds} rounds = verify "
          f"{summary['verify_ms'] / r:.2f} (GPU) + draft {summary['draft_ms'] / r:.2f} (GPU, "
          f"{summary['draft_steps'] / r:.1f} steps) + other {summary['other_ms'] / r:.2f} (sampling, cache, "
          f"syncs, Python)", flush=True)
