"""Plain-torch ragged attention: the reference every backend is tested against, and the CPU backend.

For sequence b, query i (i < q_len[b]) at absolute position p_i (see `kernels/layout.py`):

    o_i = sum_j softmax_j(s_ij) v_j,   s_ij = scale * <q_i, k_j>,
    j ranges over prefix rows 0 .. prefix_len[g]-1 and suffix rows 0 .. kv_len[b]-1
    with pos(j) <= p_i (causal) and, when window > 0, pos(j) > p_i - window.

Grouped-query attention: query head h reads kv head h // (Hq / Hkv). The prefix is gathered per
sequence here (a copy); the kernels read it in place.

Scores and sums run in float32 (float64 for float64 inputs) and the output is rounded to the inputs' dtype. Below
float32 (bf16 on a CPU) that rounding turns the last-bit differences between a [T, D] x [D, L] product and a
[1, D] x [D, L] one into whole bf16 steps: the last row of a 5-wide verify and the same row alone differed in 47 of
184,320 outputs (random bf16 inputs, ad hoc). So for such inputs each of up to SOLO_ROWS query rows is computed
alone, as a one-row query, which is what a plain decoding step computes: a verify's rows then come out bit for
bit as the steps of regular decoding would have them, and greedy BASS keeps regular greedy decoding's tokens.
"""

from __future__ import annotations

import torch

from kernels.layout import check_ragged_inputs

SOLO_ROWS = 64  # reduced precision: query rows computed one at a time up to this width (wider: a prefill, at once)


def ragged_attention_ref(
    q: torch.Tensor,  # [B, T, Hq, D]
    prefix_k: torch.Tensor,  # [G, P, Hkv, D]
    prefix_v: torch.Tensor,  # [G, P, Hkv, D]
    prefix_len: torch.Tensor,  # [G]
    seq_group: torch.Tensor,  # [B]
    suffix_k: torch.Tensor,  # [B, S, Hkv, D]
    suffix_v: torch.Tensor,  # [B, S, Hkv, D]
    kv_len: torch.Tensor,  # [B]
    q_len: torch.Tensor,  # [B]
    scale: float,
    window: int = 0,
) -> torch.Tensor:  # [B, T, Hq, D]
    """Attention over a shared prefix plus a ragged per-sequence suffix, computed densely with masks.

    Softmax runs in float32 (float64 if the inputs are float64); padding query rows come back zero.
    """
    check_ragged_inputs(q, prefix_k, prefix_v, prefix_len, seq_group, suffix_k, suffix_v, kv_len, q_len)
    B, T, Hq, D = q.shape
    G, P, Hkv, _ = prefix_k.shape
    S = suffix_k.shape[1]
    rep = Hq // Hkv
    group = seq_group.long()
    plen = prefix_len.long()[group]  # [B]
    kvl, ql = kv_len.long(), q_len.long()

    k = torch.cat([prefix_k[group], suffix_k], dim=1).transpose(1, 2)  # [B, Hkv, P+S, D]
    v = torch.cat([prefix_v[group], suffix_v], dim=1).transpose(1, 2)  # [B, Hkv, P+S, D]
    qh = q.view(B, T, Hkv, rep, D).permute(0, 2, 3, 1, 4)  # [B, Hkv, rep, T, D]

    j = torch.arange(P + S, device=q.device)
    in_prefix = j < P
    key_pos = torch.where(in_prefix, j, plen[:, None] + j - P)  # [B, P+S]
    key_ok = torch.where(in_prefix, j < plen[:, None], (j - P) < kvl[:, None])  # [B, P+S]
    i = torch.arange(T, device=q.device)
    q_pos = plen[:, None] + kvl[:, None] - ql[:, None] + i  # [B, T]
    allowed = key_ok[:, None, :] & (key_pos[:, None, :] <= q_pos[:, :, None])  # [B, T, P+S]
    if window > 0:
        allowed &= key_pos[:, None, :] > q_pos[:, :, None] - window

    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    k, v = k.to(acc), v.to(acc)  # [B, Hkv, P+S, D]
    if q.dtype in (torch.float32, torch.float64) or T > SOLO_ROWS:
        out = _attend(qh.to(acc), k, v, allowed, scale)
    else:  # one query row at a time (module docstring)
        out = torch.cat([_attend(qh[:, :, :, r:r + 1].to(acc), k, v, allowed[:, r:r + 1], scale)
                         for r in range(T)], dim=3)
    out = out.permute(0, 3, 1, 2, 4).reshape(B, T, Hq, D)
    q_ok = (i[None, :] < ql[:, None])[:, :, None, None]  # [B, T, 1, 1]
    return torch.where(q_ok, out, torch.zeros((), dtype=acc, device=q.device)).to(q.dtype)


def _attend(qh: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor, scale: float) -> torch.Tensor:
    """softmax(scale · q kᵀ, masked) v for queries qh [B, Hkv, rep, T, D] over k, v [B, Hkv, L, D], where
    allowed [B, T, L] (rows with no visible key give 0): [B, Hkv, rep, T, D]. A KV head's rep · T queries go in
    one GEMM against its keys, never a broadcast copy of the keys per query head (L keys × rep each call: what
    made a chunk of a long prompt cost seconds on a CPU)."""
    B, H, rep, T, D = qh.shape
    L = k.shape[2]
    scores = torch.matmul(qh.reshape(B, H, rep * T, D), k.transpose(-1, -2)).view(B, H, rep, T, L) * scale
    scores = scores.masked_fill(~allowed[:, None, None], float("-inf"))
    probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return torch.matmul(probs.view(B, H, rep * T, L), v).view(B, H, rep, T, D)
