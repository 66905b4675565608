"""Per-sequence bookkeeping: token history, decoded text, stop conditions, counters.

Stop conditions are applied token by token to what a round emits, so a sequence that accepts five
tokens of which the second is EOS keeps exactly the tokens regular decoding would have produced.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from bass.config import SamplingParams
from bass.events import SequenceStats

if TYPE_CHECKING:
    from bass.decode.round import RequestContext


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


def fast_decoder(tokenizer) -> Callable[[list[int]], str]:
    """`tokenizer.decode(ids, skip_special_tokens=True)`, as a function of ids.

    transformers' fast tokenizers decode in Rust, then optionally clean up spaces; the Python layers
    around that cost about three times the decoding itself (13 vs 4 us for a few Qwen tokens), twice
    per sequence and round. Where the clean-up is off and `decode` is transformers' own, the Rust
    decoder is called directly: the same text. Anything else goes through `tokenizer.decode`.
    """
    def slow(ids: list[int]) -> str:
        return tokenizer.decode(ids, skip_special_tokens=True)

    try:
        from transformers.tokenization_utils_base import PreTrainedTokenizerBase
        from transformers.tokenization_utils_fast import PreTrainedTokenizerFast
    except ImportError:
        return slow
    cls, rust = type(tokenizer), getattr(tokenizer, "_tokenizer", None)
    if (rust is None or getattr(tokenizer, "clean_up_tokenization_spaces", True)
            or cls.decode is not PreTrainedTokenizerBase.decode or cls._decode is not PreTrainedTokenizerFast._decode):
        return slow

    def fast(ids: list[int]) -> str:
        return rust.decode(ids, skip_special_tokens=True)

    return fast


class StopRule:
    """Appends emitted tokens to a sequence and decides whether, and why, it finished. With
    `params.ignore_eos` it knows no end-of-text token and no stop string: only the token limit ends a sequence."""

    def __init__(self, tokenizer, eos_ids: Iterable[int], params: SamplingParams):
        self.tokenizer = tokenizer
        self.eos_ids = frozenset() if params.ignore_eos else frozenset(eos_ids)
        self.stop = () if params.ignore_eos else params.stop
        self.params = params
        self._decode_ids = fast_decoder(tokenizer)

    def _decode(self, ids: list[int]) -> str:
        return self._decode_ids(ids)

    def _find_stop(self, text: str, start: int) -> int:
        hits = [i for s in self.stop if (i := text.find(s, max(0, start - len(s) + 1))) >= 0]
        return min(hits) if hits else -1

    def _delta(self, tail: list[int], prefix_off: int, read_off: int, flush: bool) -> tuple[str, int, int]:
        """Text that ids[read_off:] add after ids[:read_off], decoding only from `prefix_off`; the caller
        passes only tail = ids[prefix_off:] (copying the whole generation each round costs O(n)).

        Decoding a few tokens of context with them, and subtracting the context's own text, gives the same
        characters as decoding everything (leading-space rules apply to both alike) at a cost independent
        of the sequence's length. Nothing is returned while the text ends in an incomplete character,
        unless `flush`. Returns (delta, new prefix_off, new read_off).
        """
        context = self._decode(tail[:read_off - prefix_off])
        full = self._decode(tail)
        if len(full) > len(context) and (flush or not full.endswith("\ufffd")):
            return full[len(context):], read_off, prefix_off + len(tail)
        return "", prefix_off, read_off

    def extend(self, seq: Sequence, emitted: list[int]) -> str:
        """Append `emitted` (cut at EOS, stop string or the token limit); return the new text."""
        room = self.params.max_new_tokens - seq.num_generated
        kept = emitted[:room]
        reason = "length" if seq.num_generated + len(kept) >= self.params.max_new_tokens else None
        for j, t in enumerate(kept):
            if t in self.eos_ids:
                kept, reason = kept[:j + 1], "eos"
                break
        base, scanned = seq.history[seq.prompt_len + seq._prefix_off:], len(seq.text)  # generated[prefix_off:]
        delta, prefix_off, read_off = self._delta(base + kept, seq._prefix_off, seq._read_off, reason is not None)
        text = seq.text + delta
        cut = self._find_stop(text, scanned) if self.stop and delta else -1  # no new text, no new stop
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
