"""The BASS round loop (DESIGN.md §1): batched drafting, one batched verify, ragged acceptance.

One round, for the B live sequences:

  1. the policy gives each sequence a draft length l_b (shared by the batch for the cost policy and the
     paper's heuristic; 0 = a plain decoding step);
  2. the drafter proposes up to l_b tokens per sequence (one batched draft forward per draft step);
  3. one batched target forward scores [last emitted token, d_1 .. d_l] of every sequence (q_len = l_b + 1);
  4. each sequence accepts its own a_b drafts and emits a_b + 1 tokens (greedy or lossless sampling);
  5. both caches roll back per sequence to the accepted length;
  6. sequences that hit EOS, a stop string, their token limit, the time budget or a cancel leave the batch;
     the draft-length policy learns the round's acceptance (and, for the cost policy, its timing).

With `NoDrafter` every proposal is empty, q_len = 1, and the same loop is regular batched decoding.
The only host synchronisation in a round is reading the accepted counts and tokens (step 4).

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
    while the other runs; a drafter takes the verify's features when it is launched (`Drafter.verified`);
  - the policy decides the next round's length before it has seen round r's acceptance (one round of
    lag), so only the policies that tolerate it (`DraftLengthPolicy.decides_ahead`) are asked.

The token limit. A round may emit l_b + 1 tokens, so l_b never exceeds what sequence b has left but one.
A round launched ahead does not know what round r emitted, so it assumes the most, l_r + 1; the rounds
launched after a read assume the same (l_b is cut by the drafts round r asked for and did not accept,
`Sequence.rejected`), so that look-ahead changes no draft length and no token. Near its limit a sequence
drafts less, and the round is launched ahead all the same: refusing to cut it stopped the pipeline for a
round as each sequence neared its limit (on the H100 a stopped round cost about 0.9 ms more than a pipelined
one of its length, `real_bench_2026-11-25_h100_cycle3.json`, `traces`).

Finished sequences ride along. Compacting the batch needs both rounds read, so it stops the look-ahead
for a round, and the GPU idles while the host reads, compacts and launches again. So with look-ahead a
finished sequence keeps its row: its draft length is 0 and the round's `alive` mask makes its verify width
(q_len) 0, so its cache neither grows nor rolls back, and its results are never read. Dropping rows saves
device work only where the live ones fit a smaller batch bucket (`bass.graphs.BATCH_BUCKETS`), and only
above RIDE_ALONG_ROWS rows does that pay for the stop: on the H100 with the 1.5B target and its draft at
k = 8 (fixed L = 3), a round cost 2.46 ms at 8 rows, 2.42 at 4, 2.39 at 2 and 2.31 at 1, while each of
the 23 compactions cost about 1.4 ms of stopped pipeline, 2.8 % of the decode time in all
(`real_bench_2026-11-25_h100_cycle3.json`, `traces`); at 32 rows a round at L = 1 cost 2.4 ms against 2.2
at 16. Without look-ahead (the CPU, where every row costs compute) the batch is compacted as soon as a
sequence finishes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from bass.cache import KVCache
from bass.config import SamplingParams
from bass.draft_length import DraftLengthPolicy
from bass.drafters import Drafter, Proposal
from bass.events import SequenceUpdate
from bass.graphs import BATCH_BUCKETS, bucket
from bass.rules import VerifyRule, emitted, run_then, verify_rule
from bass.sequences import Sequence, StopRule
from bass.streams import SequenceRNG
from bass.transfer import HostRead, ints_to_device

RIDE_ALONG_ROWS = 8  # with look-ahead, a batch of at most this many rows keeps finished ones to the end


@dataclass
class RoundReport:
    """What one round did; the engine turns it into a `GenerationEvent`."""

    index: int
    time_s: float  # since decoding started
    draft_length: int  # the longest draft proposed this round
    updates: list[SequenceUpdate]
    started_s: float | None = None  # the decode clock the budget check read before this round
    # seconds the host was blocked in this round's one synchronisation, waiting for the device (0 on the CPU,
    # whose rounds run as they are launched): what is left of a round's interval since the round before it
    # ended is the host's own time, its bookkeeping and launches (`BatchStats.host_stalls`)
    wait_s: float = 0.0


@dataclass
class DecodeState:
    """Everything the loop mutates: the live sequences (in cache row order) and the target cache."""

    live: list[Sequence]
    cache: KVCache


@dataclass
class _Round:
    """A round whose verify is queued on the device; its results are read after the next round's launch."""

    index: int
    started_s: float
    live: list[Sequence]  # the batch it covers, in cache row order (one may finish before this round is read)
    lengths: list[int]  # l_b asked of the drafter
    u: torch.Tensor  # [B, 2L+1] the round's uniforms: L to draft, L to accept, 1 to resample
    slot: int = 0  # the target's graph slot
    proposal: Proposal | None = None  # tokens [B, Lp], lengths [B] (made by `_launch`)
    out: tuple = ()  # the verify rule's outputs (`bass.rules.VerifyRule`), device; widths a graph's bucket
    start: torch.Tensor | None = None  # [B] the target cache's suffix lengths before the verify
    last_in: torch.Tensor | None = None  # [B, 1] the token the verify started from
    # for a drafter that reads them (`Drafter.reads_verify`), views of out (valid until the slot's next replay):
    emitted: torch.Tensor | None = None  # [B, Lp+1] d_1 .. d_a, then the next token at column a
    accepted: torch.Tensor | None = None  # [B] a
    host: HostRead | None = None  # out's packed results [B, 3 + W], copied to the host as they finish
    alive: torch.Tensor | None = None  # [B] int32, 0 for finished rows riding along; None: every row live

    @property
    def draft_length(self) -> int:
        """L = max_b l_b: the batch's draft width this round."""
        return max(self.lengths, default=0)

    def verify_args(self) -> tuple:
        """(drafts [B, Lp], draft_len [B], u_accept [B, Lp], u_sample [B], draft_probs, draft_ids) of the verify
        rule."""
        p, L = self.proposal, self.draft_length
        Lp = p.tokens.shape[1]  # a drafter may propose fewer than L tokens (n-gram lookup): width Lp <= L
        return p.tokens, p.lengths, self.u[:, L:L + Lp], self.u[:, 2 * L], p.probs, p.prob_ids


