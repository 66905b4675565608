"""The round loop: `bass.decode.round` run back to back, with what makes rounds fast but is not the algorithm.

Look-ahead (on CUDA). A round that needs nothing from the host can be launched before the round before it
is read, so that the host's bookkeeping of round r (the copy, stop strings, events, the policy) overlaps
the device's round r + 1 instead of leaving the GPU idle:
  - a plain step (L = 0): its input is the last emitted token, already on the device, and its cache rows
    follow the rollback, which is queued on the device too;
  - a drafting round, from a drafter that `follows` (the feature draft after a round it drafted): what it
    feeds is round r's emitted tokens and the target's features, both on the device.
The price:
  - the round runs for sequences that round r finishes; their rows' results are dropped;
  - where round r's top-p needs the full-sort redo (rare), its corrected tokens were not the next round's
    input: that round is withdrawn and launched again with the same uniforms (`_redo`);
  - the two rounds use the target's two graph slots (`GraphedModel.slots`), so that one's outputs are read
    while the other runs;
  - the policy decides the next round's length before it has seen round r's acceptance, so a drafting
    round is launched ahead only under a policy whose length does not depend on it
    (`DraftLengthPolicy.decides_ahead`: a fixed length).

The token limit. A round may emit l_b + 1 tokens, so l_b never exceeds what sequence b has left but one.
A round launched ahead assumes round r emitted the most, l_r + 1; the rounds launched after a read assume
the same (l_b is cut by the drafts round r asked for and did not accept, `Sequence.rejected`), so that
look-ahead changes no draft length and no token.

Riders. Compacting the batch needs both rounds read, so it stops the look-ahead for a round. With
look-ahead a finished sequence keeps its row: its draft length is 0 and the round's `alive` mask makes its
verify width 0, so its cache neither grows nor rolls back and its results are never read. Rows are dropped
only where the live ones fit a smaller batch bucket of more than RIDE_ALONG_ROWS rows (docs/engine.md has
the measurement). Without look-ahead (the CPU, where every row costs compute) the batch is compacted as soon
as a sequence finishes.

Joins. Between rounds, with nothing in flight, the `Joiner` may add requests' rows to the batch (their
prompts prefilled, their K/V forked into the caches: `bass.engine.batch`). A waiting join stops the
look-ahead for one round, so that it never waits more than a round. Each request's time budget and cancel
are checked before every round it takes part in; a request that halts leaves, the others go on.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

import torch

from bass.config import SamplingParams
from bass.decode import round as one_round
from bass.decode.draft_length import DraftLengthPolicy
from bass.decode.round import HostRow, Round, VerifyRule, draw_uniforms, emit, room
from bass.decode.rules import emitted, verify_rule
from bass.decode.sequences import Sequence
from bass.drafters.base import Drafter
from bass.events import SequenceUpdate
from bass.runtime.cache import KVCache
from bass.runtime.graphs import BATCH_BUCKETS, bucket
from bass.runtime.transfer import ints_to_device

RIDE_ALONG_ROWS = 8  # with look-ahead, a batch of at most this many rows keeps finished ones to the end


@dataclass
class DecodeState:
    """Everything the loop mutates: the rows (in cache row order), the target cache and the device-side inputs
    of the next round."""

    live: list[Sequence]
    cache: KVCache | None
    last: torch.Tensor | None = None  # [B, 1] each row's last emitted token after the round launched last
    alive: torch.Tensor | None = None  # [B] int32 once finished rows ride along


@dataclass
class RoundReport:
    """What one round did: each row's update, for the requests' streams."""

    index: int
    ended_at: float  # perf_counter() when it was read
    draft_length: int  # the longest draft proposed this round
    rows: list[tuple[Sequence, SequenceUpdate]] = field(default_factory=list)
    started_at: float | None = None  # perf_counter() when it was planned (the budget checks read it)
    # seconds the host waited in the round's one synchronisation (0 on the CPU, whose rounds run as launched)
    wait_s: float = 0.0


class Joiner(Protocol):
    """Requests that may join the running batch between rounds (`bass.engine.batch.Batch`)."""

    def pending(self) -> bool:
        """Whether a request could join now."""

    def admit(self, state: DecodeState) -> None:
        """Add the waiting requests' rows to `state` (nothing is in flight)."""


