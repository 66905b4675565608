"""Scripted engines for the tests: hand-made texts streamed round by round with the engine's `stream` contract.

`ScriptedRows` is the bookkeeping every scripted engine shares (the app's `app_fakes.FakeEngine` and the ones it
derives, and `ScriptedEngine` here): what each sequence has emitted, why it ended, its per-sequence stats, and the
"done" event they add up to.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import torch

from bass.events import BatchStats, Candidate, GenerationEvent, GenerationResult, SequenceStats, SequenceUpdate


class ScriptedRows:
    """Sequence i of a request will say `texts[i]`; `emit` hands it the next piece, `cut` ends it early."""

    def __init__(self, texts: Sequence[str]):
        self.texts = list(texts)
        self.pos = [0] * len(texts)  # characters emitted
        self.reason: list[str | None] = [None] * len(texts)
        self.stats = [[0, 0, 0, 0, 0.0] for _ in texts]  # tokens, rounds, proposed, accepted, finish time

    def live(self) -> list[int]:
        return [i for i, r in enumerate(self.reason) if r is None]

    def emit(self, i: int, chars: int, ids: tuple[int, ...], proposed: int, accepted: int, t: float,
             limit: int | None = None) -> SequenceUpdate:
        """Row i emits its next `chars` characters as tokens `ids` in a round at time t: "stop" once its text is out,
        or with a token `limit`, "length" once it has that many tokens."""
        piece = self.texts[i][self.pos[i]:self.pos[i] + chars]
        self.pos[i] += len(piece)
        st = self.stats[i]
        st[0], st[1], st[2], st[3] = st[0] + len(ids), st[1] + 1, st[2] + proposed, st[3] + accepted
        if limit is not None and st[0] >= limit:
            self.reason[i], st[4] = "length", t
        elif limit is None and self.pos[i] >= len(self.texts[i]):
            self.reason[i], st[4] = "stop", t
        return SequenceUpdate(i, ids, piece, proposed, accepted, self.reason[i] is not None, self.reason[i])

    def cut(self, i: int, reason: str, t: float) -> SequenceUpdate:
        """Row i ends at time t without a token ("cancelled", "budget"), keeping what it said."""
        self.reason[i], self.stats[i][4] = reason, t
        return SequenceUpdate(i, (), "", 0, 0, True, reason)

    def so_far(self) -> tuple[str, ...]:
        return tuple(x[:p] for x, p in zip(self.texts, self.pos))

    def done(self, rounds: int, t: float, method: str, drafter: str | None, backend: str, prefill_s: float,
             draft_lengths: tuple[int, ...] = ()) -> GenerationEvent:
        """The "done" event: each row a candidate (its ids `range(tokens)`), the batch's stats over them."""
        cands = tuple(Candidate(0, i, self.texts[i][:self.pos[i]], tuple(range(st[0])), self.reason[i],
                                SequenceStats(*st)) for i, st in enumerate(self.stats))
        ms = [c.stats.ms_per_token for c in cands if c.stats.tokens]
        totals = [sum(st[j] for st in self.stats) for j in range(4)]
        batch = BatchStats(method, drafter, backend, len(cands), prefill_s, t, *totals,
                           sum(ms) / len(ms) if ms else 0.0, draft_lengths)
        return GenerationEvent("done", rounds, t, 0, (), tuple(c.text for c in cands), GenerationResult(cands, batch))


def cancelled_result(k: int, method: str | None) -> GenerationResult:
    """What a request cancelled while it waited in line gets: k empty candidates, "cancelled"."""
    cands = tuple(Candidate(0, i, "", (), "cancelled", SequenceStats(0, 0, 0, 0, 0.0)) for i in range(k))
    return GenerationResult(cands, BatchStats(method, None, "torch", k, 0.0, 0.0, 0, 0, 0, 0, 0.0, ()))


class ScriptedEngine:
    """Sequence i emits one character of `texts[i]` per round and finishes ("stop") after its last one.

    Round r ends at `r * round_s` seconds of decoding; the prefill takes `prefill_s`. A cancel is seen at
    the start of a round, as the real engine does: every live sequence ends "cancelled" with its partial
    text. So is the time budget, with the engine's rule: round r starts iff its start (r - 1) * round_s
    < time_budget_s - prefill_s, else every live sequence ends "budget". `settle()` runs after each round
    event is consumed, so a test can let the tester catch up and make the round at which a cancel lands exact.
    """

    device = "cpu"
    dtype = torch.float32
    backend = "torch"  # what `Engine.backend` resolves "auto" to on a CPU

    def __init__(self, texts: Sequence[str], prefill_s: float = 0.5, round_s: float = 1.0,
                 settle: Callable[[], None] = lambda: None):
        self.texts, self.prefill_s, self.round_s, self.settle = list(texts), prefill_s, round_s, settle
        self.now = 0.0  # decoding time of the last event, for a test's clock

    def stream(self, prompt, *, k, params=None, method="bass", chat=False, cancel: threading.Event | None = None,
               drafter=None):
        assert k == len(self.texts)
        yield GenerationEvent("prefill", 0, self.prefill_s, 0, (), ("",) * k)
        rows = ScriptedRows(self.texts)
        budget = params.time_budget_s if params is not None else None
        r = 0
        while rows.live():
            r += 1
            self.now = t = r * self.round_s
            started = (r - 1) * self.round_s
            halt = "cancelled" if cancel is not None and cancel.is_set() else \
                "budget" if budget is not None and started >= budget - self.prefill_s else None
            updates = [rows.cut(i, halt, t) if halt else rows.emit(i, 1, (7,), 2, 1, t) for i in rows.live()]
            yield GenerationEvent("round", r, t, 2, tuple(updates), rows.so_far(), started_s=started)
            self.settle()
        yield rows.done(r, r * self.round_s, method, "ngram", "torch", self.prefill_s)


class ScriptedTester:
    """Passes a candidate when its text says so ('P' in it); records what it was asked, in order."""

    def __init__(self) -> None:
        self.seen: list[int] = []
        self._cond = threading.Condition()

    def __call__(self, items) -> list[bool]:
        with self._cond:
            self.seen.extend(seq for seq, _ in items)
            self._cond.notify_all()
        return ["P" in text for _, text in items]

    def wait_for(self, count: int, timeout_s: float = 5.0) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.seen) >= count, timeout_s), (self.seen, count)