def _verify(target: Callable, attn: Callable, rule: VerifyRule, rnd: _Round, cache: KVCache,
            last: torch.Tensor) -> torch.Tensor:
    """Queue steps 3-5 of `rnd` on the device: the target's forward over [last emitted token, drafts] and the
    accept / resample rule (one graph), the rollback of rejected rows, and the copy of the results to the
    host. Returns the next last token [B, 1] (a copy: the graph's outputs live only until the next call
    in its slot, a draft step included); makes no host synchronisation."""
    rnd.start, rnd.last_in = cache.suffix_len.clone(), last
    rnd.out = _forward(target, attn, rule, rnd, cache)
    next_token, packed, rejected = rnd.out[1], rnd.out[4], rnd.out[6]
    if rnd.proposal.tokens.shape[1]:  # 5. roll back: the cache holds every token but the last emitted one
        cache.suffix_len.sub_(rejected)
    rnd.host = HostRead(packed)  # into pinned memory, without waiting for it
    return next_token[:, None].clone()


def _launch(target: Callable, attn: Callable, rule: VerifyRule, drafter: Drafter, rnd: _Round, cache: KVCache,
            last: torch.Tensor, histories: list[list[int]] | None, params: SamplingParams) -> torch.Tensor:
    """Queue steps 2-5 of `rnd`: its proposal if it drafts (histories None: from what is on the device, by
    a drafter that `follows`), then `_verify`, which the drafter is told of. Returns the next last token
    [B, 1]."""
    L = rnd.draft_length  # 0: the policy chose plain decoding, nothing to draft
    rnd.proposal = drafter.propose(histories, rnd.lengths, params, rnd.u[:, :L], cache) if L else \
        Proposal.empty(len(rnd.lengths), rnd.u.device)
    last = _verify(target, attn, rule, rnd, cache, last)
    if drafter.reads_verify:  # the graph's buffers: read by the next proposal, before this slot's next replay
        rnd.accepted, rnd.emitted = rnd.out[0], rnd.out[5][:, :rnd.proposal.tokens.shape[1] + 1]
    drafter.verified(rnd.emitted, rnd.accepted)
    return last


