"""Plain-torch ragged attention: the reference every backend is tested against, and the CPU backend.

For sequence b, query i (i < q_len[b]) at absolute position p_i (see `kernels/layout.py`):

    o_i = sum_j softmax_j(s_ij) v_j,   s_ij = scale * <q_i, k_j>,
    j ranges over prefix rows 0 .. prefix_len[g]-1 and suffix rows 0 .. kv_len[b]-1
    with pos(j) <= p_i (causal) and, when window > 0, pos(j) > p_i - window.

Grouped-query attention: query head h reads kv head h // (Hq / Hkv). The prefix is gathered per
sequence here (a copy); the kernels read it in place.
"""

from __future__ import annotations

import torch

from kernels.layout import check_ragged_inputs


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
    scores = torch.matmul(qh.to(acc), k.to(acc)[:, :, None].transpose(-1, -2)) * scale  # [B, Hkv, rep, T, P+S]
    scores = scores.masked_fill(~allowed[:, None, None], float("-inf"))
    probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # rows with no visible key -> 0
    out = torch.matmul(probs, v.to(acc)[:, :, None])  # [B, Hkv, rep, T, D]
    out = out.permute(0, 3, 1, 2, 4).reshape(B, T, Hq, D)
    q_ok = (i[None, :] < ql[:, None])[:, :, None, None]  # [B, T, 1, 1]
    return torch.where(q_ok, out, torch.zeros((), dtype=acc, device=q.device)).to(q.dtype)