def decode(target: Callable, attn: Callable, drafter: Drafter, policy: DraftLengthPolicy, state: DecodeState,
           params: SamplingParams, *, look_ahead: bool = False, joiner: Joiner | None = None,
           first_round: int = 0) -> Iterator[RoundReport]:
    """Run rounds until no row is live and no request joins; yield one report per round.

    `params` is the batch's sampling processing (every request in it shares temperature, top-k and top-p);
    each row's own stop rule, token limit, random stream, budget and cancel come from its `RequestContext`.
    """
    rule = verify_rule(params)
    ahead: Round | None = None  # a round launched before the round before it was read
    r = first_round
    while True:
        if ahead is not None:
            rnd, ahead = ahead, None
        else:
            if joiner is not None and joiner.pending():
                joiner.admit(state)
            halted = _halt(state, drafter)
            if halted:
                yield RoundReport(r, time.perf_counter(), 0, halted, time.perf_counter())
            if not state.live:
                if joiner is not None and joiner.pending():
                    continue
                return
            rnd = _plan(r, state, drafter, policy)
            state.last = one_round.launch(target, attn, rule, drafter, rnd, state.cache, state.last,
                                          [s.history for s in state.live], params)
            r += 1

        # launch the next round now if it needs nothing the host has not read (module docstring: look-ahead)
        if look_ahead and _may_look_ahead(state, drafter, policy, joiner):
            wanted = _wanted(policy, drafter, state.live)
            wanted = [max(0, min(w, room(s, n + 1))) for w, s, n in zip(wanted, rnd.live, rnd.lengths, strict=True)]
            u = draw_uniforms(state.live, wanted, state.cache.suffix_len.device)
            ahead = Round(r, time.perf_counter(), list(state.live), wanted, u, slot=1 - rnd.slot, alive=state.alive)
            state.last = one_round.launch(target, attn, rule, drafter, ahead, state.cache, state.last, None, params)
            r += 1

        yield _read(rnd, state, target, attn, rule, drafter, policy, ahead, params, look_ahead)


def _plan(r: int, state: DecodeState, drafter: Drafter, policy: DraftLengthPolicy) -> Round:
    """Step 1 for a round launched after the round before it was read."""
    live = state.live
    wanted = _wanted(policy, drafter, live)
    lengths = [max(0, min(n, room(s, s.rejected))) for n, s in zip(wanted, live, strict=True)]
    device = state.cache.suffix_len.device
    if state.last is None:
        state.last = ints_to_device([s.history[-1] for s in live], device)[:, None]  # (pinned: no wait)
    return Round(r, time.perf_counter(), list(live), lengths, draw_uniforms(live, lengths, device),
                 alive=state.alive)


def _read(rnd: Round, state: DecodeState, target: Callable, attn: Callable, rule: VerifyRule, drafter: Drafter,
          policy: DraftLengthPolicy, ahead: Round | None, params: SamplingParams, look_ahead: bool) -> RoundReport:
    """Step 6: the round's one host synchronisation, its rows' tokens to their stop rules, finished rows out."""
    waited = rnd.host.wait()
    packed = rnd.host.tolist()
    if not all(p[3] for s, p in zip(rnd.live, packed, strict=True) if not s.finished):
        state.last = _redo(target, attn, rule, rnd, packed, state.cache, ahead, drafter, params)  # rare
    now = time.perf_counter()
    rows, uids, accepted = [], [], []
    for s, p, n in zip(rnd.live, packed, rnd.lengths, strict=True):
        if s.finished:  # finished by an earlier round (this one was launched ahead of it, or it rides along)
            continue
        row = HostRow.parse(p)
        rows.append((s, emit(s, row, n, now)))
        uids.append(s.uid), accepted.append(row.accepted)
    drafter.commit([s.history for s in state.live])
    _leave(state, drafter, ahead is None, look_ahead, any(up.finished for _, up in rows))
    policy.update(uids, accepted)
    return RoundReport(rnd.index, now, rnd.draft_length, rows, rnd.started_at, waited)


def _leave(state: DecodeState, drafter: Drafter, idle: bool, look_ahead: bool, new_riders: bool) -> None:
    """Finished rows leave the batch (once no round launched ahead still covers them: `idle`), or ride along."""
    rows = [i for i, s in enumerate(state.live) if not s.finished]
    if not rows:
        if not idle:  # a round launched ahead still covers them: they ride along until it is read
            return
        if state.cache is not None and state.cache.batch:  # empty, so that a request joining later starts at row 0
            state.cache = state.cache.compact([])
            drafter.select([])
        state.live, state.alive, state.last = [], None, None
    elif len(rows) < len(state.live) and idle and _compacts(state.live, look_ahead):
        state.live = [state.live[i] for i in rows]
        state.cache = state.cache.compact(rows)
        drafter.select(rows)
        if state.last is not None:
            state.last = state.last[ints_to_device(rows, state.last.device)]
        state.alive = None
    elif new_riders:  # the next round's mask
        device = state.cache.suffix_len.device
        state.alive = ints_to_device([int(not s.finished) for s in state.live], device).to(torch.int32)