def _forward(target: Callable, attn: Callable, rule: VerifyRule, rnd: _Round, cache: KVCache) -> tuple:
    """The target's forward over [last emitted token, drafts] of `rnd` and its verify rule, in one graph."""
    args = rnd.verify_args()
    drafts, dlen = args[0], args[1]
    slot = {"slot": rnd.slot} if getattr(target, "slots", 1) > 1 else {}
    q_len = (dlen + 1).to(torch.int32)  # [B]
    if rnd.alive is not None:  # finished rows riding along: width 0, their cache untouched
        q_len = q_len * rnd.alive
    return run_then(target, rule, args, torch.cat([rnd.last_in, drafts], 1), cache, q_len, attn, **slot)


def _halt(cancel: threading.Event | None, time_budget_s: float | None, now: float) -> str | None:
    """Why no round may start at decode clock `now`, if one may not."""
    if cancel is not None and cancel.is_set():
        return "cancelled"
    if time_budget_s is not None and now >= time_budget_s:
        return "budget"
    return None


def speculative_decode(target: torch.nn.Module, attn: Callable, drafter: Drafter, policy: DraftLengthPolicy,
                       state: DecodeState, stop: StopRule, rng: SequenceRNG, *, t0: float,
                       time_budget_s: float | None = None, cancel: threading.Event | None = None,
                       first_round: int = 0, look_ahead: bool = False) -> Iterator[RoundReport]:
    """Run rounds until every live sequence has finished; yield one report per round.

    `time_budget_s` is on the decode clock (seconds since `t0`): a round starts iff the clock read just
    before it is below the budget, and every report carries that reading (`started_s`), so a
    caller can tell afterwards which rounds a smaller budget would have run (`bass.budgets`).
    `look_ahead` launches a round before reading the round before, where it needs nothing unread (module
    docstring): on for CUDA.
    """
    params = stop.params
    device = state.cache.suffix_len.device
    rule = verify_rule(params)
    last = None  # [B, 1] the last emitted token of each sequence after the round launched last (device)
    ahead: _Round | None = None  # a round launched before the round before it was read
    planned: dict[int, int] | None = None  # l_b decided a round ahead for a round that drafts
    alive: torch.Tensor | None = None  # [B] int32 once finished rows ride along (module docstring)
    r = first_round
    while state.live:
        if ahead is not None:
            rnd, ahead = ahead, None
        else:
            started = time.perf_counter() - t0
            halt = _halt(cancel, time_budget_s, started)
            if halt:
                updates = []
                for s in state.live:
                    if not s.finished:  # (a row riding along keeps why it finished)
                        s.finish_reason, s.finish_time_s = halt, started
                        updates.append(SequenceUpdate(s.seq, (), "", 0, 0, True, halt))
                state.live = []
                yield RoundReport(r, started, 0, updates, started)
                return
            # 1. draft lengths, never past the token limit: a round emits at most l_b + 1 tokens, and as if the
            # round before had accepted all it asked for (module docstring, the token limit)
            seqs = [s.seq for s in state.live]
            if planned is not None:
                wanted, planned = [planned[q] for q in seqs], None
                policy.relaunched()
            else:
                wanted = _wanted(policy, drafter, state.live)
            room = [params.max_new_tokens - s.num_generated - 1 - s.rejected for s in state.live]
            lengths = [max(0, min(n, m)) for n, m in zip(wanted, room, strict=True)]
            L = max(lengths, default=0)
            u = rng.uniforms([s.key for s in state.live], 2 * L + 1, device)  # [B, 2L+1]
            hist = [s.history for s in state.live]
            if last is None:
                last = ints_to_device([h[-1] for h in hist], device)[:, None]  # (pinned: no wait for the device)
            # 2. - 5. draft, verify, accept and roll back, queued on the device
            rnd = _Round(r, started, list(state.live), lengths, u, alive=alive)
            last = _launch(target, attn, rule, drafter, rnd, state.cache, last, hist, params)
            r += 1

        # launch the next round now if it needs nothing the host has not read (module docstring: look-ahead)
        if look_ahead and not _compacts(state.live, look_ahead) and _may_launch_ahead(drafter, policy) \
                and not _ends_at_limit(state.live, params):
            now = time.perf_counter() - t0
            if not _halt(cancel, time_budget_s, now):
                seqs = [s.seq for s in state.live]
                wanted = _wanted(policy, drafter, state.live)
                # within the token limit whatever round r emits, at most l_b + 1 tokens (module docstring)
                room = [params.max_new_tokens - s.num_generated - 1 - (n + 1) for s, n in zip(rnd.live, rnd.lengths,
                                                                                          strict=True)]
                wanted = [max(0, min(w, m)) for w, m in zip(wanted, room, strict=True)]
                L = max(wanted)
                if L == 0 or drafter.follows():
                    u = rng.uniforms([s.key for s in state.live], 2 * L + 1, device)
                    ahead = _Round(r, now, list(state.live), wanted, u, slot=1 - rnd.slot, alive=alive)
                    last = _launch(target, attn, rule, drafter, ahead, state.cache, last, None, params)
                    r += 1
                else:
                    planned = dict(zip(seqs, wanted, strict=True))

        # 4. the round's one host synchronisation: everything the bookkeeping needs, in one copy
        waited = rnd.host.wait()
        packed = rnd.host.tolist()
        if not all(row[3] for s, row in zip(rnd.live, packed, strict=True) if not s.finished):
            last = _redo(target, attn, rule, rnd, packed, state.cache, ahead, drafter, params)  # rare: top-p by a sort
        now = time.perf_counter() - t0
        updates, seqs, accepted, asked = [], [], [], []
        for s, row, n_asked in zip(rnd.live, packed, rnd.lengths, strict=True):
            if s.finished:  # finished by an earlier round (this one was launched ahead of it, or it rides along)
                continue
            a, t, n, d = row[0], row[1], row[2], row[4:4 + row[0]]
            before = len(s.history)
            new_text = stop.extend(s, d + [t])
            s.rounds, s.proposed, s.accepted, s.rejected = s.rounds + 1, s.proposed + n, s.accepted + a, n_asked - a
            if s.finished:
                s.finish_time_s = now
            updates.append(SequenceUpdate(s.seq, tuple(s.history[before:]), new_text, n, a, s.finished,
                                          s.finish_reason))
            seqs.append(s.seq), accepted.append(a), asked.append(n_asked)
        drafter.commit([s.history for s in state.live])

        # 6. finished sequences leave the batch (once no round launched ahead still covers them), or ride along
        rows = [i for i, s in enumerate(state.live) if not s.finished]
        if not rows:
            state.live = []
        elif len(rows) < len(state.live) and ahead is None and _compacts(state.live, look_ahead):
            state.live = [state.live[i] for i in rows]
            state.cache = state.cache.compact(rows)
            drafter.select(rows)
            last = last[ints_to_device(rows, device)]
            alive = None
        elif any(up.finished for up in updates):  # new riders: the next round's mask
            alive = ints_to_device([int(not s.finished) for s in state.live], device).to(torch.int32)
        policy.update(seqs, accepted, asked)  # after all of the round's work, which its clock covers
        yield RoundReport(rnd.index, now, rnd.draft_length, updates, rnd.started_s, waited)


