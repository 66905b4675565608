"""What a drafter hands the round loop, and how a draft model makes it: the `Drafter` interface, its `Proposal`,
`NoDrafter`, and the proposal mechanics the model drafter and the feature drafter share (`draft_chain`, one step
after another on the device; `chained_proposal`, the same as one CUDA graph). The drafters themselves are in
`bass.drafters` and `bass.feature_drafter`.

Cache bookkeeping for model drafts: after a round the draft cache holds the accepted tokens but never
the last emitted one (correction or bonus), and when all L drafts were accepted it also lacks d_L. The
next round therefore starts by feeding the 1 or 2 pending tokens of each sequence (a ragged step).

A drafter that `follows()` can make its next proposal from what is on the device alone (the verify's
emitted tokens and accepted counts, handed over by `verified`), so the round loop may launch a drafting
round before it reads the round before (`bass.pipeline`, look-ahead): the feature draft, once its
first round is committed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import torch

from bass.cache import KVCache
from bass.config import SamplingParams
from bass.graphs import WIDTH_BUCKETS, bucket
from bass.transfer import ints_to_device


@dataclass
class Proposal:
    tokens: torch.Tensor  # [B, L] long; entries past lengths[b] are padding
    lengths: torch.Tensor  # [B] long, 0 .. L
    probs: torch.Tensor | None  # [B, L, V] processed draft distributions; None = one-hot (deterministic)
    prob_ids: torch.Tensor | None = None  # [B, L, K]: probs is [B, L, K], q's masses at these ids (a sparse q)

    @classmethod
    def empty(cls, batch: int, device: torch.device | str) -> Proposal:
        return cls(torch.zeros(batch, 0, dtype=torch.long, device=device),
                   torch.zeros(batch, dtype=torch.long, device=device), None)


class Drafter:
    """Interface. `histories[b]` is prompt + generated tokens of live sequence b, the last one emitted
    but not yet in the target cache."""

    name = "base"
    proposes = True
    reads_verify = False  # `verified` needs the verify's emitted tokens and accepted counts on the device
    temperature_scale = 1.0  # a sampling drafter draws at this multiple of the request's temperature

    def proposal_params(self, params: SamplingParams) -> SamplingParams:
        """The processing a drafter that samples draws its proposals under: the request's, at
        `temperature_scale` times its temperature. Speculative sampling is exact for any draft distribution
        q as long as the verify uses the q each token was drawn from (`bass.sampling.draft_proposal`), so the
        scale changes acceptance only: a draft trained with forward KL is flatter than its target where it
        agrees with it, and a scale below 1 moves q's mass to where the target's is."""
        if self.temperature_scale == 1.0 or params.greedy:
            return params
        return replace(params, temperature=params.temperature * self.temperature_scale)

    def prefill(self, prompts: Sequence[Sequence[int]], samples: int, capacity: int,
                features: torch.Tensor | None = None) -> None:
        """Start a request of len(prompts) prompts x `samples` sequences (after the target's prefill, whose
        final normed hidden states of the prompts are `features` [G, T, H])."""

    def admit(self, prompts: Sequence[Sequence[int]], samples: int, capacity: int, features: torch.Tensor | None,
              slots: list[int], histories: Sequence[Sequence[int]]) -> None:
        """Like `prefill`, for a request joining the running batch between rounds, with nothing in flight: its
        len(prompts) x `samples` rows come after the running ones, its prompts at prefix slots `slots` (those
        of the target cache); `histories` are the new rows' (prompt + first token)."""
        self.prefill(prompts, samples, capacity, features)

    def propose(self, histories: Sequence[Sequence[int]] | None, lengths: Sequence[int], params: SamplingParams,
                u: torch.Tensor, target_cache: KVCache) -> Proposal:
        """Up to lengths[b] draft tokens per sequence. u [B, max(lengths)] uniforms for sampling.
        histories is None when the round before is not read yet (only asked of a drafter that `follows`)."""
        raise NotImplementedError

    def follows(self) -> bool:
        """Whether the next proposal can be made before the verify launched last is read (histories=None)."""
        return False

    def verified(self, emitted: torch.Tensor | None, accepted: torch.Tensor | None) -> None:
        """A verify pass was just launched (its results are not read yet): sequence b emits
        emitted[b, :accepted[b] + 1] ([B, Lp + 1] and [B], device; None unless `reads_verify`). They are
        views of the verify graph's buffers, valid until that graph slot's next replay: the next proposal
        must read them before the verify after it. The loop commits rounds in the order it launches them,
        and may launch the next one before it commits this one."""

    def withdraw(self) -> None:
        """The verify launched last is withdrawn (a redo launches it again, with `verified` again)."""

    def commit(self, histories: Sequence[Sequence[int]]) -> None:
        """The oldest uncommitted verify pass is read; histories[b] is sequence b's prompt + generated
        tokens now."""

    def select(self, rows: Sequence[int]) -> None:
        """Only the sequences at `rows` stay in the batch (in that order)."""


class NoDrafter(Drafter):
    name = "none"
    proposes = False
    has_probabilities = False

    def propose(self, histories, lengths, params, u, target_cache):
        return Proposal.empty(len(histories), target_cache.suffix_len.device)


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
    from its last column by a `bass.rules.DraftRule`: (d_i [B],) greedy, else (d_i, q_i [B, V]), or under
    top-p (d_i, q_i [B, K], ids_i [B, K]), a sparse q_i. Sequences whose draft is complete get q_len 0 in
    later steps. The proposal carries each q_i for the verify. `out` is where step i's outputs go, column i
    of the proposal's buffers (None for the first step, whose outputs size them): a step may write there
    (the rule's kernels do, inside a chained proposal's graph), and any output it returns that is not its
    `out` tensor is copied, as a graph's buffers, which the next step overwrites, must be (a launch per
    copy: three a step under top-p). It reads nothing from the host and makes no host synchronisation, so
    one CUDA graph can capture the whole of it (`bass.graphs.GraphedModel.chain`).
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
