"""Every projection of our decoders, y = x Wᵀ (+ b): cuBLAS, or the skinny Triton GEMM where it is faster.

At decode time a projection multiplies a few rows (batch × verify width) by a weight it reads once, so its
time is the weight's bytes over the memory bandwidth plus the kernel's ramp-up; which kernel gets closer
to that depends on the GPU and the shape. On an H100, timed by `tune` on the models' own weights, the skinny
kernel (`kernels.skinny_gemm`) read the trained draft's head [32769 × 1536] (as it was before its fold,
`bass.models.feature_draft`) in 36 µs against cuBLAS's 100 (an odd row count), was 3-14% faster on the 7B's
large projections, and came within 1-4% of cuBLAS on the 1.5B target's (`python -m bench.real_bench --cublas-pair`
runs regular decoding and BASS with the tuned projections and with cuBLAS throughout).

On the CPU, float32: oneDNN rather than MKL. `F.linear` goes to MKL's sgemm, which on the AMD EPYC this project
is tested on (2 cores, AVX2) multiplied 4 rows by the 270M model's head [262144 × 640] in 243-289 ms, 2.3-2.8 GB/s
against 17 GB/s for reading the same weight once; oneDNN (`torch.ops.mkldnn._linear_pointwise`, what
`torch.compile` emits for a CPU linear) took 123 ms from the same dense weight, no copy or repacking kept. (A
weight repacked once for oneDNN took about 70 ms, but keeping that copy beside the dense one doubles the
projections' memory: about 5 GB more for the 1.5B target in float32.) So `linear` on a CPU float32 tensor
without autograd is oneDNN's; BASS_ONEDNN=0 in the environment keeps MKL (an A/B; a torch built without oneDNN
falls back by itself). oneDNN sums in another order than MKL, about 3x MKL's rounding error against float64 per
projection (`tests/bass/models/test_embedded.py` bounds what that makes of Gemma's logits).

On the CPU, bfloat16: fixed-size calls. oneDNN multiplies bf16 on the CPU's matrix units where it has them (AMX
on a Sapphire Rapids Xeon: the 1.5B's gate/up projection [17920 x 1536] at 4 rows in 1.8 ms against 4.0 in float32,
at 16 rows 1.9 against 5.7), but it picks its kernel by the number of rows, and kernels round differently: the same
row came out of a 4-row and a 40-row call up to 2 bf16 steps apart, and 1 of 8 greedy HumanEval sequences of the
embedded target parted from regular decoding after 40 tokens. So every bf16 (or
float16) projection on the CPU multiplies its rows in calls of exactly CPU_ROWS rows, the last one padded with
zeros: one kernel serves every call, and a row's result depends on that row alone, bit for bit, whatever the batch
or the verify's width (as the skinny GEMM's rows do on the GPU). On that Xeon a layer's four projections took 3.1 ms
at 4 rows, 3.3 at 16, 3.7 at 32 and 6.0 at 64 (the weight's bytes dominate up to 32): 32 rows hold a verify at k = 4
up to L = 7 in one call for a fifth more than a plain step's 4 rows cost, where 16 would split a verify past L = 3 in
two calls, each reading the weights again, and 64 would cost every plain step nearly twice as much. A prefill's rows
go in as many calls as they fill. Whether bf16 pays on this CPU at all is measured (`cpu_dtype`): without matrix units
it can be slower than float32.

Where a CPU has no such kernels the padding may buy nothing: on a 2-core AMD EPYC (AVX2,
no bf16 instructions) each row came out the same bits from calls of 1 to 64 rows, and the [17920 x 1536] projection
took 4.1 ms at 1 row and 96 at 32, so a plain step paid 20 times its cost for it. Whether this CPU's kernels need
the fixed calls is measured, not assumed (`rows_independent`): a few calls of several row counts against the same
rows one at a time, once a process per dtype; where every row comes back the same bits, reduced-precision
projections go to `F.linear` as they are.

So nothing is assumed on the GPU: `tune(model)` times, on the device, cuBLAS and each of a few tile configs for every
distinct projection shape of the model at every row tile (16, 32, 48, 64 rows), cycling through the model's
own weights of that shape as a forward does, and records the fastest config unless cuBLAS beats it by
`MARGIN`. `linear` then looks the choice up by shape; with nothing recorded (prefill-sized inputs, a
shape cuBLAS won) it is `F.linear` (on the CPU, oneDNN's, above). The engine tunes its models once,
before capturing CUDA graphs. A shape is measured once per process (a second engine over models of the same
shapes reuses the measurements); `clear()` forgets every choice and measurement.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import nn

from bass.runtime.graphs import capture
from kernels.split_sum import SplitSum

# oneDNN for CPU float32 projections (module docstring): whether this torch has the op, and whether `linear` uses
# it (BASS_ONEDNN=0: no), read once, like BASS_PDL (`kernels.pdl`)
ONEDNN_AVAILABLE = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")
ONEDNN = ONEDNN_AVAILABLE and os.environ.get("BASS_ONEDNN", "1") != "0"
# A projection asked to `defer_sum` may hand its reader the split-K slices unsummed (`kernels.split_sum`);
# BASS_DEFER_SUMS=0 keeps every sum in its own launch (an A/B), read once like BASS_ONEDNN
DEFER_SUMS = os.environ.get("BASS_DEFER_SUMS", "1") != "0"
# The rows of every reduced-precision CPU call (module docstring: fixed-size calls make a row's result its own), where
# this CPU's kernels need them (`rows_independent`); BASS_CPU_FIXED_ROWS=1 keeps them without measuring (an A/B),
# read once like BASS_ONEDNN
CPU_ROWS = 32
CPU_FIXED_ROWS = os.environ.get("BASS_CPU_FIXED_ROWS", "0") == "1"
CPU_BF16_MARGIN = 0.1  # `measure_cpu_dtype`: bf16 must be this much faster (coarser rounding: a tie is float32)

# The row counts a choice is timed at; `linear` uses the choice of the smallest tile that holds x's rows. The
# kernel pads x to 16, 32 or 64 rows (kernels.skinny_gemm: BM), but its padding rows are masked, never read, so a
# config's cost follows the rows that are there: a verify of 8 x 5 = 40 rows is timed as 48 rows, not 64.
ROW_TILES = (16, 32, 48, 64)
# cuBLAS is used only where it beats the fastest config by this much (timing noise is about 1 %): it takes no
# part in PDL (`kernels.pdl`), so in a forward the kernels on either side of it cannot overlap it, which timing
# it alone does not see. The 1.5B's gate/up projection at 16 rows timed within 2 % either way and flipped from
# load to load; on the H100 regular decoding took 1.823-1.827 ms a step with it on cuBLAS against 1.734-1.735
# on the skinny kernel, alternated in one process.
MARGIN = 0.02

# (device type, N, K, has bias, x's dtype, the weight's dtype, row tile) -> the SkinnyConfig that won; absent: cuBLAS
_choices: dict[tuple, object] = {}
_measured: dict[tuple, dict] = {}  # the same key -> `tune`'s report row for it


def row_tile(rows: int) -> int | None:
    """The kernel's padded row count for `rows` rows of x, or None past the largest (cuBLAS then)."""
    return next((t for t in ROW_TILES if t >= rows), None)