def _wanted(policy: DraftLengthPolicy, drafter: Drafter, live: list[Sequence]) -> list[int]:
    """l_b the policy wants for each row: asked for the live sequences only, 0 for rows riding along."""
    running = [s.seq for s in live if not s.finished]
    if not drafter.proposes or not running:
        return [0] * len(live)
    wanted = dict(zip(running, policy.lengths(running), strict=True))
    return [wanted.get(s.seq, 0) for s in live]  # (riders are not among `running`: 0)


def _compacts(live: list[Sequence], look_ahead: bool) -> bool:
    """Whether finished rows should leave the batch now: at once without look-ahead, and with it only from a
    batch of more than RIDE_ALONG_ROWS rows whose live ones fit a smaller batch bucket (module docstring:
    finished sequences ride along)."""
    running = sum(not s.finished for s in live)
    if running == len(live):
        return False
    if not look_ahead:
        return True
    rows = bucket(len(live), BATCH_BUCKETS) or len(live)
    return rows > RIDE_ALONG_ROWS and (bucket(running, BATCH_BUCKETS) or running) < rows


def _ends_at_limit(live: list[Sequence], params: SamplingParams) -> bool:
    """Whether the round just launched ends every sequence at its token limit (it emits at least one token
    each): a round launched ahead of it would be thrown away unread."""
    return all(s.finished or params.max_new_tokens - s.num_generated <= 1 for s in live)


