"""A feature draft's input rows in one launch: each entry's feature beside its token's embedding.

Entry (b, t) of a feature draft's step pairs the target's hidden state f with the next token x
(`bass.models.feature_draft`); its fc reads them side by side:

    out[b, t] = [ f[b, t] ; E[x[b, t]] ]        f [B, T, Hf],  E [V, He],  x [B, T]  ->  out [B, T, Hf + He]

In torch that is the embedding's gather and a concatenation, two launches per draft step. The gather
is the slower one inside a chained proposal: each step after the first feeds the token the step before
drew, a column of the proposal's [B, L] token buffer, and advanced indexing with that strided index takes
torch's general index kernel, 4.8 µs per step on the H100, where a contiguous index takes its gather,
2.3 µs; the concatenation then adds 1.5-1.8 µs (each kernel's own time in `python -m bench.profile steps`'s
kernel tables, with BASS_PDL=0). Here one
program per entry copies both halves, reading x with its strides and f with its row strides: the same
values, bit for bit (f of another dtype than E's is cast by torch first, as `features.to(E.dtype)` casts
it). No host synchronisation (CUDA-graph safe).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.pdl import enter, launch_args

_empty = torch.empty  # tests swap in a NaN-filled allocator to catch unwritten outputs


@triton.jit
def _embed_concat(F, stride_fb, stride_ft, E, X, stride_xb, stride_xt, OUT, T,
                  HF: tl.constexpr, HE: tl.constexpr, BLOCK_F: tl.constexpr, BLOCK_E: tl.constexpr,
                  PDL: tl.constexpr):
    enter(PDL)
    r = tl.program_id(0).to(tl.int64)
    b, t = r // T, r % T
    out = OUT + r * (HF + HE)
    d = tl.arange(0, BLOCK_F)
    f = tl.load(F + b * stride_fb + t * stride_ft + d, mask=d < HF)
    tl.store(out + d, f, mask=d < HF)
    token = tl.load(X + b * stride_xb + t * stride_xt).to(tl.int64)
    e = tl.arange(0, BLOCK_E)
    tl.store(out + HF + e, tl.load(E + token * HE + e, mask=e < HE), mask=e < HE)


def embed_concat_fused(features: torch.Tensor, table: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """[features ; table[tokens]] along the last axis (module docstring): features [B, T, Hf] (any dtype,
    unit stride in Hf), table [V, He] contiguous, tokens [B, T] (any strides) -> [B, T, Hf + He] in the
    table's dtype."""
    B, T, Hf = features.shape
    He = table.shape[1]
    if tokens.shape != (B, T) or not table.is_contiguous():
        raise ValueError(f"tokens must be [B, T] = {(B, T)} and the table contiguous; got tokens "
                         f"{tuple(tokens.shape)}, table strides {table.stride()}")
    if features.dtype != table.dtype:  # torch's rounding (a draft's features come in the table's dtype)
        features = features.to(table.dtype)
    if Hf > 1 and features.stride(2) != 1:
        features = features.contiguous()
    out = _empty((B, T, Hf + He), dtype=table.dtype, device=table.device)
    if B * T:
        _embed_concat[(B * T,)](features, features.stride(0), features.stride(1), table, tokens, tokens.stride(0),
                                tokens.stride(1), out, T, HF=Hf, HE=He, BLOCK_F=triton.next_power_of_2(Hf),
                                BLOCK_E=triton.next_power_of_2(He), num_warps=4, **launch_args(table.device))
    return out


def embed_concat_ref(features: torch.Tensor, table: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Plain-torch twin (what `bass.models.layers.embed_concat` runs off CUDA)."""
    return torch.cat([features.to(table.dtype), table[tokens]], -1)


__all__ = ["embed_concat_fused", "embed_concat_ref"]
