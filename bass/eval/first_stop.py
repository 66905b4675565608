"""Where a candidate that ran past its stops would have ended: its first end of text, then its first stop string.

A comparison gives every method the same work (`SamplingParams.ignore_eos`): each candidate runs to the token
limit. What a user gets from a normal run is the text up to the first stop, as `bass.decode.sequences.StopRule` ends it:
the tokens before the first EOS token, decoded, cut before the first stop string found in that text. That is the
text a comparison shows and tests; the candidate's statistics still count the work it did.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace

from bass.events import Candidate


class FirstStop:
    """Cuts candidates at their first stop. Without `decode` (an engine without a tokenizer) only stop strings
    are looked for, in the text as it is."""

    def __init__(self, stop: Sequence[str], eos_ids: Iterable[int] = (),
                 decode: Callable[[list[int]], str] | None = None):
        self.stop, self.eos_ids, self.decode = tuple(stop), frozenset(eos_ids), decode

    @classmethod
    def of(cls, engine, stop: Sequence[str]) -> FirstStop:
        """The engine's end-of-text tokens and decoder (its `tokenizer` and `eos_ids`, where it has them), decoding
        as the stop rule does (special tokens skipped)."""
        tokenizer = getattr(engine, "tokenizer", None)
        if tokenizer is None:
            return cls(stop)

        def decode(ids: list[int]) -> str:
            return tokenizer.decode(ids, skip_special_tokens=True)

        return cls(stop, getattr(engine, "eos_ids", ()), decode)

    def cut(self, cand: Candidate) -> Candidate:
        """The candidate as a normal run would have ended it: text, token ids and finish reason ("eos", "stop")
        up to its first stop; unchanged when it has none (its own ending, the token limit or a cut, stands)."""
        ids, text, reason = list(cand.token_ids), cand.text, None
        if self.decode is not None:
            eos = next((j for j, t in enumerate(ids) if t in self.eos_ids), None)
            if eos is not None:
                ids, text, reason = ids[:eos + 1], self.decode(ids[:eos]), "eos"
        at = self._find(text)
        if at >= 0:
            text, reason = text[:at], "stop"
            if self.decode is not None:
                ids = ids[:self._tokens_to_stop(ids)]
        if reason is None:
            return cand
        return replace(cand, text=text, token_ids=tuple(ids), finish_reason=reason)

    def _find(self, text: str) -> int:
        hits = [i for s in self.stop if (i := text.find(s)) >= 0]
        return min(hits) if hits else -1

    def _tokens_to_stop(self, ids: list[int]) -> int:
        """The fewest leading tokens whose text holds a stop string (what the stop rule keeps): a prefix that
        holds one is followed only by prefixes that do, so a bisection finds it in log2(len) decodes."""
        lo, hi = 1, len(ids)
        while lo < hi:
            mid = (lo + hi) // 2
            if self._find(self.decode(ids[:mid])) >= 0:
                hi = mid
            else:
                lo = mid + 1
        return lo
