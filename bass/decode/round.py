"""One BASS round, as docs/design.md §2 states it, for the B rows of a batch (any number of requests).

  1. plan     each row b gets a draft length l_b (the policy's choice, cut to what its token limit leaves:
              a round emits at most l_b + 1 tokens); L = max_b l_b; l_b = 0 is a plain decoding step;
  2. propose  the drafter proposes up to l_b tokens per row, one batched draft forward per draft step;
  3. verify   one batched target forward scores [last emitted token, d_1 .. d_l] of every row
              (q_len = l_b + 1) and the verify rule decides, per row, in the same graph:
                  accept d_i with probability min(1, p_i(d_i) / q_i(d_i)) (greedy: while argmax p_i = d_i),
                  at the first rejection emit a token from norm(max(0, p_i − q_i)), else a bonus from p_{l+1};
  4. accept   row b keeps its own a_b ∈ [0, l_b] drafts and emits a_b + 1 tokens (the batch is ragged);
  5. roll back  the target cache drops the rejected l_b − a_b rows of each sequence;
  6. emit     the host reads all of it in one copy (`HostRow`) and hands each row's tokens to its request's
              stop rule (EOS, stop strings, token limit).

`launch` queues 2-5 on the device without a host synchronisation; `emit` is step 6, once the host has read the
round (`HostRead`). Everything that makes rounds overlap (look-ahead, redo, riders, requests joining) lives in
`bass.decode.pipeline`.

Random numbers. Row b draws 2 l_b + 1 uniforms from its own stream (`bass.decode.streams`): l_b to draft, l_b to
accept, one to resample, placed at columns [0, l_b), [L, L + l_b) and 2L of the round's [B, 2L + 1]
block. So a sequence's draws depend on its own draft lengths only, never on the batch's width L or on
which other requests share the round: under the same draft lengths a seeded request samples the same text
alone or batched. The whole block is drawn in one set of kernels (`bass.decode.streams.draw`), wherever each
row stands in its stream.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from bass.config import SamplingParams
from bass.decode.rules import VerifyRule, run_then
from bass.decode.sequences import Sequence, StopRule
from bass.decode.streams import RowDraws
from bass.drafters.base import Drafter, Proposal
from bass.events import SequenceUpdate
from bass.runtime.cache import KVCache
from bass.runtime.transfer import HostRead, ints_to_device


@dataclass(frozen=True)
class RoundModels:
    """What every round of a batch runs: the target's forward, its attention, the verify rule of the batch's
    sampling processing, the drafter, and that processing itself."""

    target: object  # a callable forward: the model, or its `GraphedModel`
    attn: object  # an attention backend (`bass.runtime.attention`)
    rule: VerifyRule
    drafter: Drafter
    params: SamplingParams


class VerifyOutput(NamedTuple):
    """The verify rule's outputs (`bass.decode.rules.VerifyRule`), on the device."""

    accepted: torch.Tensor  # [B] a_b
    next_token: torch.Tensor  # [B] the token emitted after the accepted drafts
    decided: torch.Tensor  # [B] False where top-p's candidates did not decide the row (`Pipeline` redoes it)
    logits: torch.Tensor  # [B, T, V]
    packed: torch.Tensor  # [B, 4 + T - 1] what the host reads: `HostRow`
    emitted: torch.Tensor  # [B, T] d_1 .. d_a, then next_token at column a
    rejected: torch.Tensor  # [B] l_b - a_b, the rows the target cache rolls back


class HostRow(NamedTuple):
    """One row of a round as the host reads it (`VerifyOutput.packed`)."""

    accepted: int
    next_token: int
    proposed: int
    decided: bool
    drafts: list[int]  # the accepted drafts d_1 .. d_a

    @classmethod
    def parse(cls, row: list[int]) -> HostRow:
        return cls(row[0], row[1], row[2], bool(row[3]), row[4:4 + row[0]])

    @property
    def tokens(self) -> list[int]:
        """What the row emits: its accepted drafts, then the next token."""
        return self.drafts + [self.next_token]


@dataclass
class Round:
    """A round whose verify is queued on the device; the host reads it later (`HostRead`)."""

    index: int  # the batch's round counter
    started_at: float  # perf_counter() when it was planned
    live: list[Sequence]  # the batch it covers, in cache row order (a row may finish before it is read)
    lengths: list[int]  # l_b asked of the drafter
    u: torch.Tensor  # [B, 2L+1] uniforms: L to draft, L to accept, 1 to resample (module docstring)
    slot: int = 0  # the target's graph slot
    alive: torch.Tensor | None = None  # [B] int32, 0 for finished rows riding along; None: every row live
    proposal: Proposal | None = None  # tokens [B, Lp], lengths [B]
    out: VerifyOutput | None = None  # widths a graph's bucket
    start: torch.Tensor | None = None  # [B] the target cache's suffix lengths before the verify
    last_in: torch.Tensor | None = None  # [B, 1] the token the verify started from
    host: HostRead | None = None  # out.packed, copied to the host as it finishes
    # for a drafter that reads them (`Drafter.reads_verify`): views of out, valid until the slot's next replay
    emitted: torch.Tensor | None = None  # [B, Lp+1]
    accepted: torch.Tensor | None = None  # [B]

    @property
    def draft_length(self) -> int:
        """L = max_b l_b: the batch's draft width this round."""
        return max(self.lengths, default=0)

    def verify_args(self) -> tuple:
        """(drafts [B, Lp], draft_len [B], u_accept [B, Lp], u_sample [B], draft_probs, draft_ids) of the rule."""
        p, L = self.proposal, self.draft_length
        Lp = p.tokens.shape[1]  # a drafter may propose fewer than L tokens (n-gram lookup): width Lp <= L
        return p.tokens, p.lengths, self.u[:, L:L + Lp], self.u[:, 2 * L], p.probs, p.prob_ids