def _may_launch_ahead(drafter: Drafter, policy: DraftLengthPolicy) -> bool:
    """Whether the round after the one just launched might be launched before that one is read: a plain
    step always can, a drafting round only from a drafter that `follows`, and only for a policy that
    decides a round ahead."""
    if not drafter.proposes:
        return True
    return policy.decides_ahead and (policy.may_choose_plain or drafter.follows())


def _redo(target: Callable, attn: Callable, rule: VerifyRule, rnd: _Round, packed: list[list[int]],
          cache: KVCache, ahead: _Round | None, drafter: Drafter, params: SamplingParams) -> torch.Tensor:
    """Redo `rnd`'s verdict with the full-sort top-p (rows its candidates left undecided), in `packed` and
    in `rnd.accepted` / `rnd.emitted`; correct the cache's rollback, and launch the round launched ahead
    again from the corrected tokens. Returns the last token [B, 1] after the round launched last."""
    Lp = rnd.proposal.tokens.shape[1]
    verdict = rule.exact(rnd.out[3][:, :Lp + 1], *rnd.verify_args())
    accepted = verdict.accepted.tolist()
    overwritten = ahead is not None and any(a > row[0] for a, row in zip(accepted, packed, strict=True))
    for row, a, t in zip(packed, accepted, verdict.next_token.tolist(), strict=True):
        row[:2] = a, t
    if overwritten:  # the round ahead wrote over cache rows this one accepts after all: write them again
        cache.suffix_len.copy_(rnd.start)
        _forward(target, attn, rule, rnd, cache)  # the same graph and inputs, so the same logits too
    cache.suffix_len.copy_(rnd.start + verdict.accepted.to(rnd.start.dtype) + 1)  # [last, d_1 .. d_a]
    if rnd.accepted is not None:  # what the drafter was handed (`Drafter.reads_verify`)
        rnd.accepted.copy_(verdict.accepted)
        rnd.emitted.copy_(emitted(rnd.proposal.tokens, verdict.accepted, verdict.next_token))
    if ahead is None:
        return verdict.next_token[:, None]
    # the same round from the corrected tokens: its graph slot and uniforms, and, if it drafts, a proposal
    # made again from them (the drafter drops the withdrawn one's entries as it would a rejected guess)
    drafter.withdraw()
    return _launch(target, attn, rule, drafter, ahead, cache, verdict.next_token[:, None], None, params)
