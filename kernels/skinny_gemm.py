"""y = x Wᵀ (+ b) for decode-shaped inputs: few rows x [M, K] (M <= 64), a weight W [N, K] read once.

At decode time a projection reads its whole weight to multiply a handful of rows, so its time is the
weight's bytes over the memory bandwidth, N·K·2 / ~3 TB/s, and nothing else. Tensor cores need tiles of
16+ rows, so the kernel computes the transposed product ("swap AB"), with the weight's rows as the
MMA's long side:

    yᵀ[n-tile, :M] = Σ_k  W[n-tile, k-tile] · x[:M, k-tile]ᵀ          [BN, BK] @ [BK, BM] -> [BN, BM]

Program (i, s) owns output columns n ∈ [i·BN, (i+1)·BN) and the K-slice s of SPLIT_K equal slices.
With SPLIT_K = 1 it adds the bias and writes y in x's dtype; otherwise it writes its float32 partial
sum to a workspace [SPLIT_K, M, N], and a second launch sums the slices in a fixed order (so the result
does not depend on which program finished first), adds the bias and casts; where y's only reader can sum
the slices inside its own launch, the workspace is handed to it instead (`defer_sum`, `kernels.split_sum`;
on the H200 regular decoding then took 0.993 of the time, `bash scripts/gpu_draft.sh ab`).
Split-K exists for the projections with few output columns and a long K (a down projection: N 1536, K 8960),
which would otherwise occupy fewer programs than the GPU has SMs. An LM head asks for float32 out (`out_dtype`): y is
still rounded to x's dtype, then stored widened, the bits of `y.float()` without the launch that widens a
[rows, 151,936] y (5.8 µs at 8 rows, 14 at 32 in a verify on the H100).

Three fusions were measured on the H100 and left out. (1) The sum done by each column tile's last program to
arrive (an atomic counter per tile, the slices still summed in order), instead of the second launch: as the
engine runs, the 1.5B's forward took 1.785–1.787 ms at batch 8 against 1.764–1.768 with the second launch,
alternated in one call: under PDL the second launch is
already hidden, and one program summing a tile serially ends the kernel later than a grid of them. (2) The gated MLP's
activation inside this kernel's loads (x = act(gate) · up from [gate | up]: the same bits, one launch less
per layer): tuning never chose it over the activation's own launch followed by the projection, for the 1.5B
(13.7 µs at 16 rows) or the 7B (34.9 µs), since each program then computes the activation of its whole K
slice inside the loop that streams the weight (`bass.models.linear.tune`'s timings). (3) The
activation in the gate/up projection's epilogue instead (program i streams gate rows n and up rows I + n into
two accumulators and writes act(g) · u, split-K 1): its best config was never faster than the projection
followed by the activation's launch (1.5B 22.2 µs at 16 rows, 7B 64.1 µs), so the forward was the same graph
with or without it: under PDL that launch costs next to nothing.
Nor do the tuner's candidates include K steps of 64 or 8-warp tiles, though timed alone the gate/up projection
streamed faster in them (on the H200, 15.6 µs at 16 rows against 17.5): tuned in, they took regular decoding
1.004x its time and BASS at fixed L = 3 1.016x, in ms/token/seq (alternated runs, `bash scripts/gpu_draft.sh ab`).
A projection timed alone is not the projection between
the norm and the activation in a forward.

The x tile is padded to BM = 16, 32 or 64 rows by masked loads; the K loop streams the weight through
`num_stages` asynchronous buffers. A row's sum runs over the same K tiles in the same order whatever M
is, so under one config a row's result does not depend on how many rows share the launch (a plain step
of 8 rows and a verify of 16 agree on the rows they share, when the same config serves both). float32
inputs multiply in full float32 ("ieee"), never rounded to tf32. No host synchronisation (CUDA-graph safe).

`SkinnyConfig` holds the tile choice; which one is fastest depends on the GPU and the shape, so
`bass.models.linear` measures them against cuBLAS on the device before using any (STYLE 14).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from kernels.pdl import enter, launch_args
from kernels.split_sum import SplitSum

_empty = torch.empty  # tests swap in a NaN-filled allocator to catch unwritten outputs
MAX_ROWS = 64  # past this, a GEMM library's tiles do better


@dataclass(frozen=True)
class SkinnyConfig:
    """Tiles of one launch: BN output columns and BK of K per step, SPLIT_K slices of K, pipeline depth."""

    block_n: int = 64
    block_k: int = 128
    split_k: int = 1
    num_stages: int = 4
    num_warps: int = 4

    def __post_init__(self) -> None:
        for name in ("block_n", "block_k"):
            v = getattr(self, name)
            if v < 16 or v & (v - 1):
                raise ValueError(f"{name} must be a power of two >= 16 (a tensor-core tile), got {v}")
        if self.split_k < 1 or self.num_stages < 1 or self.num_warps not in (1, 2, 4, 8, 16):
            raise ValueError(f"split_k and num_stages must be >= 1 and num_warps a power of two <= 16: {self}")

    def fits(self, N: int, K: int) -> bool:
        """Whether the K slices tile K exactly in BK steps (the kernel masks N, not K)."""
        return K % (self.block_k * self.split_k) == 0


# The configs `bass.models.linear.tune` times on the device: the winners of a grid of tiles timed on
# an H100 across the 1.5B and 7B projections (small N: narrow tiles; long K: split; large N: wide). A split
# must divide K / BK: the 1.5B's down projection (K = 8960 = 70 x 128) splits in 2, 5 or 7, never 4.
#
# Every program reads all of x's rows for its K slice, so x is read N / BN times over: at 32-64 rows and BN = 16
# that is more bytes (from L2) than the weight itself. Wider column tiles split over K read x fewer times at the
# same program count; for K = 1536 (= 12 x 128) and 3072 (24 x 128) that takes splits of 3, 4, 6 and 8, which the
# first grid lacked. Tuned on the H100 at the 1.5B's shapes they took the target's qkv and o projections from 6.2
# to 5.7 µs and 5.6 to 5.3 at 48 rows, the draft's input projection [512 x 3072] from 4.8 to 3.3 µs at 16 rows
# and its down projection from 3.6 to 3.0; a BASS round at batch 8 from 2.21 to 2.18 ms at L = 3 and 2.46 to 2.40
# at L = 4 (`python -m bench.real_bench`).
CANDIDATES = (
    SkinnyConfig(16, 128, 1, 5), SkinnyConfig(32, 128, 1, 5), SkinnyConfig(64, 128, 1, 3),
    SkinnyConfig(128, 128, 1, 3), SkinnyConfig(32, 128, 2, 5), SkinnyConfig(64, 128, 2, 5),
    SkinnyConfig(16, 128, 2, 5), SkinnyConfig(32, 128, 5, 5), SkinnyConfig(64, 128, 5, 5),
    SkinnyConfig(64, 128, 7, 5), SkinnyConfig(64, 128, 3, 5), SkinnyConfig(64, 128, 4, 5),
    SkinnyConfig(64, 128, 6, 5), SkinnyConfig(32, 128, 8, 5), SkinnyConfig(16, 128, 4, 5),
)


# M (x's rows) is not specialised on: Triton compiles an integer argument again when it turns 1, or a multiple
# of 16, or neither, so a verify of 8 x 3 = 24 rows would compile anew, mid-decode, in its first round (2.6 s of
# a timed round at batch 8 on the H100). A config and a row tile compile once, when `bass.models.linear.tune`
# times them at load.
@triton.jit(do_not_specialize=["M"])
def _skinny_gemm_fwd(
    X, W, B, Y, WS, M, N, K, stride_xm, stride_wn, stride_ym, K_SLICE,
    HAS_BIAS: tl.constexpr, SPLIT_K: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
    UPCAST: tl.constexpr, PRECISION: tl.constexpr, PDL: tl.constexpr,
):
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    n = pid_n * BN + tl.arange(0, BN)  # [BN]
    m = tl.arange(0, BM)  # [BM]
    kk = tl.arange(0, BK)  # [BK]
    n_ok = n < N
    k0 = pid_k * K_SLICE
    enter(PDL)
    w_ptrs = W + n[:, None].to(tl.int64) * stride_wn + (k0 + kk)[None, :]  # [BN, BK]
    x_ptrs = X + m[None, :] * stride_xm + (k0 + kk)[:, None]  # [BK, BM]
    acc = tl.zeros((BN, BM), dtype=tl.float32)
    for _ in range(0, K_SLICE, BK):
        w = tl.load(w_ptrs, mask=n_ok[:, None], other=0.0)
        x = tl.load(x_ptrs, mask=m[None, :] < M, other=0.0)
        if UPCAST:  # the interpreter's bf16 dot is wrong; a bf16 product is exact in float32 anyway
            w, x = w.to(tl.float32), x.to(tl.float32)
        acc = tl.dot(w, x, acc, input_precision=PRECISION)  # [BN, BM]
        w_ptrs += BK
        x_ptrs += BK
    out_mask = n_ok[:, None] & (m[None, :] < M)
    if SPLIT_K == 1:
        if HAS_BIAS:
            acc += tl.load(B + n, mask=n_ok, other=0.0).to(tl.float32)[:, None]
        y = acc.to(X.dtype.element_ty).to(Y.dtype.element_ty)  # rounded to x's dtype even when y is wider
        tl.store(Y + m[None, :] * stride_ym + n[:, None], y, mask=out_mask)
    else:
        tl.store(WS + (pid_k * M + m[None, :]) * N + n[:, None], acc, mask=out_mask)


@triton.jit(do_not_specialize=["M"])
def _split_k_sum(WS, B, Y, X, M, N, stride_ym, HAS_BIAS: tl.constexpr, SPLIT_K: tl.constexpr, BLOCK: tl.constexpr,
                 PDL: tl.constexpr):
    enter(PDL)  # X: read for its dtype only, which y is rounded to
    row = tl.program_id(0)
    n = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = n < N
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for s in tl.static_range(SPLIT_K):  # a fixed order: the same sum on every run
        acc += tl.load(WS + (s * M + row) * N + n, mask=ok, other=0.0)
    if HAS_BIAS:
        acc += tl.load(B + n, mask=ok, other=0.0).to(tl.float32)
    tl.store(Y + row * stride_ym + n, acc.to(X.dtype.element_ty).to(Y.dtype.element_ty), mask=ok)


def skinny_gemm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                config: SkinnyConfig = SkinnyConfig(), out_dtype: torch.dtype | None = None,
                defer_sum: bool = False) -> torch.Tensor | SplitSum:
    """x [..., K] @ weight [N, K]ᵀ (+ bias [N]) -> [..., N], for at most MAX_ROWS rows of x: rounded to x's
    dtype, and stored in `out_dtype` if given (a wider one: the bits of the x-dtype result widened). With
    `defer_sum`, a config that splits K returns its slices unsummed (`kernels.split_sum`), for a reader that
    sums them."""
    K = x.shape[-1]
    N = weight.shape[0]
    if weight.dim() != 2 or weight.shape[1] != K:
        raise ValueError(f"weight must be [N, {K}] to match x's last dim, got {tuple(weight.shape)}")
    if bias is not None and bias.shape != (N,):
        raise ValueError(f"bias must be [{N}], got {tuple(bias.shape)}")
    if not config.fits(N, K):
        raise ValueError(f"K = {K} is not a multiple of block_k · split_k = {config.block_k * config.split_k}: "
                         "pick a config whose `fits(N, K)` holds")
    x2 = x.reshape(-1, K)
    M = x2.shape[0]
    if M > MAX_ROWS:
        raise ValueError(f"skinny_gemm is for at most {MAX_ROWS} rows, got {M}: use torch.nn.functional.linear")
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    weight = weight if weight.stride(-1) == 1 else weight.contiguous()
    S = config.split_k
    deferred = defer_sum and S > 1 and out_dtype in (None, x.dtype) and M > 0 and N > 0
    # (a deferred sum allocates no y: the first launch never writes y with SPLIT_K > 1, so x, of y's dtype, stands in)
    y = x2 if deferred else _empty((M, N), dtype=out_dtype or x.dtype, device=x.device)
    if M == 0 or N == 0:
        return y.view(*x.shape[:-1], N)
    BM = max(16, triton.next_power_of_2(M))
    ws = _empty((S, M, N), dtype=torch.float32, device=x.device) if S > 1 else y
    b = bias if bias is not None else y  # never read without HAS_BIAS
    _skinny_gemm_fwd[(triton.cdiv(N, config.block_n), S)](
        x2, weight, b, y, ws, M, N, K, x2.stride(0), weight.stride(0), y.stride(0), K // S,
        HAS_BIAS=bias is not None and S == 1, SPLIT_K=S, BM=BM, BN=config.block_n, BK=config.block_k,
        UPCAST=x.device.type == "cpu", PRECISION="ieee" if x.dtype == torch.float32 else "tf32",
        num_stages=config.num_stages, num_warps=config.num_warps, **launch_args(x.device),
    )
    if deferred:
        return SplitSum(ws, bias, (*x.shape[:-1], N), x.dtype, sum_slices)
    if S > 1:
        sum_slices(ws, bias, y, x2)
    return y.view(*x.shape[:-1], N)


def sum_slices(ws: torch.Tensor, bias: torch.Tensor | None, y: torch.Tensor, like: torch.Tensor) -> None:
    """y [M, N] = Σ_s ws[s] (+ bias) over ws [S, M, N] in order s = 0, 1, .., rounded to `like`'s dtype and
    stored in y's (the second launch; `kernels.split_sum`)."""
    S, M, N = ws.shape
    block = min(1024, triton.next_power_of_2(N))
    _split_k_sum[(M, triton.cdiv(N, block))](ws, bias if bias is not None else y, y, like, M, N, y.stride(0),
                                             HAS_BIAS=bias is not None, SPLIT_K=S, BLOCK=block, num_warps=4,
                                             **launch_args(ws.device))


def skinny_gemm_ref(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """Plain-torch twin: float32 accumulation, one rounding to x's dtype at the end."""
    y = x.float() @ weight.float().T
    if bias is not None:
        y = y + bias.float()
    return y.to(x.dtype)


__all__ = ["CANDIDATES", "MAX_ROWS", "SkinnyConfig", "skinny_gemm", "skinny_gemm_ref", "sum_slices"]
