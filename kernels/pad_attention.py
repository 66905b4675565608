"""BASS-PAD (the paper's Figure 4, left): pad K, V and P to the longest sequence, two batched GEMMs.

For every sequence b the keys are its group's prefix followed by its own suffix. PAD lays them out
as one dense [B, Hkv, L, D] tensor, L = max_g prefix_len + max_b kv_len, and computes

    S = scale * Q Kᵀ        one batched GEMM over B * Hkv, Q packed as [B, Hkv, REP * T, D]
    P = softmax(mask(S))    keys past a sequence's length, causal and window masks -> -inf
    O = P V                 one batched GEMM

The work on padded columns is wasted, and it grows with raggedness; that is the cost the paper
measures. Key order inside the padded axis does not change the softmax, so the prefix block and
the suffix block are simply stacked: column c < Pmax is prefix row c, column Pmax + j suffix row j.

`pad_kv` is the layout conversion (our cache stores the prefix once and the suffix per sequence);
`pad_attention_padded` is the part the paper times, on K/V already padded.
"""

from __future__ import annotations

import torch

from kernels.layout import check_ragged_inputs


def pad_kv(
    prefix_k: torch.Tensor,  # [G, P, Hkv, D]
    prefix_v: torch.Tensor,  # [G, P, Hkv, D]
    prefix_len: torch.Tensor,  # [G]
    seq_group: torch.Tensor,  # [B]
    suffix_k: torch.Tensor,  # [B, S, Hkv, D]
    suffix_v: torch.Tensor,  # [B, S, Hkv, D]
    kv_len: torch.Tensor,  # [B]
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Padded K, V [B, Hkv, Pmax + Smax, D] (contiguous) and Pmax. Reads the lengths on the host."""
    p_max = int(prefix_len.max()) if prefix_len.numel() else 0
    s_max = int(kv_len.max()) if kv_len.numel() else 0
    group = seq_group.long()
    k = torch.cat([prefix_k[group, :p_max], suffix_k[:, :s_max]], dim=1)  # [B, L, Hkv, D]
    v = torch.cat([prefix_v[group, :p_max], suffix_v[:, :s_max]], dim=1)  # [B, L, Hkv, D]
    return k.transpose(1, 2).contiguous(), v.transpose(1, 2).contiguous(), p_max


def pad_attention_padded(
    q: torch.Tensor,  # [B, T, Hq, D]
    k: torch.Tensor,  # [B, Hkv, L, D]
    v: torch.Tensor,  # [B, Hkv, L, D]
    p_max: int,
    prefix_len_b: torch.Tensor,  # [B] prefix length of each sequence's group
    kv_len: torch.Tensor,  # [B]
    q_len: torch.Tensor,  # [B]
    scale: float,
    window: int = 0,
) -> torch.Tensor:  # [B, T, Hq, D]
    """QKᵀ GEMM, masked softmax in fp32, PV GEMM; GEMMs run in the input dtype as in the paper."""
    B, T, Hq, D = q.shape
    Hkv, L = k.shape[1], k.shape[2]
    rep = Hq // Hkv
    plen, kvl, ql = prefix_len_b.long(), kv_len.long(), q_len.long()
    qg = q.view(B, T, Hkv, rep, D).permute(0, 2, 3, 1, 4).reshape(B, Hkv, rep * T, D)  # [B, Hkv, REP*T, D]
    scores = torch.matmul(qg, k.transpose(-1, -2)).float() * scale  # [B, Hkv, REP*T, L]

    c = torch.arange(L, device=q.device)
    in_prefix = c < p_max
    key_pos = torch.where(in_prefix, c, plen[:, None] + c - p_max)  # [B, L]
    key_ok = torch.where(in_prefix, c < plen[:, None], (c - p_max) < kvl[:, None])  # [B, L]
    t = torch.arange(T, device=q.device)
    q_pos = plen[:, None] + kvl[:, None] - ql[:, None] + t  # [B, T]
    allowed = key_ok[:, None, :] & (key_pos[:, None, :] <= q_pos[:, :, None])  # [B, T, L]
    if window > 0:
        allowed &= key_pos[:, None, :] > q_pos[:, :, None] - window
    scores = scores.view(B, Hkv, rep, T, L).masked_fill(~allowed[:, None, None], float("-inf"))
    probs = torch.softmax(scores, dim=-1).nan_to_num(0.0).to(v.dtype)  # rows with no key -> 0
    out = torch.matmul(probs.view(B, Hkv, rep * T, L), v)  # [B, Hkv, REP*T, D]
    out = out.view(B, Hkv, rep, T, D).permute(0, 3, 1, 2, 4).reshape(B, T, Hq, D)
    q_ok = (t[None, :] < ql[:, None])[:, :, None, None]  # [B, T, 1, 1]
    return torch.where(q_ok, out, torch.zeros((), dtype=out.dtype, device=q.device))


def pad_attention(
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
    """BASS-PAD on the engine's layout: pad the K/V (a copy), then `pad_attention_padded`."""
    check_ragged_inputs(q, prefix_k, prefix_v, prefix_len, seq_group, suffix_k, suffix_v, kv_len, q_len)
    k, v, p_max = pad_kv(prefix_k, prefix_v, prefix_len, seq_group, suffix_k, suffix_v, kv_len)
    return pad_attention_padded(q, k, v, p_max, prefix_len[seq_group.long()], kv_len, q_len, scale, window)
