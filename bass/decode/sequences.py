"""Per-sequence bookkeeping: token history, decoded text, stop conditions, counters.

Stop conditions are applied token by token to what a round emits, so a sequence that accepts five
tokens of which the second is EOS keeps exactly the tokens regular decoding would have produced.
A round's rows are handled together (`StopRule.extend_rows`): decoded by the tokenizer's Rust decoder
without transformers' Python layers, and searched for every stop string at once (one regular
expression), so the host's cost of a round grows by a few microseconds per row.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable
from collections.abc import Sequence as Seq
from dataclasses import dataclass, field

from bass.config import SamplingParams
from bass.events import SequenceStats


@dataclass
class Sequence:
    seq: int  # stable index: prompt_index * k + sample_index
    prompt_index: int
    sample_index: int
    prompt_len: int
    history: list[int]  # prompt + generated; the last token is not yet in the target cache
    text: str = ""  # generated text, stop strings cut off, held back while a character is incomplete
    rounds: int = 0
    proposed: int = 0
    accepted: int = 0
    rejected: int = 0  # draft tokens its last round asked for and did not accept (`bass.decode.pipeline`: the limit)
    finish_reason: str | None = None
    finish_time_s: float | None = None
    ctx: RequestContext | None = field(default=None, repr=False)  # its request's stop rule, streams, clock
    row_id: int | None = None  # unique among the rows of a batch of several requests (else `seq` is)
    stream: int = 0  # its random stream's key (`bass.decode.streams.row_keys`)
    drawn: int = 0  # draws its stream has given so far
    # incremental detokenization: generated[_prefix_off:_read_off] is decoded already and serves as
    # context for decoding what follows (a slice decodes differently from the start of a text)
    _prefix_off: int = field(default=0, repr=False)
    _read_off: int = field(default=0, repr=False)

    @property
    def uid(self) -> int:
        """The row's identity in its batch (the draft-length policy's key)."""
        return self.seq if self.row_id is None else self.row_id

    @property
    def key(self) -> tuple[int, int]:
        return self.prompt_index, self.sample_index

    @property
    def generated(self) -> list[int]:
        return self.history[self.prompt_len:]

    @property
    def num_generated(self) -> int:
        return len(self.history) - self.prompt_len

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def stats(self, now_s: float) -> SequenceStats:
        t = self.finish_time_s if self.finish_time_s is not None else now_s
        return SequenceStats(tokens=len(self.generated), rounds=self.rounds, proposed=self.proposed,
                             accepted=self.accepted, finish_time_s=t)


def fast_decoder(tokenizer) -> Callable[[list[list[int]]], list[str]]:
    """`tokenizer.batch_decode(rows, skip_special_tokens=True)`, as a function of lists of ids.

    transformers' fast tokenizers decode in Rust, then optionally clean up spaces; the Python layers
    around that cost about three times the decoding itself (13 against 4 µs for a few Qwen tokens). Where
    the clean-up is off and `decode` is transformers' own, the Rust decoder is called directly, row by row:
    the same texts. (Its `decode_batch` hands a round's few short rows to a thread pool whose wake-ups cost
    more than the decoding: 1.1 against 0.95 µs a row on 2 cores, and 215 µs for a round of 8 rows while the
    model's threads held the cores.) Anything else goes through `tokenizer.decode`.
    """
    def slow(rows: list[list[int]]) -> list[str]:
        return [tokenizer.decode(ids, skip_special_tokens=True) for ids in rows]

    try:
        from transformers.tokenization_utils_base import PreTrainedTokenizerBase
        from transformers.tokenization_utils_fast import PreTrainedTokenizerFast
    except ImportError:
        return slow
    cls, rust = type(tokenizer), getattr(tokenizer, "_tokenizer", None)
    if (rust is None or getattr(tokenizer, "clean_up_tokenization_spaces", True)
            or cls.decode is not PreTrainedTokenizerBase.decode or cls._decode is not PreTrainedTokenizerFast._decode):
        return slow

    def fast(rows: list[list[int]]) -> list[str]:
        return [rust.decode(ids, skip_special_tokens=True) for ids in rows]

    return fast


class StopRule:
    """Appends emitted tokens to a sequence and decides whether, and why, it finished. With
    `params.ignore_eos` it knows no end-of-text token and no stop string: only the token limit ends a sequence."""

    def __init__(self, tokenizer, eos_ids: Iterable[int], params: SamplingParams):
        self.tokenizer = tokenizer
        self.eos_ids = frozenset(eos_ids)
        self.params = params
        self._decode_rows = fast_decoder(tokenizer)
        # every stop string at once: the leftmost match is the earliest stop
        self._stops = re.compile("|".join(map(re.escape, params.stop))) if params.stop and not params.ignore_eos \
            else None
        self._lookback = max(map(len, params.stop), default=1) - 1

    def _decode(self, ids: list[int]) -> str:
        return self._decode_rows([ids])[0]

    def _find_stop(self, text: str, start: int) -> int:
        """Where the earliest stop string in `text` begins, searching only matches that end past `start` (what
        was searched before cannot hold one: the text only grows); -1 if none."""
        m = self._stops.search(text, max(0, start - self._lookback)) if self._stops is not None else None
        return m.start() if m else -1

    def _delta(self, tail: list[int], prefix_off: int, read_off: int, flush: bool) -> tuple[str, int, int]:
        """`deltas` for one row."""
        return self._deltas([tail], [prefix_off], [read_off], [flush])[0]

    def _deltas(self, tails: list[list[int]], prefix_offs: list[int], read_offs: list[int],
                flushes: list[bool]) -> list[tuple[str, int, int]]:
        """Per row, the text that ids[read_off:] add after ids[:read_off], decoding only from `prefix_off`; the
        caller passes only tail = ids[prefix_off:] (copying the whole generation each round costs O(n)).

        Decoding a few tokens of context with them, and subtracting the context's own text, gives the same
        characters as decoding everything (leading-space rules apply to both alike) at a cost independent
        of the sequence's length. Nothing is returned while the text ends in an incomplete character,
        unless `flush`. Returns (delta, new prefix_off, new read_off) per row; all rows in one decoder call.
        """
        contexts = [tail[:r - p] for tail, p, r in zip(tails, prefix_offs, read_offs, strict=True)]
        decoded = self._decode_rows(contexts + tails)
        out = []
        for context, full, tail, p, r, flush in zip(decoded, decoded[len(tails):], tails, prefix_offs, read_offs,
                                                     flushes, strict=False):
            if len(full) > len(context) and (flush or not full.endswith("\ufffd")):
                out.append((full[len(context):], r, p + len(tail)))
            else:
                out.append(("", p, r))
        return out

    def _kept(self, seq: Sequence, emitted: list[int]) -> tuple[list[int], str | None]:
        """`emitted` cut at EOS or the token limit, and the reason it ends the sequence (or None)."""
        room = self.params.max_new_tokens - seq.num_generated
        kept = emitted[:room]
        reason = "length" if seq.num_generated + len(kept) >= self.params.max_new_tokens else None
        if not self.params.ignore_eos and not self.eos_ids.isdisjoint(kept):
            j = next(j for j, t in enumerate(kept) if t in self.eos_ids)
            kept, reason = kept[:j + 1], "eos"
        return kept, reason

    def extend(self, seq: Sequence, emitted: list[int]) -> str:
        """Append `emitted` (cut at EOS, stop string or the token limit); return the new text."""
        return self.extend_many([seq], [emitted])[0]

    @staticmethod
    def extend_rows(seqs: Seq[Sequence], emitted: Seq[list[int]]) -> list[str]:
        """`extend` for rows of any requests (each row's own stop rule, `Sequence.ctx`), each rule's rows in one
        decoder call; the new text of each row."""
        groups: dict[int, tuple[StopRule, list[int]]] = {}
        for i, s in enumerate(seqs):
            groups.setdefault(id(s.ctx.stop), (s.ctx.stop, []))[1].append(i)
        texts = [""] * len(seqs)
        for rule, rows in groups.values():
            for i, text in zip(rows, rule.extend_many([seqs[i] for i in rows], [emitted[i] for i in rows]),
                               strict=True):
                texts[i] = text
        return texts

    def extend_many(self, seqs: Seq[Sequence], emitted: Seq[list[int]]) -> list[str]:
        """`extend` of several sequences of this rule, their texts decoded in one call."""
        cuts = [self._kept(s, e) for s, e in zip(seqs, emitted, strict=True)]
        bases = [s.history[s.prompt_len + s._prefix_off:] for s in seqs]  # generated[prefix_off:]
        deltas = self._deltas([b + k for b, (k, _) in zip(bases, cuts, strict=True)], [s._prefix_off for s in seqs],
                              [s._read_off for s in seqs], [r is not None for _, r in cuts])
        return [self._append(s, base, kept, reason, d) for s, base, (kept, reason), d in
                zip(seqs, bases, cuts, deltas, strict=True)]

    def _append(self, seq: Sequence, base: list[int], kept: list[int], reason: str | None,
                delta: tuple[str, int, int]) -> str:
        """Append one row's kept tokens and text, cut at the first stop string they complete; its new text."""
        delta, prefix_off, read_off = delta
        scanned = len(seq.text)
        text = seq.text + delta
        cut = self._find_stop(text, scanned) if delta else -1  # no new text, no new stop
        if cut >= 0:
            # keep the shortest prefix of this round's tokens whose text already holds the stop string
            for j in range(1, len(kept) + 1):
                d, _, _ = self._delta(base + kept[:j], seq._prefix_off, seq._read_off, True)
                if self._find_stop(seq.text + d, scanned) >= 0:
                    kept = kept[:j]
                    break
            text, reason = text[:cut], "stop"
        seq.history.extend(kept)
        seq._prefix_off, seq._read_off = prefix_off, read_off
        new_text = text[len(seq.text):] if text.startswith(seq.text) else ""  # a cut: `texts` is authoritative
        seq.text = text
        if reason is not None:
            seq.finish_reason = reason
        return new_text


@dataclass
class RequestContext:
    """What one request brings to a batch: its stop rule (and sampling parameters), decode clock, time budget
    and cancel. Every row of the request points to it (`Sequence.ctx`)."""

    stop: StopRule
    t0: float = 0.0  # perf_counter() when its decoding started (after its prefill)
    time_budget_s: float | None = None  # on its decode clock
    cancel: threading.Event | None = None  # the caller's
    abandoned: threading.Event | None = None  # set when the caller stopped reading the request's events

    @property
    def params(self) -> SamplingParams:
        return self.stop.params

    def halt(self, now: float) -> str | None:
        """Why no round of this request may start at perf_counter() `now`, if one may not."""
        if any(e is not None and e.is_set() for e in (self.cancel, self.abandoned)):
            return "cancelled"
        if self.time_budget_s is not None and now - self.t0 >= self.time_budget_s:
            return "budget"
        return None
