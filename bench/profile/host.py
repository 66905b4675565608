"""What the host spends on a round, and what launching a captured CUDA graph costs it.

    python -m bench.profile host --target embedded --k 8 --out bench/results/
    python -m bench.profile host --target tiny-folder --k 2 --max-new-tokens 8 (CPU plumbing)

`bench.profile.steps`'s pipelined view found BASS rounds host-bound on the H100 (the GPU idle a third of a
round) with `cudaGraphLaunch` the largest host op. Two views say why, one model load:

  launches   every graph the engine captured for one BASS generation (the model drafter, fixed L) and one
             regular generation: its nodes (the kernels, copies and fills of one replay, as the profiler
             counts them), host µs of `replay()` with the device idle (synchronised first) and with 1 or 3
             replays still queued ahead of it (as look-ahead launches), device ms per replay. Beside them,
             graphs of 256 nodes of one kind each (an elementwise kernel, a cuBLAS GEMM, the Triton RMSNorm):
             the driver's own cost per node on this machine, so the table tells a graph that launches slowly
             because it is long from one whose nodes are dear, and a launch that waits for the device (queued
             grows, idle does not) from one that costs the host (both the same);
  python     cProfile over the decode of one generation per config, rounds as the engine runs them (look-ahead
             on): the functions of most own time and most cumulative time per round, in µs.
             cProfile adds about a µs per Python call, so the figures rank, they do not time.

On the CPU there are no graphs: the launch table is empty and the python view runs (the plumbing CI checks).
"""

from __future__ import annotations

import cProfile
import json
import pstats
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

from bass.config import DraftLengthConfig, EngineConfig, SamplingParams
from bass.engine import Engine
from bass.runtime.device import device_line
from bass.runtime.graphs import ChainKey
from bench.common import engine_parser, sync
from bench.profile.rounds import is_device_work

CHAIN_NODES = 256


def device_ops(replay: Callable[[], None]) -> list:
    """The device operations (kernels, copies, fills) of one call of `replay`, as the profiler records them,
    in the order they started."""
    from torch.profiler import ProfilerActivity, profile

    sync()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        replay()
        sync()
    return sorted((e for e in prof.events() if is_device_work(e)), key=lambda e: e.time_range.start)


def nodes(replay: Callable[[], None]) -> tuple[int, dict[str, list[float]]]:
    """`device_ops` of one call of `replay` counted: (how many, {name: [count, device µs]})."""
    work = device_ops(replay)
    kinds: dict[str, list[float]] = {}
    for e in work:
        entry = kinds.setdefault(e.name[:80], [0, 0.0])
        entry[0] += 1
        entry[1] += e.time_range.end - e.time_range.start
    return len(work), dict(sorted(kinds.items(), key=lambda kv: -kv[1][1]))


def launch_us(replay: Callable[[], None], queued: int, reps: int = 15) -> float:
    """Median host µs of one `replay()` issued with `queued` replays still ahead of it on the stream."""
    times = []
    for _ in range(reps):
        sync()
        for _ in range(queued):
            replay()
        t = time.perf_counter()
        replay()
        times.append(time.perf_counter() - t)
    sync()
    return 1e6 * statistics.median(times)


