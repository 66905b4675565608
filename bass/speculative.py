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
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from bass.cache import KVCache
from bass.draft_length import DraftLengthPolicy
from bass.drafters import Drafter, Proposal
from bass.events import SequenceUpdate
from bass.rules import run_then, verify_rule
from bass.sampling import SequenceRNG
from bass.sequences import Sequence, StopRule


@dataclass
class RoundReport:
    """What one round did; the engine turns it into a `GenerationEvent`."""

    index: int
    time_s: float  # since decoding started
    draft_length: int  # the longest draft proposed this round
    updates: list[SequenceUpdate]
    started_s: float | None = None  # the decode clock the budget check read before this round


@dataclass
class DecodeState:
    """Everything the loop mutates: the live sequences (in cache row order) and the target cache."""

    live: list[Sequence]
    cache: KVCache


def speculative_decode(target: torch.nn.Module, attn: Callable, drafter: Drafter, policy: DraftLengthPolicy,
                       state: DecodeState, stop: StopRule, rng: SequenceRNG, *, t0: float,
                       time_budget_s: float | None = None, cancel: threading.Event | None = None,
                       first_round: int = 0) -> Iterator[RoundReport]:
    """Run rounds until every live sequence has finished; yield one report per round.

    `time_budget_s` is on the decode clock (seconds since `t0`): a round starts iff the clock read just
    before it is below the budget, and every report carries that reading (`started_s`), so a
    caller can tell afterwards which rounds a smaller budget would have run (`bass.budgets`).
    """
    params = stop.params
    device = state.cache.suffix_len.device
    r = first_round
    last = None  # [B, 1] the last emitted token of each live sequence, kept on the device
    rule = verify_rule(params)
    while state.live:
        now = started = time.perf_counter() - t0
        halt = "cancelled" if cancel is not None and cancel.is_set() else None
        if halt is None and time_budget_s is not None and now >= time_budget_s:
            halt = "budget"
        if halt:
            updates = []
            for s in state.live:
                s.finish_reason, s.finish_time_s = halt, now
                updates.append(SequenceUpdate(s.seq, (), "", 0, 0, True, halt))
            state.live = []
            yield RoundReport(r, now, 0, updates, started)
            return

        seqs, hist = [s.seq for s in state.live], [s.history for s in state.live]
        # never draft past the token limit: a round emits at most l_b + 1 tokens
        room = [params.max_new_tokens - s.num_generated - 1 for s in state.live]
        wanted = policy.lengths(seqs) if drafter.proposes else [0] * len(seqs)
        lengths = [max(0, min(n, m)) for n, m in zip(wanted, room, strict=True)]
        L = max(lengths, default=0)
        u = rng.uniforms([s.key for s in state.live], 2 * L + 1, device)  # [B, 2L+1]

        # 2. draft (nothing to run when the policy chose plain decoding: L = 0)
        proposal = drafter.propose(hist, lengths, params, u[:, :L], state.cache) if L else \
            Proposal.empty(len(seqs), device)
        policy.drafted()  # timing mark: the cost policy weighs draft time against verify time
        drafts, dlen = proposal.tokens, proposal.lengths
        if last is None:
            last = torch.tensor([h[-1] for h in hist], dtype=torch.long, device=device)[:, None]
        # 3. + 4. verify and accept, in the target's graph (greedy, or lossless sampling)
        Lp = drafts.shape[1]  # a drafter may propose fewer than L tokens (n-gram lookup): width Lp <= L
        verify_args = (drafts, dlen, u[:, L:L + Lp], u[:, 2 * L], proposal.probs)
        # (its outputs are the graph's buffers: read before the next replay, which stream order guarantees)
        n_acc, next_token, decided, logits = run_then(target, rule, verify_args, torch.cat([last, drafts], 1),
                                                      state.cache, (dlen + 1).to(torch.int32), attn)
        # the round's one host synchronisation: everything the bookkeeping needs, in one copy
        packed = torch.cat([n_acc[:, None], next_token[:, None], dlen[:, None].long(),
                            decided[:, None].long(), drafts.long()], 1).tolist()
        if not all(row[3] for row in packed):  # rare (a flat distribution): top-p by a full sort
            verdict = rule.exact(logits[:, :Lp + 1], *verify_args)
            n_acc, next_token = verdict.accepted, verdict.next_token
            for row, a, t in zip(packed, n_acc.tolist(), next_token.tolist(), strict=True):
                row[:2] = a, t
        accepted = [row[0] for row in packed]
        next_tok, proposed, draft_rows = [row[1] for row in packed], [row[2] for row in packed], \
            [row[4:] for row in packed]

        now = time.perf_counter() - t0
        updates = []
        for s, a, t, d, n in zip(state.live, accepted, next_tok, draft_rows, proposed, strict=True):
            before = len(s.history)
            new_text = stop.extend(s, d[:a] + [t])
            s.rounds, s.proposed, s.accepted = s.rounds + 1, s.proposed + n, s.accepted + a
            if s.finished:
                s.finish_time_s = now
            updates.append(SequenceUpdate(s.seq, tuple(s.history[before:]), new_text, n, a, s.finished,
                                          s.finish_reason))

        # 5. roll back: the target cache holds every token but the last emitted one
        # (a finished sequence's row may be left longer: it leaves the batch below)
        state.cache.truncate(state.cache.suffix_len - (dlen - n_acc))
        last = next_token[:, None]
        drafter.commit([s.history for s in state.live])

        # 6. finished sequences leave the batch
        rows = [i for i, s in enumerate(state.live) if not s.finished]
        if len(rows) < len(state.live):
            state.live = [state.live[i] for i in rows]
            if rows:
                state.cache = state.cache.compact(rows)
                drafter.select(rows)
                last = last[torch.tensor(rows, device=device)]
        policy.update(seqs, accepted, lengths)  # after all of the round's work, which its clock covers
        yield RoundReport(r, now, L, updates, started)
        r += 1