def _key(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, tile: int | None) -> tuple:
    # both dtypes: the kernel multiplies x and the weight in one, and under autocast a float32 module of a tuned
    # shape (a training teacher's) sees bfloat16 rows; its projections must fall to F.linear, which casts them
    return (x.device.type, weight.shape[0], weight.shape[1], bias is not None, x.dtype, weight.dtype, tile)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
           out_dtype: torch.dtype | None = None, defer_sum: bool = False) -> torch.Tensor | SplitSum:
    """x [..., K] @ weight [N, K]ᵀ (+ bias [N]) -> [..., N], by the kernel `tune` chose for this shape; with
    `out_dtype`, the x-dtype result converted to it (an LM head's float32 logits: one launch on the kernel). The
    kernel has no backward: where a gradient is asked, the projection stays on `F.linear`. With `defer_sum`
    (a caller whose reader sums split-K slices itself), a chosen config that splits K returns its slices
    unsummed (`kernels.split_sum.SplitSum`), every other path a tensor."""
    if _choices and x.shape[-1] and not needs_autograd(x, weight, bias):
        config = _choices.get(_key(x, weight, bias, row_tile(x.numel() // x.shape[-1])))
        if config is not None:
            from kernels.skinny_gemm import skinny_gemm

            return skinny_gemm(x, weight, bias, config, out_dtype, defer_sum=defer_sum and DEFER_SUMS)
    if ONEDNN and x.device.type == "cpu" and _onednn_fits(x, weight, bias):
        y = _onednn(x, weight, bias)
    elif (x.device.type == "cpu" and x.dtype in (torch.bfloat16, torch.float16)
          and not needs_autograd(x, weight, bias) and not rows_independent(x.dtype)):
        y = _fixed_rows(x, weight, bias)
    else:
        y = F.linear(x, weight, bias)
    return y if out_dtype is None else y.to(out_dtype)


def _onednn(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x [..., K] @ weight [N, K]ᵀ (+ bias) by oneDNN, from the dense weight (module docstring)."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


def _fixed_rows(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x [..., K] @ weight [N, K]ᵀ (+ bias) in calls of exactly CPU_ROWS rows, the last padded with zeros, so that
    each row's result is the same bits whatever rows share the call (module docstring, fixed-size calls)."""
    K, N = x.shape[-1], weight.shape[0]
    rows = x.reshape(-1, K)
    M = rows.shape[0]
    if M == 0:
        return x.new_empty(*x.shape[:-1], N)
    if M % CPU_ROWS:  # (rows that fill their calls go in as they are)
        padded = rows.new_zeros(-(-M // CPU_ROWS) * CPU_ROWS, K)  # [M rounded up to CPU_ROWS, K]
        padded[:M] = rows
        rows = padded
    chunks = [F.linear(chunk, weight, bias) for chunk in rows.split(CPU_ROWS)]  # each [CPU_ROWS, N]
    y = chunks[0] if len(chunks) == 1 else torch.cat(chunks)  # (a step's or a verify's rows: one call, no copy)
    return y[:M].reshape(*x.shape[:-1], N)


def rows_independent(dtype: torch.dtype) -> bool:
    """Whether this CPU's reduced-precision `F.linear` in `dtype` gives every row the same bits whatever rows share
    its call (module docstring), measured once a process per dtype by `measure_rows_independent`; never where
    BASS_CPU_FIXED_ROWS=1 (`CPU_FIXED_ROWS`) keeps the fixed calls."""
    if CPU_FIXED_ROWS:
        return False
    if dtype not in _rows_independent:
        _rows_independent[dtype] = measure_rows_independent(dtype)
    return _rows_independent[dtype]


_rows_independent: dict[torch.dtype, bool] = {}  # `rows_independent`'s answers, once a process per dtype


def measure_rows_independent(dtype: torch.dtype, mm: Callable[..., torch.Tensor] = F.linear) -> bool:
    """Whether `mm(x, w, b)` in `dtype` gives each row of x the same bits in every call: a few calls of 2 to 100
    rows, at two offsets, against the same rows multiplied one at a time, on two shapes (K = 1024, where plain
    bf16 calls on an AMX Xeon rounded 6 of these 14 otherwise than row by row, and the 1.5B's width 1536), with
    and without a bias. A fraction of a second on a 2-core CPU."""
    g = torch.Generator().manual_seed(3)
    with torch.inference_mode():
        for n, k in ((1031, 1024), (2048, 1536)):
            x = torch.randn(100, k, generator=g).to(dtype)  # [100, K]
            w = torch.randn(n, k, generator=g).to(dtype)  # [N, K]
            b = torch.randn(n, generator=g).to(dtype)
            for bias in (None, b):
                alone = torch.cat([mm(x[i:i + 1], w, bias) for i in range(len(x))])  # [100, N]
                for rows in (2, 4, 9, 32, 33, 40, 100):  # a plain step, verifies of several widths, a prefill
                    for start in (0, 7):
                        if not torch.equal(mm(x[start:start + rows], w, bias), alone[start:start + rows]):
                            return False
    return True


def cpu_dtype() -> torch.dtype:
    """The dtype an "auto" engine runs on the CPU: BASS_CPU_DTYPE (float32 or bfloat16) where the environment names
    one, else what `measure_cpu_dtype` finds, measured once a process."""
    global _cpu_dtype
    forced = os.environ.get("BASS_CPU_DTYPE", "")
    if forced:
        if forced not in ("float32", "bfloat16"):
            raise ValueError(f"BASS_CPU_DTYPE must be float32 or bfloat16, got {forced!r}: unset it to let the "
                             "engine measure which one this CPU runs faster")
        return getattr(torch, forced)
    if _cpu_dtype is None:
        _cpu_dtype = measure_cpu_dtype()
    return _cpu_dtype


def measure_cpu_dtype(timer: Callable[[Callable[[], object]], float] | None = None) -> torch.dtype:
    """bfloat16 where this CPU's projections, as `linear` makes them (in CPU_ROWS-row calls where needed), beat
    float32 ones (oneDNN) by CPU_BF16_MARGIN, else float32: timed on a weight of the embedded target's largest
    projection shape, [17920 x 1536], at 4 rows (a plain step at the app's k) and 32 (a verify). `timer(fn)` gives
    seconds per call (default: the median of a few after a warm-up)."""
    timer = timer or _median_seconds
    g = torch.Generator().manual_seed(0)
    w32 = torch.randn(17920, 1536, generator=g)
    costs = {}
    with torch.inference_mode():
        for dtype, w in ((torch.float32, w32), (torch.bfloat16, w32.bfloat16())):
            x4, x32 = (torch.randn(n, 1536, generator=g).to(dtype) for n in (4, 32))
            costs[dtype] = timer(lambda x=x4, w=w: linear(x, w)) + timer(lambda x=x32, w=w: linear(x, w))
    return torch.bfloat16 if costs[torch.bfloat16] * (1 + CPU_BF16_MARGIN) < costs[torch.float32] else torch.float32


_cpu_dtype: torch.dtype | None = None  # `measure_cpu_dtype`'s answer, once a process


def _median_seconds(fn: Callable[[], object], repeats: int = 5) -> float:
    fn()  # warm-up: oneDNN builds its kernel for the shape on first use
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return sorted(times)[repeats // 2]


def _onednn_fits(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> bool:
    """float32 throughout, a contiguous weight, rows to multiply, and no gradient asked (the op has no
    backward: the draft's training runs on `F.linear`)."""
    return (x.dtype == weight.dtype == torch.float32 and (bias is None or bias.dtype == torch.float32)
            and weight.is_contiguous() and x.numel() > 0 and not needs_autograd(x, weight, bias))


def needs_autograd(*tensors: torch.Tensor | None) -> bool:
    """Whether a gradient is asked through any of `tensors`: grad mode is on and one of them requires grad (an
    inference-only kernel, with no backward, must then give way to its torch form)."""
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


class Linear(nn.Linear):
    """`nn.Linear` whose forward is `linear` (same parameters, same state-dict keys)."""

    def forward(self, x: torch.Tensor, defer_sum: bool = False) -> torch.Tensor | SplitSum:
        return linear(x, self.weight, self.bias, defer_sum=defer_sum)


def projections(model: nn.Module) -> Iterator[tuple[torch.Tensor, torch.Tensor | None]]:
    """(weight, bias) of every projection of `model` that goes through `linear`: its `Linear`s and its
    LM head table (`model.head`, if it has one)."""
    for m in model.modules():
        if isinstance(m, Linear):
            yield m.weight, m.bias
    head = getattr(model, "head", None)
    if isinstance(head, torch.Tensor):
        yield head, None


def graph_timer(fn: Callable[[int], object], calls: int) -> float:
    """Median µs of one call of fn, `calls` calls (fn(i), i < calls) captured in one CUDA graph."""
    graph, _ = capture(lambda: [fn(i) for i in range(calls)])
    graph.replay()
    times = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / calls)
    return sorted(times)[2]


@torch.inference_mode()
def tune(model: nn.Module, timer: Callable[[Callable[[int], object], int], float] = graph_timer,
         tiles: tuple[int, ...] = ROW_TILES, calls: int = 32, candidates: Sequence | None = None) -> list[dict]:
    """Time cuBLAS and each candidate config (default `kernels.skinny_gemm.CANDIDATES`) for every projection
    shape of `model` and row tile; record for `linear` the fastest config, unless cuBLAS beats it by `MARGIN`.
    Returns one row per (shape, tile): µs of cuBLAS and of the best config, and the choice. `timer(fn, calls)`
    gives µs per call of fn(i) (default: CUDA graphs, so CUDA only)."""
    from triton.runtime.errors import OutOfResources

    from kernels import skinny_gemm as skinny

    skinny_gemm = skinny.skinny_gemm
    candidates = skinny.CANDIDATES if candidates is None else candidates

    groups: dict[tuple, list] = {}
    for w, b in projections(model):
        groups.setdefault((w.shape[0], w.shape[1], b is not None, w.dtype), []).append((w, b))
    report = []
    for (N, K, has_bias, dtype), mats in groups.items():
        w0, b0 = mats[0]
        for tile in tiles:
            key = _key(w0, w0, b0, tile)  # x will share the weight's device and dtype
            if key in _measured:  # an earlier tune of this process timed this shape (its choice stands)
                report.append(_measured[key])
                continue
            x = torch.randn(tile, K, device=w0.device).to(dtype)

            def call(i, kernel=None, x=x, mats=mats):
                w, b = mats[i % len(mats)]
                return F.linear(x, w, b) if kernel is None else skinny_gemm(x, w, b, kernel)

            cublas = timer(call, calls)
            best, best_us = None, float("inf")
            for c in candidates:
                if not c.fits(N, K):
                    continue
                try:
                    us = timer(lambda i, c=c: call(i, c), calls)
                except OutOfResources:  # its pipeline does not fit this GPU's shared memory
                    continue
                if us < best_us:
                    best, best_us = c, us
            chosen = best if best_us <= cublas * (1 + MARGIN) else None
            if chosen is None:
                _choices.pop(key, None)
            else:
                _choices[key] = chosen
            _measured[key] = dict(N=N, K=K, bias=has_bias, rows=tile, weights=len(mats), cublas_us=cublas,
                                  best_us=best_us if best is not None else cublas,
                                  config=None if chosen is None else chosen.__dict__)
            report.append(_measured[key])
    return report


def clear() -> None:
    """Forget every choice and measurement: `linear` is `F.linear` again until the next `tune` (graphs captured
    before keep what they captured)."""
    _choices.clear()
    _measured.clear()


@contextmanager
def cublas_only() -> Iterator[None]:
    """Within the block `linear` is `F.linear` (what it captures or runs eagerly); the choices come back after:
    one engine's graphs on cuBLAS beside another's on the tuned kernels, in one process (benchmarks)."""
    saved = dict(_choices)
    _choices.clear()
    try:
        yield
    finally:
        _choices.clear()
        _choices.update(saved)


def describe(report: list[dict]) -> str:
    """One line per tuned shape: what cuBLAS and the skinny kernel took, and which one `linear` uses."""
    lines = []
    for r in report:
        use = "skinny " + "/".join(str(v) for v in r["config"].values()) if r["config"] else "cuBLAS"
        lines.append(f"  [{r['rows']:2d} x {r['K']}] @ [{r['N']} x {r['K']}]ᵀ x{r['weights']}: cuBLAS "
                     f"{r['cublas_us']:.1f} µs, best tile {r['best_us']:.1f} µs -> {use}")
    return "\n".join(lines)
