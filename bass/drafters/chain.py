"""A proposal as a chain of draft steps: the pending tokens fed, then L tokens sampled one step at a time, with
nothing read by the host, so that one CUDA graph can replay the whole of it (`chained_proposal`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from bass.drafters.base import Proposal
from bass.runtime.cache import KVCache
from bass.runtime.graphs import WIDTH_BUCKETS, bucket
from bass.runtime.transfer import ints_to_device


def draft_autoregressively(step: Callable[..., tuple[torch.Tensor, ...]], pending: tuple[torch.Tensor, torch.Tensor],
                           lengths: Sequence[int], u: torch.Tensor) -> Proposal:
    """Feed each sequence's pending tokens (tokens [B, T], counts [B], device), then sample up to lengths[b]
    tokens one step at a time (`draft_chain`, with the lengths moved to the device). u [B, max(lengths)]."""
    first, counts = pending
    return draft_chain(step, first, counts, ints_to_device(lengths, first.device), u)


def draft_chain(step: Callable[..., tuple[torch.Tensor, ...]], first: torch.Tensor, counts: torch.Tensor,
                lens: torch.Tensor, u: torch.Tensor) -> Proposal:
    """Feed each sequence's pending tokens (first [B, T], counts [B]), then sample up to lens[b] ([B], device)
    tokens one step at a time, L = u.shape[1] steps in all.

    `step(tokens [B, T], q_len [B], last_only, u_i [B], out)` runs the draft model on its cache and samples
    from its last column by a `bass.decode.rules.DraftRule`: (d_i [B],) greedy, else (d_i, q_i [B, V]), or under
    top-p (d_i, q_i [B, K], ids_i [B, K]), a sparse q_i. Sequences whose draft is complete get q_len 0 in
    later steps. The proposal carries each q_i for the verify. `out` is where step i's outputs go, column i
    of the proposal's buffers (None for the first step, whose outputs size them): a step may write there
    (the rule's kernels do, inside a chained proposal's graph), and any output it returns that is not its
    `out` tensor is copied, as a graph's buffers, which the next step overwrites, must be (a launch per
    copy: three a step under top-p). It reads nothing from the host and makes no host synchronisation, so
    one CUDA graph can capture the whole of it (`bass.runtime.graphs.GraphedModel.chain`).
    """
    (B, _), L, device = first.shape, u.shape[1], first.device
    tokens = torch.empty(B, L, dtype=torch.long, device=device)
    # step i + 1's q_len for every i at once (one launch per proposal, not two per step): 1 while b drafts on.
    # Row i is step i + 1's [B], contiguous: the kernels read q_len with unit stride
    active = (torch.arange(1, max(L, 1), device=device)[:, None] < lens).to(torch.int32)  # [L - 1, B]
    q = None  # [probs [B, L, V or K], ids [B, L, K] of a sparse q]
    u0 = u[:, 0] if L else torch.zeros(B, device=device)  # L = 0: the pending tokens are fed all the same
    dest = None  # step i's places in the proposal: (tokens[:, i], *(buffer[:, i] for buffer in q))
    out = step(first, counts, True, u0, dest)
    for i in range(L):
        if q is None and len(out) > 1:
            q = [o.new_empty(B, L, o.shape[-1]) for o in out[1:]]
        for place, o in zip(dest or _column(tokens, q, i), out, strict=True):
            if o is not place:
                place.copy_(o)
        if i + 1 < L:
            dest = _column(tokens, q, i + 1)
            out = step(tokens[:, i:i + 1], active[i], False, u[:, i + 1], dest)
    return Proposal(tokens, lens, *(q or [None]))


def _column(tokens: torch.Tensor, q: list[torch.Tensor] | None, i: int) -> tuple[torch.Tensor, ...]:
    """Step i's places in a proposal's buffers: tokens[:, i] [B] and each q buffer's [:, i] [B, K or V]."""
    return (tokens[:, i], *(buffer[:, i] for buffer in q or ()))


# the wider of a proposal's two first-step widths is at least this wide (`chain_widths`)
CHAIN_MIN_WIDTH = 10


def chain_widths(T: int, L: int) -> tuple[int | None, int | None]:
    """(the width bucket of a chained proposal's first step, which feeds T pending tokens and then drafts L;
    the other of L's two widths, or None): the first is None past the widest bucket.

    The pending tokens are the last verify's emitted ones, T <= L' + 1 after a round of L'. Keyed by its own
    width a chain of length L would need a graph for every L' before it, and a policy that changes L (the heuristic)
    meets such pairs no request has warmed, running their proposals step by step. So each L has two widths: L + 1,
    what every round after one of L' <= L feeds (a fixed L's every round), and at least CHAIN_MIN_WIDTH, what
    a round after a longer one of L' <= 9 feeds (columns past each row's count are ignored, as a bucket's
    padding is). Padding every first step to 10 instead would make fixed L = 3's first step 10 columns wide
    instead of 4, a few percent slower on an H200 (docs/engine.md); with two widths only rounds that shorten L pay
    it. The second width is queued beside the first (`chained_proposal`), so a warm-up of each fixed length builds
    both."""
    steady, wide = bucket(L + 1, WIDTH_BUCKETS), bucket(max(T, CHAIN_MIN_WIDTH), WIDTH_BUCKETS)
    if T <= L + 1:
        return steady, wide if L + 1 < CHAIN_MIN_WIDTH else None
    return wide, steady


def chained_proposal(forward: Callable, run: Callable[..., Proposal],
                     keyed: Callable[[int], tuple[tuple, tuple[tuple[int, ...], ...]]], cache: KVCache,
                     inputs: tuple[torch.Tensor, ...], pool: object) -> Proposal | None:
    """`run(cache, *inputs)`, a whole proposal, as one CUDA graph of the draft's `forward`
    (`GraphedModel.chain`: its own, or a wider batch's), or None where neither exists for this shape yet: the
    caller drafts step by step, and the chain is captured after the request.

    Step by step, each of the L steps is a graph replay plus a handful of small copies around it (the step's
    inputs into the graph's buffers, its token and q into the proposal's): host work and launches that a
    round pays L times. inputs[0] are the first step's tokens [B, T] and inputs[-1] the uniforms [B, L];
    `keyed(Tb)` is (the chain's name besides the batch: the rule, the attention, Tb, L; its static inputs'
    shapes past the batch) for a first step Tb wide (`chain_widths`: the one it runs, and the other width
    of L, queued with it for between requests). `pool` names the memory its outputs live in, static buffers valid
    until the next replay of a chain of the same pool."""
    chain = getattr(forward, "chain", None)
    Tb, other = chain_widths(inputs[0].shape[1], inputs[-1].shape[1])
    if chain is None or Tb is None:
        return None
    name, shapes = keyed(Tb)
    out = chain(run, name, cache, inputs, shapes, pool=("proposal", pool), also=None if other is None else keyed(other))
    if out is None:
        return None
    B = inputs[0].shape[0]
    return Proposal(*(None if t is None else t[:B] for t in (out.tokens, out.lengths, out.probs, out.prob_ids)))
