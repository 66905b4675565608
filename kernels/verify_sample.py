"""A verify's accept / resample rule over each position's sorted top-p candidates, in one program per sequence.

Speculative sampling (`bass.decode.sampling`) accepts draft x_i with probability min(1, p_i(x_i) / q_i(x_i)) until
the first rejection a, then draws the next token from max(0, p_a − q_a) (or from p_a when all L were
accepted). Under top-p, p_t is zero outside the kept candidates of position t, so with v_j the candidate
probabilities in the stable order (descending, then id ascending; `kernels.top_p`) and ids_j their tokens:

    c_j = v_1 + … + v_j,    w_j = v_j if c_j − v_j < top_p else 0,    p_t(ids_j) = w_j / Z,  Z = w_1 + … + w_K
    covered_t = any_j (c_j >= top_p + margin)          (the K candidates decided the top-p set)

    accept test at t < L:   u_t · q_t(x_t) < p_t(x_t)   and t < l      (q = 1 for a one-hot draft)
    a = the leading run of passed tests;   r = max(0, p_a − q_a) on the candidates, or p_a if a = l (or r = 0)
    next token = ids_j*,    j* = min(#{j : R_j <= u R_K}, #{j : R_j < R_K})     (R the prefix sums of r)

and the row is decided when covered_t holds at every position t <= a (the positions the verdict read).
A model draft's q comes sparse, as KQ (mass, id) pairs per position (`kernels.draft_sample`), so

    q_t(x) = Σ_k m_k [qid_k = x]    (one [KQ] comparison per position)

and the residual subtracts each nonzero pair from the candidate holding its id: a loop over the pairs up
to the last nonzero one (the draft's kept set: a few tokens), each a [K] comparison.
`bass.decode.rules.VerifyRule` redoes the others by a full sort. That is `bass.decode.verify.verify_top_p` (its torch
twin, the reference the tests hold this to) plus the round's glue of `VerifyRule`: the packed row the host
reads, the emitted tokens the feature draft feeds next, and the rejected counts the cache rolls back.

In torch those are about twenty launches on [B, T, K] values: prefix sums, gathers, the accept run, the
draw, the concatenations. Here one program per sequence walks its positions with the K candidates of one
position in registers at a time. No host synchronisation (CUDA-graph safe); compiled without FMA
contraction, as the candidates' kernels are.

Measured on the H100 (`python -m bench.profile steps`, its rule view):
the whole rule at batch 8 with a model draft's q, in a CUDA graph, from `kernels.top_p`'s candidates, the
rest by torch's ops or by this kernel: 111 → 32 µs at width 1 (a plain step), 178 → 42 at width 2, 190 →
51 at width 3. Launching these kernels and the candidates' with PDL (`kernels.pdl`) made the rule slower,
not faster (51, 61 and 70 µs), so none of them use it.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

_empty = torch.empty  # tests swap in a NaN-filled allocator to catch unwritten outputs


@triton.jit
def _position(VALS, IDS, off, j, top_p, covered_at):
    """(p [K], ids [K], covered) of one position's sorted candidates at VALS + off (module docstring)."""
    v = tl.load(VALS + off + j)
    ids = tl.load(IDS + off + j)
    c = tl.cumsum(v, axis=0)
    w = tl.where((c - v < top_p) & (v > 0), v, 0.0)
    Z = tl.max(tl.cumsum(w, axis=0), axis=0)  # the last prefix sum: prefix sums of w >= 0 never decrease
    covered = tl.max(((c >= covered_at) & (v > 0)).to(tl.int32), axis=0)
    return w / Z, ids, covered