# ---- 1. plan --------------------------------------------------------------------------------------------
def room(seq: Sequence, extra: int = 0) -> int:
    """The longest draft `seq` may get: a round emits up to l + 1 tokens, and `extra` more may be emitted by a
    round not read yet (look-ahead) or asked by its last round and not accepted (`Sequence.rejected`)."""
    return seq.ctx.params.max_new_tokens - seq.num_generated - 1 - extra


def draw_uniforms(live: list[Sequence], lengths: list[int], draws: RowDraws, device: torch.device) -> torch.Tensor:
    """[B, 2L+1] uniforms of a round: row b's 2 l_b + 1 next draws of its own stream at columns [0, l_b),
    [L, L + l_b) and 2L (module docstring, random numbers); unused columns hold 0.5. `draws`: the batch's
    blocks of draws. Advances each row's count of draws."""
    L = max(lengths, default=0)
    d = draws.take(live, 2 * L + 1, device)  # [B, 2L+1]: each row's next draws
    for s, n in zip(live, lengths, strict=True):
        s.drawn += 2 * n + 1
    if min((n for s, n in zip(live, lengths, strict=True) if not s.finished), default=L) == L:
        return d  # every running row at the batch's width: its draws in order (a finished one's are never read)
    c = torch.arange(2 * L + 1, device=device)  # [2L+1] a column
    n = ints_to_device(lengths, device)[:, None]  # [B, 1] l_b
    accept = (c >= L) & (c < L + n)  # [B, 2L+1]: the columns of the accept draws
    index = torch.where(c < n, c, torch.where(accept, c - L + n, 2 * n))  # which of the row's draws goes there
    used = (c < n) | accept | (c == 2 * L)
    return torch.where(used, d.gather(1, index), 0.5)


# ---- 2.-5. propose, verify, accept, roll back -------------------------------------------------------------
def launch(models: RoundModels, rnd: Round, cache: KVCache, last: torch.Tensor,
           histories: list[list[int]] | None) -> torch.Tensor:
    """Queue steps 2-5 of `rnd`: its proposal if it drafts (histories None: from what is on the device, by a
    drafter that `follows`), then `verify`, which the drafter is told of. Returns the next last token [B, 1]."""
    L, drafter = rnd.draft_length, models.drafter
    rnd.proposal = drafter.propose(histories, rnd.lengths, models.params, rnd.u[:, :L], cache) if L else \
        Proposal.empty(len(rnd.lengths), rnd.u.device)
    last = verify(models, rnd, cache, last)
    if drafter.reads_verify:  # the graph's buffers: read by the next proposal, before this slot's next replay
        rnd.accepted, rnd.emitted = rnd.out.accepted, rnd.out.emitted[:, :rnd.proposal.tokens.shape[1] + 1]
    drafter.verified(rnd.emitted, rnd.accepted)
    return last


def verify(models: RoundModels, rnd: Round, cache: KVCache, last: torch.Tensor) -> torch.Tensor:
    """Queue steps 3-5: the target's forward and the verify rule (one graph), the rollback of rejected rows,
    and the copy of the results to the host. Returns the next last token [B, 1] (a copy: a graph's outputs
    live only until its slot's next replay); makes no host synchronisation."""
    rnd.start, rnd.last_in = cache.suffix_len.clone(), last
    rnd.out = forward(models, rnd, cache)
    if rnd.proposal.tokens.shape[1]:  # 5. the cache holds every token but the last emitted one
        cache.suffix_len.sub_(rnd.out.rejected)
    rnd.host = HostRead(rnd.out.packed)  # into pinned memory, without waiting for it
    return rnd.out.next_token[:, None].clone()


def forward(models: RoundModels, rnd: Round, cache: KVCache) -> VerifyOutput:
    """The target's forward over [last emitted token, drafts] of `rnd` and its verify rule, in one graph."""
    args = rnd.verify_args()
    slot = {"slot": rnd.slot} if getattr(models.target, "slots", 1) > 1 else {}
    q_len = (args[1] + 1).to(torch.int32)  # [B] l_b + 1
    if rnd.alive is not None:  # finished rows riding along: width 0, their cache untouched
        q_len = q_len * rnd.alive
    out = run_then(models.target, models.rule, args, torch.cat([rnd.last_in, args[0]], 1), cache, q_len,
                   models.attn, **slot)
    return VerifyOutput(*out)


# ---- 6. emit ------------------------------------------------------------------------------------------------
def emit(seqs: list[Sequence], rows: list[HostRow], asked: list[int], now: float) -> list[SequenceUpdate]:
    """Hand each row's tokens to its request's stop rule (`StopRule.extend_rows`: one detokenization for all of
    them) and count the round (`asked`: the l_b each was given)."""
    befores = [len(s.history) for s in seqs]
    texts = StopRule.extend_rows(seqs, [row.tokens for row in rows])
    updates = []
    for seq, row, n, before, new_text in zip(seqs, rows, asked, befores, texts, strict=True):
        seq.rounds, seq.proposed, seq.accepted = seq.rounds + 1, seq.proposed + row.proposed, \
            seq.accepted + row.accepted
        seq.rejected = n - row.accepted
        if seq.finished:
            seq.finish_time_s = now - seq.ctx.t0
        updates.append(SequenceUpdate(seq.seq, tuple(seq.history[before:]), new_text, row.proposed, row.accepted,
                                      seq.finished, seq.finish_reason))
    return updates
