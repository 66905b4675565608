"""A scripted engine for the streaming-verdict tests: sequences finish at known rounds and times."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import torch

from bass.events import BatchStats, Candidate, GenerationEvent, GenerationResult, SequenceStats, SequenceUpdate


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
        pos, reason, fin_t = [0] * k, [None] * k, [0.0] * k
        r = 0
        while any(x is None for x in reason):
            r += 1
            self.now = t = r * self.round_s
            updates = []
            started = (r - 1) * self.round_s
            budget = params.time_budget_s if params is not None else None
            halt = "cancelled" if cancel is not None and cancel.is_set() else \
                "budget" if budget is not None and started >= budget - self.prefill_s else None
            for i in range(k):
                if reason[i] is not None:
                    continue
                if halt:
                    reason[i], fin_t[i] = halt, t
                    updates.append(SequenceUpdate(i, (), "", 0, 0, True, halt))
                    continue
                pos[i] += 1
                done = pos[i] >= len(self.texts[i])
                if done:
                    reason[i], fin_t[i] = "stop", t
                updates.append(SequenceUpdate(i, (7,), self.texts[i][pos[i] - 1], 2, 1, done, reason[i]))
            yield GenerationEvent("round", r, t, 2, tuple(updates), tuple(x[:p] for x, p in zip(self.texts, pos)),
                                  started_s=started)
            self.settle()
        cands = tuple(Candidate(0, i, self.texts[i][:pos[i]], (7,) * pos[i], reason[i],
                                SequenceStats(pos[i], pos[i], 2 * pos[i], pos[i], fin_t[i])) for i in range(k))
        stats = BatchStats(method, "ngram", "torch", k, self.prefill_s, r * self.round_s, sum(pos), sum(pos),
                           2 * sum(pos), sum(pos), 0.0)
        yield GenerationEvent("done", r, r * self.round_s, 0, (), tuple(c.text for c in cands),
                              GenerationResult(cands, stats))


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
