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
    round is launched ahead only under a policy that may decide so (`DraftLengthPolicy.decides_ahead`: a fixed
    length, or the cost table's, which reads the acceptance of the rounds read so far).

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

All of it is one object, `RoundLoop`, holding the batch's collaborators (`RoundModels`), its rows
(`DecodeState`), its draft-length policy and its joiner: each step is a method of one or two arguments.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

import torch

from bass.decode import round as one_round
from bass.decode.draft_length import DraftLengthPolicy
from bass.decode.round import HostRow, Round, RoundModels, draw_uniforms, emit, room
from bass.decode.rules import emitted
from bass.decode.sequences import Sequence
from bass.decode.streams import RowDraws
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
    draws: RowDraws = field(default_factory=RowDraws)  # the rows' next random draws


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
    batch_rows: int = 0  # rows of the batch the round ran (finished ones riding along included)


class Joiner(Protocol):
    """Requests that may join the running batch between rounds (`bass.engine.batch.Batch`)."""

    def pending(self) -> bool:
        """Whether a request could join now."""

    def admit(self, state: DecodeState) -> None:
        """Add the waiting requests' rows to `state` (nothing is in flight)."""


class RoundLoop:
    """Rounds back to back until no row is live and no request joins (module docstring); iterate for one
    `RoundReport` per round.

    `models.params` is the batch's sampling processing (every request in it shares temperature, top-k and
    top-p); each row's own stop rule, token limit, random stream, budget and cancel come from its
    `RequestContext`.
    """

    def __init__(self, models: RoundModels, policy: DraftLengthPolicy, state: DecodeState, *,
                 look_ahead: bool = False, joiner: Joiner | None = None, first_round: int = 0):
        self.models, self.policy, self.state = models, policy, state
        self.look_ahead, self.joiner, self.index = look_ahead, joiner, first_round

    def __iter__(self) -> Iterator[RoundReport]:
        state, ahead = self.state, None  # ahead: a round launched before the round before it was read
        while True:
            if ahead is not None:
                rnd, ahead = ahead, None
            else:
                if self._joining():
                    self.joiner.admit(state)
                halted = self._halt()
                if halted:
                    yield RoundReport(self.index, time.perf_counter(), 0, halted, time.perf_counter())
                if not state.live:
                    if self._joining():
                        continue
                    return
                rnd = self._launch(self._plan(), state.last, [s.history for s in state.live])
            if self.look_ahead and self._may_look_ahead():  # module docstring: look-ahead
                ahead = self._launch(self._plan(rnd), state.last, None)
            yield self._read(rnd, ahead)

    # ---- 1. plan, 2-5. launch ---------------------------------------------------------------------------------
    def _plan(self, unread: Round | None = None) -> Round:
        """The next round over the batch's rows: each row's draft length cut to its room (`unread`: the round
        launched last, not read yet, which may emit up to l + 1 tokens more)."""
        state = self.state
        wanted = self.policy.lengths(state.live) if self.models.drafter.proposes else [0] * len(state.live)
        if unread is None:
            lengths = [max(0, min(n, room(s, s.rejected))) for n, s in zip(wanted, state.live, strict=True)]
        else:
            lengths = [max(0, min(n, room(s, m + 1))) for n, s, m in zip(wanted, unread.live, unread.lengths,
                                                                          strict=True)]
        if state.last is None:
            state.last = ints_to_device([s.history[-1] for s in state.live], state.cache.suffix_len.device)[:, None]
        slot = 0 if unread is None else 1 - unread.slot
        u = draw_uniforms(state.live, lengths, state.draws, state.cache.suffix_len.device)
        return Round(self.index, time.perf_counter(), list(state.live), lengths, u, slot=slot, alive=state.alive)

    def _launch(self, rnd: Round, last: torch.Tensor, histories: list[list[int]] | None) -> Round:
        self.state.last = one_round.launch(self.models, rnd, self.state.cache, last, histories)
        self.index += 1
        return rnd

    def _joining(self) -> bool:
        return self.joiner is not None and self.joiner.pending()

    def _may_look_ahead(self) -> bool:
        """Whether the next round may be launched before the one just launched is read: no compaction due, no
        round that ends every row at its limit, no request to halt or to join, and, for a round that drafts, a
        policy that decides without the read and a drafter that `follows` (regular decoding's plain step always
        can)."""
        live, drafter = self.state.live, self.models.drafter
        if _compacts(live, True) or all(s.finished or room(s) <= 0 for s in live) or self._joining():
            return False
        now = time.perf_counter()
        if any(ctx.halt(now) for ctx in {id(s.ctx): s.ctx for s in live if not s.finished}.values()):
            return False
        return not drafter.proposes or (self.policy.decides_ahead and drafter.follows())

    # ---- 6. read --------------------------------------------------------------------------------------------
    def _read(self, rnd: Round, ahead: Round | None) -> RoundReport:
        """Step 6: the round's one host synchronisation, its rows' tokens to their stop rules, finished rows out."""
        state, drafter = self.state, self.models.drafter
        waited = rnd.host.wait()
        packed = rnd.host.tolist()
        if not all(p[3] for s, p in zip(rnd.live, packed, strict=True) if not s.finished):
            state.last = self._redo(rnd, packed, ahead)  # rare
        now = time.perf_counter()
        rows = [(s, HostRow.parse(p), n) for s, p, n in zip(rnd.live, packed, rnd.lengths, strict=True)
                if not s.finished]  # (a row finished by an earlier round: launched ahead of it, or riding along)
        seqs = [s for s, _, _ in rows]
        updates = emit(seqs, [r for _, r, _ in rows], [n for _, _, n in rows], now)
        drafter.commit([s.history for s in state.live])
        self._leave(idle=ahead is None, new_riders=any(u.finished for u in updates))
        self.policy.update(seqs, [r.accepted for _, r, _ in rows], [n for _, _, n in rows])
        return RoundReport(rnd.index, now, rnd.draft_length, list(zip(seqs, updates, strict=True)), rnd.started_at,
                           waited, len(rnd.live))

    def _leave(self, idle: bool, new_riders: bool) -> None:
        """Finished rows leave the batch (once no round launched ahead still covers them: `idle`), or ride along."""
        state, drafter = self.state, self.models.drafter
        rows = [i for i, s in enumerate(state.live) if not s.finished]
        if not rows:
            if not idle:  # a round launched ahead still covers them: they ride along until it is read
                return
            if state.cache is not None and state.cache.batch:  # empty, so that a request joining later starts at row 0
                state.cache = state.cache.compact([])
                drafter.select([])
            state.live, state.alive, state.last = [], None, None
        elif len(rows) < len(state.live) and idle and _compacts(state.live, self.look_ahead):
            state.live = [state.live[i] for i in rows]
            state.cache = state.cache.compact(rows)
            drafter.select(rows)
            if state.last is not None:
                state.last = state.last[ints_to_device(rows, state.last.device)]
            state.alive = None
        elif new_riders:  # the next round's mask
            device = state.cache.suffix_len.device
            state.alive = ints_to_device([int(not s.finished) for s in state.live], device).to(torch.int32)

    def _halt(self) -> list[tuple[Sequence, SequenceUpdate]]:
        """End the rows of every request whose cancel is set or whose budget is spent, before the next round
        (nothing is in flight); they leave the batch at once."""
        now = time.perf_counter()
        halted = []
        reasons: dict[int, str | None] = {}
        for s in self.state.live:
            if s.finished:
                continue
            key = id(s.ctx)
            if key not in reasons:
                reasons[key] = s.ctx.halt(now)
            if reasons[key]:
                s.finish_reason, s.finish_time_s = reasons[key], now - s.ctx.t0
                halted.append((s, SequenceUpdate(s.seq, (), "", 0, 0, True, s.finish_reason)))
        if halted:
            self._leave(idle=True, new_riders=False)
        return halted

    def _redo(self, rnd: Round, packed: list[list[int]], ahead: Round | None) -> torch.Tensor:
        """Redo `rnd`'s verdict with the full-sort top-p (rows its candidates left undecided), in `packed` and in
        `rnd.accepted` / `rnd.emitted`; correct the cache's rollback, and launch the round launched ahead again
        from the corrected tokens. Returns the last token [B, 1] after the round launched last."""
        cache, models = self.state.cache, self.models
        Lp = rnd.proposal.tokens.shape[1]
        verdict = models.rule.exact(rnd.out.logits[:, :Lp + 1], *rnd.verify_args())
        accepted = verdict.accepted.tolist()
        overwritten = ahead is not None and any(a > row[0] for a, row in zip(accepted, packed, strict=True))
        for row, a, t in zip(packed, accepted, verdict.next_token.tolist(), strict=True):
            row[:2] = a, t
        if overwritten:  # the round ahead wrote over cache rows this one accepts after all: write them again
            cache.suffix_len.copy_(rnd.start)
            one_round.forward(models, rnd, cache)  # the same graph and inputs, so the same logits too
        cache.suffix_len.copy_(rnd.start + verdict.accepted.to(rnd.start.dtype) + 1)  # [last, d_1 .. d_a]
        if rnd.accepted is not None:  # what the drafter was handed (`Drafter.reads_verify`)
            rnd.accepted.copy_(verdict.accepted)
            rnd.emitted.copy_(emitted(rnd.proposal.tokens, verdict.accepted, verdict.next_token))
        if ahead is None:
            return verdict.next_token[:, None]
        # the same round from the corrected tokens: its graph slot and uniforms, and, if it drafts, a proposal
        # made again from them (the drafter drops the withdrawn one's entries as it would a rejected guess)
        models.drafter.withdraw()
        return one_round.launch(models, ahead, cache, verdict.next_token[:, None], None)


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
