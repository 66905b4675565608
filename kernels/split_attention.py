"""BASS-SPLIT (the paper's Figure 4, right): one QKᵀ and one PV GEMM per sequence, no padding.

For each live sequence b (q_len[b] > 0), with K_b, V_b [Hkv, L_b, D] its exact keys (group prefix
then own suffix, L_b = prefix_len[g] + kv_len[b]) and Q_b packed as [Hkv, REP * q_len[b], D]:

    O_b = softmax(mask(scale * Q_b K_bᵀ)) V_b

No FLOP is spent on padding, but the host loops over the batch and launches a few kernels per
sequence, so the cost grows with B. The loop needs the lengths on the host (one sync per call).
"""

from __future__ import annotations

import torch

from kernels.layout import check_ragged_inputs


def split_kv(
    prefix_k: torch.Tensor,  # [G, P, Hkv, D]
    prefix_v: torch.Tensor,  # [G, P, Hkv, D]
    prefix_len: list[int],
    seq_group: list[int],
    suffix_k: torch.Tensor,  # [B, S, Hkv, D]
    suffix_v: torch.Tensor,  # [B, S, Hkv, D]
    kv_len: list[int],
    live: list[bool],
) -> list[tuple[torch.Tensor, torch.Tensor] | None]:
    """Per live sequence, its exact K and V as contiguous [Hkv, L_b, D] (the paper's per-sequence cache)."""
    kv: list[tuple[torch.Tensor, torch.Tensor] | None] = []
    for b, g in enumerate(seq_group):
        if not live[b]:
            kv.append(None)
            continue
        p, s = prefix_len[g], kv_len[b]
        k = torch.cat([prefix_k[g, :p], suffix_k[b, :s]]).transpose(0, 1).contiguous()  # [Hkv, L_b, D]
        v = torch.cat([prefix_v[g, :p], suffix_v[b, :s]]).transpose(0, 1).contiguous()  # [Hkv, L_b, D]
        kv.append((k, v))
    return kv


def split_attention_one(
    q_b: torch.Tensor,  # [q_len, Hq, D]
    k_b: torch.Tensor,  # [Hkv, L_b, D]
    v_b: torch.Tensor,  # [Hkv, L_b, D]
    scale: float,
    window: int = 0,
) -> torch.Tensor:  # [q_len, Hq, D]
    """Attention of one sequence's new tokens, which are the last q_len of its L_b keys."""
    ql, Hq, D = q_b.shape
    Hkv, L = k_b.shape[0], k_b.shape[1]
    rep = Hq // Hkv
    qg = q_b.view(ql, Hkv, rep, D).permute(1, 2, 0, 3).reshape(Hkv, rep * ql, D)  # [Hkv, REP*ql, D]
    scores = torch.matmul(qg, k_b.transpose(-1, -2)).float() * scale  # [Hkv, REP*ql, L]
    key_pos = torch.arange(L, device=q_b.device)
    q_pos = L - ql + torch.arange(ql, device=q_b.device)
    allowed = key_pos[None, :] <= q_pos[:, None]  # [ql, L]
    if window > 0:
        allowed &= key_pos[None, :] > q_pos[:, None] - window
    scores = scores.view(Hkv, rep, ql, L).masked_fill(~allowed, float("-inf"))
    probs = torch.softmax(scores, dim=-1).to(v_b.dtype).view(Hkv, rep * ql, L)
    out = torch.matmul(probs, v_b)  # [Hkv, REP*ql, D]
    return out.view(Hkv, rep, ql, D).permute(2, 0, 1, 3).reshape(ql, Hq, D)


def split_attention(
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
    """BASS-SPLIT on the engine's layout: gather each sequence's exact K/V, then per-sequence GEMMs."""
    check_ragged_inputs(q, prefix_k, prefix_v, prefix_len, seq_group, suffix_k, suffix_v, kv_len, q_len)
    plen, group, kvl, ql = (t.tolist() for t in (prefix_len, seq_group, kv_len, q_len))
    out = torch.zeros_like(q)  # [B, T, Hq, D]; padding rows stay zero
    live = [n > 0 for n in ql]
    for b, kv_b in enumerate(split_kv(prefix_k, prefix_v, plen, group, suffix_k, suffix_v, kvl, live)):
        if kv_b is not None:
            out[b, : ql[b]] = split_attention_one(q[b, : ql[b]], *kv_b, scale, window)
    return out
