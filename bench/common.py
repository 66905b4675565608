"""Helpers the benchmarks share: waiting for the device, timing a callable, replaying it from a CUDA graph,
torch.profiler's top-operator tables."""

from __future__ import annotations

import argparse
import time

import torch

from bass.runtime.graphs import capture


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


def sync() -> None:
    """Wait for the device (a no-op on the CPU): the clocks around it then time finished work."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def graphed(fn):
    """fn as a replayed CUDA graph (its own inputs captured: call it without arguments), or fn on the CPU."""
    if not torch.cuda.is_available():
        return fn
    return capture(fn)[0].replay


def timed_ms(fn, reps: int) -> float:
    """Mean ms per call of `fn` issued back to back (device time on CUDA: one sync at the end)."""
    fn()
    sync()
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    sync()
    return 1e3 * (time.perf_counter() - t) / reps


def engine_parser(description: str | None) -> argparse.ArgumentParser:
    """A parser with the flags every engine-driven diagnostic takes: the models, the backend and the batch."""
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", default="embedded")
    p.add_argument("--draft", default="auto")
    p.add_argument("--backend", default="auto", help="auto: ragged on CUDA, torch on the CPU (Engine.backend)")
    p.add_argument("--k", type=int, default=8)
    return p