def _halt(state: DecodeState, drafter: Drafter) -> list[tuple[Sequence, SequenceUpdate]]:
    """End the rows of every request whose cancel is set or whose budget is spent, before the next round
    (nothing is in flight); they leave the batch at once."""
    now = time.perf_counter()
    halted = []
    reasons: dict[int, str | None] = {}
    for s in state.live:
        if s.finished:
            continue
        key = id(s.ctx)
        if key not in reasons:
            reasons[key] = s.ctx.halt(now)
        if reasons[key]:
            s.finish_reason, s.finish_time_s = reasons[key], now - s.ctx.t0
            halted.append((s, SequenceUpdate(s.seq, (), "", 0, 0, True, s.finish_reason)))
    if halted:
        _leave(state, drafter, True, False, False)
    return halted


def _wanted(policy: DraftLengthPolicy, drafter: Drafter, live: list[Sequence]) -> list[int]:
    """l_b the policy wants for each row: asked for the running sequences only, 0 for rows riding along."""
    running = [s.uid for s in live if not s.finished]
    if not drafter.proposes or not running:
        return [0] * len(live)
    wanted = dict(zip(running, policy.lengths(running), strict=True))
    return [wanted.get(s.uid, 0) for s in live]


def _may_look_ahead(state: DecodeState, drafter: Drafter, policy: DraftLengthPolicy, joiner: Joiner | None) -> bool:
    """Whether the next round may be launched before the one just launched is read: no compaction due, no
    round that ends every row at its limit, no request to halt or to join, and, for a round that drafts, a
    policy that decides without the read and a drafter that `follows` (regular decoding's plain step always can)."""
    live = state.live
    if _compacts(live, True) or all(s.finished or room(s) <= 0 for s in live):
        return False
    if joiner is not None and joiner.pending():
        return False
    now = time.perf_counter()
    if any(ctx.halt(now) for ctx in {id(s.ctx): s.ctx for s in live if not s.finished}.values()):
        return False
    if not drafter.proposes:
        return True
    return policy.decides_ahead and drafter.follows()


def _compacts(live: list[Sequence], look_ahead: bool) -> bool:
    """Whether finished rows should leave the batch now: at once without look-ahead, and with it only from a
    batch of more than RIDE_ALONG_ROWS rows whose live ones fit a smaller batch bucket (module docstring)."""
    running = sum(not s.finished for s in live)
    if running == len(live):
        return False
    if not look_ahead:
        return True
    rows = bucket(len(live), BATCH_BUCKETS) or len(live)
    return rows > RIDE_ALONG_ROWS and (bucket(running, BATCH_BUCKETS) or running) < rows


def _redo(target: Callable, attn: Callable, rule: VerifyRule, rnd: Round, packed: list[list[int]],
          cache: KVCache, ahead: Round | None, drafter: Drafter, params: SamplingParams) -> torch.Tensor:
    """Redo `rnd`'s verdict with the full-sort top-p (rows its candidates left undecided), in `packed` and in
    `rnd.accepted` / `rnd.emitted`; correct the cache's rollback, and launch the round launched ahead again
    from the corrected tokens. Returns the last token [B, 1] after the round launched last."""
    Lp = rnd.proposal.tokens.shape[1]
    verdict = rule.exact(rnd.out.logits[:, :Lp + 1], *rnd.verify_args())
    accepted = verdict.accepted.tolist()
    overwritten = ahead is not None and any(a > row[0] for a, row in zip(accepted, packed, strict=True))
    for row, a, t in zip(packed, accepted, verdict.next_token.tolist(), strict=True):
        row[:2] = a, t
    if overwritten:  # the round ahead wrote over cache rows this one accepts after all: write them again
        cache.suffix_len.copy_(rnd.start)
        one_round.forward(target, attn, rule, rnd, cache)  # the same graph and inputs, so the same logits too
    cache.suffix_len.copy_(rnd.start + verdict.accepted.to(rnd.start.dtype) + 1)  # [last, d_1 .. d_a]
    if rnd.accepted is not None:  # what the drafter was handed (`Drafter.reads_verify`)
        rnd.accepted.copy_(verdict.accepted)
        rnd.emitted.copy_(emitted(rnd.proposal.tokens, verdict.accepted, verdict.next_token))
    if ahead is None:
        return verdict.next_token[:, None]
    # the same round from the corrected tokens: its graph slot and uniforms, and, if it drafts, a proposal
    # made again from them (the drafter drops the withdrawn one's entries as it would a rejected guess)
    drafter.withdraw()
    return one_round.launch(target, attn, rule, drafter, ahead, cache, verdict.next_token[:, None], None, params)
