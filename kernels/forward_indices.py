"""A forward's index arithmetic over the ragged KV cache in one Triton launch: lengths, cache rows, RoPE.

Every forward (a verify, a decode step, a draft step) begins with the same bookkeeping. For sequence b,
new token t < T, with s_b = suffix_len[b], q_b = q_len[b], C the cache's capacity (its scratch row) and a
RoPE table of P positions (table[p] = [cos | sin] of p * theta, [2, D], computed once per model):

    kv_len[b]     = s_b + q_b                                           keys the attention reads
    rows[b, t]    = s_b + t   if t < q_b and s_b + t < C,   else C      where K/V of token t are stored
    pos[b, t]     = prefix_len[group[b]] + s_b + t                      its absolute position
    rope[b, t]    = table[min(pos[b, t], P - 1)]                        [2, D]: cos, sin

A padding token (t >= q_b) writes its K/V to the scratch row C, which no length ever reaches: a dense
scatter with no data-dependent shape, and no valid row is overwritten.

In torch that is about twenty launches of 1-2 µs each (aranges, casts, an index, compares, a where, then
the angles: a product, a cat, cos, sin, two casts) before the first block, in every forward: a fifth of
the trained draft's step of ~70 launches on the H100 (`python -m bench.profile steps`'s kernel tables). Here
it is one launch, one program per (b, t).

The table replaces computing cos and sin per token: its rows are the same torch ops over positions
0 .. P-1 (`bass.models.layers.rope_table`), elementwise, so every value is bit-identical to computing them
per token. P is the model's context; only positions past it (never emitted: the engine caps prompt +
new tokens at the context) are clamped to its last row. No host synchronisation (CUDA-graph safe).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.pdl import enter, launch_args

_empty = torch.empty  # tests swap in a NaN-filled allocator to catch unwritten outputs


@triton.jit
def _forward_indices(SUFFIX, PREFIX, GROUP, QLEN, TABLE, KV_LEN, ROWS, ROPE, T, CAP, P,
                     TWO_D: tl.constexpr, BLOCK: tl.constexpr, PDL: tl.constexpr):
    enter(PDL)
    b = tl.program_id(0).to(tl.int64)
    t = tl.program_id(1).to(tl.int64)
    s = tl.load(SUFFIX + b).to(tl.int64)
    q = tl.load(QLEN + b).to(tl.int64)
    if t == 0:
        tl.store(KV_LEN + b, (s + q).to(KV_LEN.dtype.element_ty))
    row = s + t
    tl.store(ROWS + b * T + t, tl.where((t < q) & (row < CAP), row, CAP))
    pos = tl.load(PREFIX + tl.load(GROUP + b).to(tl.int64)).to(tl.int64) + s + t
    pos = tl.minimum(pos, P - 1)
    d = tl.arange(0, BLOCK)
    ok = d < TWO_D
    tl.store(ROPE + (b * T + t) * TWO_D + d, tl.load(TABLE + pos * TWO_D + d, mask=ok), mask=ok)


def forward_indices_fused(suffix_len: torch.Tensor, prefix_len: torch.Tensor, seq_group: torch.Tensor,
                          q_len: torch.Tensor, width: int, capacity: int, table: torch.Tensor
                          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(kv_len [B] in suffix_len's dtype, rows [B, T] int64, rope [B, T, 2, D] in the table's dtype) of the
    module docstring; suffix_len, seq_group, q_len [B], prefix_len [G], table [P, 2, D] (contiguous)."""
    B, T = suffix_len.shape[0], width
    P, two, D = table.shape
    if two != 2 or not table.is_contiguous():
        raise ValueError(f"the RoPE table must be a contiguous [P, 2, D] tensor, got {tuple(table.shape)}")
    if not (suffix_len.shape == seq_group.shape == q_len.shape == (B,)):
        raise ValueError("suffix_len, seq_group and q_len must all be [B]")
    # the kernel reads them with unit stride (no-op copies for the cache's own [B] views and a graph's buffers)
    suffix_len, prefix_len, seq_group, q_len = (t.contiguous() for t in (suffix_len, prefix_len, seq_group, q_len))
    device = suffix_len.device
    kv_len = _empty((B,), dtype=suffix_len.dtype, device=device)
    rows = _empty((B, T), dtype=torch.long, device=device)
    rope = _empty((B, T, 2, D), dtype=table.dtype, device=device)
    if B * T == 0:
        return kv_len, rows, rope
    _forward_indices[(B, T)](
        suffix_len, prefix_len, seq_group, q_len, table, kv_len, rows, rope, T, capacity, P,
        TWO_D=2 * D, BLOCK=triton.next_power_of_2(2 * D), num_warps=1, **launch_args(device),
    )
    return kv_len, rows, rope


def forward_indices_ref(suffix_len: torch.Tensor, prefix_len: torch.Tensor, seq_group: torch.Tensor,
                        q_len: torch.Tensor, width: int, capacity: int, table: torch.Tensor
                        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Plain-torch twin (what `bass.models.layers.forward_indices` runs off CUDA)."""
    t = torch.arange(width, device=suffix_len.device)
    kv_len = suffix_len + q_len.to(suffix_len.dtype)
    rows = suffix_len.long()[:, None] + t  # [B, T]
    rows = torch.where((t < q_len.long()[:, None]) & (rows < capacity), rows, capacity)
    pos = (prefix_len[seq_group.long()] + suffix_len).long()[:, None] + t  # [B, T]
    return kv_len, rows, table[pos.clamp(max=table.shape[0] - 1)]


__all__ = ["forward_indices_fused", "forward_indices_ref"]