def device_ms(replay: Callable[[], None], reps: int = 20) -> float:
    """Device ms per replay, from CUDA events around `reps` replays issued back to back."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    replay()
    start.record()
    for _ in range(reps):
        replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / reps


def measure(name: str, replay: Callable[[], None]) -> dict:
    """One row of the launch table (module docstring)."""
    n, kinds = nodes(replay)
    row = dict(graph=name, nodes=n, idle_us=launch_us(replay, 0), queued1_us=launch_us(replay, 1),
               queued3_us=launch_us(replay, 3), device_ms=device_ms(replay), kernels=kinds)
    row["idle_us_per_node"] = row["idle_us"] / max(n, 1)
    return row


def chain(kind: str, device: torch.device) -> Callable[[], None]:
    """A graph of CHAIN_NODES operations of one kind, as its replay."""
    from bass.models.layers import rms_norm  # the Triton kernel on CUDA

    x = torch.randn(8, 1536, device=device, dtype=torch.bfloat16)
    w = torch.randn(1536, 1536, device=device, dtype=torch.bfloat16) / 40
    g = torch.ones(1536, device=device, dtype=torch.bfloat16)
    op = {"elementwise": lambda: x.mul_(1.0001), "gemm": lambda: torch.mm(x, w, out=x),
          "triton rmsnorm": lambda: x.copy_(rms_norm(x, g, 1e-6)[0])}[kind]

    def run():
        for _ in range(CHAIN_NODES // (2 if kind == "triton rmsnorm" else 1)):  # the norm, then its copy
            op()

    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        run()
    torch.cuda.current_stream(device).wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run()
    return graph.replay


def engine_graphs(engine: Engine) -> list[tuple[str, Callable[[], None]]]:
    """(name, replay) of every graph the engine's target and draft forwards hold: forwards, and the draft's
    chains (a whole proposal, `bass.drafters.chain.chained_proposal`: "draft B8 chain T2 L3 pool0")."""
    out = []
    for role, fwd in (("target", engine.target_forward), ("draft", engine._draft_fwd)):
        for key, g in getattr(fwd, "_graphs", {}).items():
            if g.graph is None:
                continue
            if isinstance(key, ChainKey):  # name: (rule, attention, first step's width bucket, L)
                out.append((f"{role} B{key.batch} chain T{key.name[-2]} L{key.name[-1]} pool{key.pool[-1]}",
                            g.graph.replay))
                continue
            rule = "" if key.then is None else f" + {type(key.then).__name__}"
            out.append((f"{role} B{key.batch} T{key.width} slot{key.slot}{' last' if key.last_only else ''}{rule}",
                        g.graph.replay))
    return out


def launches(engine: Engine, prompt: str, k: int, params: SamplingParams, l0: int) -> list[dict]:
    """The launch table (module docstring); empty without CUDA."""
    if engine.device.type != "cuda":
        return []
    engine.generate(prompt, k=k, params=params, method="regular")
    engine.generate(prompt, k=k, params=params, method="bass", drafter="model",
                    draft_length=DraftLengthConfig(policy="fixed", l0=l0))
    rows = [measure(name, replay) for name, replay in engine_graphs(engine)]
    rows += [measure(f"chain of {kind}", chain(kind, engine.device)) for kind in
             ("elementwise", "gemm", "triton rmsnorm")]
    return rows


def python_profile(engine: Engine, prompt: str, top: int = 25, **kw) -> dict:
    """cProfile over one generation (after a warm-up one) on the engine's device thread, where its batch runs
    (`bass.engine.scheduler`; the prefill included): the `top` functions by own time and by cumulative time, µs
    and calls per round."""
    from bass.engine import batch

    engine.generate(prompt, **kw)
    prof, run = cProfile.Profile(), batch.Batch.run

    def profiled(self) -> None:
        prof.enable()
        try:
            run(self)
        finally:
            sync()
            prof.disable()

    batch.Batch.run = profiled
    try:
        result = engine.generate(prompt, **kw)
        engine.scheduler.settle()  # the batch ends (and its profile stops) after the result
    finally:
        batch.Batch.run = run
    rounds = max(1, len(result.stats.draft_lengths))
    stats = pstats.Stats(prof).stats  # (file, line, function) -> (primitive calls, calls, own s, cumulative s, ..)

    def rows(column: int) -> list[dict]:
        ranked = sorted(stats.items(), key=lambda kv: -kv[1][column])[:top]
        return [dict(function=f"{Path(f).name}:{line}({fn})", calls=nc / rounds, own_us=1e6 * tt / rounds,
                     cum_us=1e6 * ct / rounds) for (f, line, fn), (_, nc, tt, ct, _) in ranked]

    return dict(rounds=rounds, decode_ms_per_round=1e3 * result.stats.decode_s / rounds, by_own=rows(2),
                by_cumulative=rows(3))


def _python_lines(label: str, p: dict) -> list[str]:
    lines = [f"{label}: {p['rounds']} rounds, {p['decode_ms_per_round']:.3f} ms/round under cProfile"]
    for title, key in (("own", "by_own"), ("cumulative", "by_cumulative")):
        lines += [f"  by {title} time      own µs/round  cum µs/round  calls/round  function"]
        lines += [f"    {r['own_us']:27.1f}  {r['cum_us']:12.1f}  {r['calls']:11.2f}  {r['function'][:70]}"
                  for r in p[key]]
    return lines


def main(argv: list[str] | None = None) -> dict:
    p = engine_parser(__doc__)
    p.add_argument("--l0", type=int, default=1, help="the fixed draft length of the BASS rows")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--out", default="bench/results/")
    a = p.parse_args(argv)
    engine = Engine(EngineConfig(target=a.target, draft=a.draft, drafter="auto", backend=a.backend))
    from sandbox import load_humaneval

    prompt = load_humaneval()[0].prompt
    params = SamplingParams(temperature=0.8, top_p=0.95, max_new_tokens=a.max_new_tokens, seed=0)
    print(device_line(engine.device), flush=True)
    launch_rows = launches(engine, prompt, a.k, params, a.l0)
    fixed = DraftLengthConfig(policy="fixed", l0=a.l0)
    python = {"regular": python_profile(engine, prompt, k=a.k, params=params, method="regular"),
              f"model fixed L={a.l0}": python_profile(engine, prompt, k=a.k, params=params, method="bass",
                                                      drafter="model", draft_length=fixed)}
    info = dict(device=device_line(engine.device), target=engine.target.name, k=a.k, launches=launch_rows,
                python=python)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "host_costs.json").write_text(json.dumps(info, indent=1))
    lines = [info["device"], "graph                                      nodes  idle µs  1 queued µs  3 queued µs  "
             "µs/node idle  device ms"]
    lines += [f"{r['graph'][:42]:42s} {r['nodes']:6d} {r['idle_us']:8.1f} {r['queued1_us']:12.1f} "
              f"{r['queued3_us']:12.1f} {r['idle_us_per_node']:13.2f} {r['device_ms']:10.3f}" for r in launch_rows]
    for label, prof in python.items():
        lines += _python_lines(label, prof)
    (out / "host_costs.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return info


if __name__ == "__main__":
    main()