@triton.jit
def _verify_row(VALS, IDS, DRAFTS, DLEN, UA, US, Q, QIDS, ACC, NEXT, DECIDED, PACKED, EMITTED, REJECTED,
                L, KQ, s_db, s_ub, s_ut, s_us, s_qb, s_qt, s_ib, s_it, top_p, covered_at,
                K: tl.constexpr, KQ_BLOCK: tl.constexpr, L_BLOCK: tl.constexpr, DRAFTING: tl.constexpr,
                HAS_Q: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    j = tl.arange(0, K)
    k = tl.arange(0, KQ_BLOCK)
    T = L + 1
    n = tl.load(DLEN + b).to(tl.int32)  # l: this row's draft length
    a = n * 0  # accepted so far
    alive = a + 1  # every test so far passed: position t <= a
    decided = a + 1
    for t in range(0, L):
        p, ids, covered = _position(VALS, IDS, (b * T + t) * K, j, top_p, covered_at)
        x = tl.load(DRAFTS + b * s_db + t)
        p_x = tl.sum(tl.where(ids == x, p, 0.0), axis=0)
        q_x = 1.0
        if HAS_Q:
            q_ids = tl.load(QIDS + b * s_ib + t * s_it + k, mask=k < KQ, other=0)
            q_m = tl.load(Q + b * s_qb + t * s_qt + k, mask=k < KQ, other=0.0)
            q_x = tl.sum(tl.where(q_ids == x, q_m, 0.0), axis=0)
        ok = (tl.load(UA + b * s_ub + t * s_ut) * q_x < p_x) & (t < n)
        decided = decided & (covered | (1 - alive))
        alive = alive & ok.to(tl.int32)
        a += alive
    p, ids, covered = _position(VALS, IDS, (b * T + a) * K, j, top_p, covered_at)
    decided = decided & covered
    w = p
    if DRAFTING:  # the residual where the row rejected a draft
        at = tl.minimum(a, L - 1)
        if HAS_Q:
            q_row, id_row = Q + b * s_qb + at * s_qt, QIDS + b * s_ib + at * s_it
            m = tl.load(q_row + k, mask=k < KQ, other=0.0)
            n_q = tl.max(tl.where(m > 0, k + 1, 0), axis=0)  # the pairs through the last nonzero mass
            q = tl.zeros([K], dtype=tl.float32)
            for i in range(0, n_q):
                q += tl.where(ids == tl.load(id_row + i), tl.load(q_row + i), 0.0)
        else:
            q = (ids == tl.load(DRAFTS + b * s_db + at)).to(tl.float32)
        r = tl.maximum(p - q, 0.0)
        r = tl.where(tl.max(r, axis=0) > 0, r, p)  # p == q up to rounding: no residual mass, fall back to p
        w = tl.where(a < n, r, p)
    R = tl.cumsum(w, axis=0)
    total = tl.max(R, axis=0)
    drawn = tl.sum((tl.load(US + b * s_us) * total >= R).to(tl.int32), axis=0)  # #{j : R_j <= u R_K}
    last = tl.sum((total > R).to(tl.int32), axis=0)  # the last w > 0: u -> 1 never lands past it
    pick = tl.minimum(drawn, last)
    token = tl.sum(tl.where(j == pick, ids, 0), axis=0)
    tl.store(ACC + b, a.to(tl.int64))
    tl.store(NEXT + b, token)
    tl.store(DECIDED + b, decided != 0)
    tl.store(REJECTED + b, n - a)
    # the host's row: [a, token, l, decided, x_1 .. x_L]; the emitted tokens: x_1 .. x_a, token, ...
    i = tl.arange(0, L_BLOCK)
    x = tl.load(DRAFTS + b * s_db + i, mask=i < L, other=0).to(tl.int64)
    head = tl.where(i == 0, a.to(tl.int64), tl.where(i == 1, token, tl.where(i == 2, n.to(tl.int64),
                                                                            decided.to(tl.int64))))
    tl.store(PACKED + b * (T + 3) + i, head, mask=i < 4)
    tl.store(PACKED + b * (T + 3) + 4 + i, x, mask=i < L)
    tl.store(EMITTED + b * T + i, tl.where((i == a) | (i == L), token, x), mask=i < T)


def verify_candidates(vals: torch.Tensor, ids: torch.Tensor, top_p: float, margin: float, drafts: torch.Tensor,
                      draft_len: torch.Tensor, u_accept: torch.Tensor, u_sample: torch.Tensor,
                      draft_probs: torch.Tensor | None = None, draft_ids: torch.Tensor | None = None
                      ) -> tuple[torch.Tensor, ...]:
    """The rule (module docstring) on each position's sorted candidates vals, ids [B, L+1, K] (probabilities
    descending, 0 padding, from `kernels.top_p.top_p_candidates_fused`), drafts [B, L], draft_len [B],
    u_accept [B, L], u_sample [B] and a sparse q: masses draft_probs [B, L, KQ] at draft_ids [B, L, KQ]
    (None: one-hot drafts; ids may repeat where the mass is 0) ->
    (accepted [B] int64, next_token [B] int64, decided [B] bool, packed [B, L+4] int64 =
    [accepted, next_token, draft_len, decided, drafts...], emitted [B, L+1] int64, rejected [B] int32)."""
    B, T, K = vals.shape
    L = T - 1
    dev = vals.device
    acc, token = _empty((B,), dtype=torch.int64, device=dev), _empty((B,), dtype=torch.int64, device=dev)
    decided = _empty((B,), dtype=torch.bool, device=dev)
    packed = _empty((B, T + 3), dtype=torch.int64, device=dev)
    emitted = _empty((B, T), dtype=torch.int64, device=dev)
    rejected = _empty((B,), dtype=torch.int32, device=dev)
    if B:
        u_accept = u_accept.to(torch.float32)
        u_sample = u_sample.to(torch.float32)
        draft_len = draft_len.contiguous()
        q, q_ids = vals, ids  # unread without a q: any live pointers will do
        if draft_probs is not None:
            if draft_ids is None or draft_ids.shape != draft_probs.shape:
                raise ValueError("the kernel reads a sparse q: draft_probs [B, L, KQ] with draft_ids of that shape")
            q, q_ids = (t if t.stride(-1) == 1 else t.contiguous() for t in (draft_probs, draft_ids))
        if drafts.stride(-1) != 1:
            drafts = drafts.contiguous()
        d = drafts if L else draft_len  # an empty tensor's pointer is never read: any live one will do
        _verify_row[(B,)](vals.contiguous(), ids.contiguous(), d, draft_len, u_accept if L else u_sample,
                          u_sample, q, q_ids, acc, token, decided, packed, emitted, rejected,
                          L, q.shape[-1], d.stride(0), u_accept.stride(0), u_accept.stride(-1), u_sample.stride(0),
                          q.stride(0), q.stride(1), q_ids.stride(0), q_ids.stride(1), float(top_p),
                          float(top_p + margin), K=K,
                          KQ_BLOCK=1 if draft_probs is None else triton.next_power_of_2(q.shape[-1]),
                          L_BLOCK=max(4, triton.next_power_of_2(T)), DRAFTING=L > 0,
                          HAS_Q=draft_probs is not None, num_warps=4, enable_fp_fusion=False)
    return acc, token, decided, packed, emitted, rejected


__all__ = ["verify_candidates"]
