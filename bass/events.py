"""What the engine emits: one `GenerationEvent` per round while streaming, a `GenerationResult` at the end.

These are the only engine objects the UI consumes (docs/design.md §6). Sequence index `seq` is
`prompt_index * k + sample_index` and never changes, even after other sequences leave the batch.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

# A round whose host time is this far over its generation's median is a host stall (`BatchStats.host_stalls`):
# a round's own host work on the H100 is 0.4-1.1 ms at the median (its bookkeeping and launches, the device running
# ahead) and under 2.2 ms in 99 % of rounds; the stalls seen there took 5-20 ms (`python -m bench.real_bench`
# reports each pass's stalls on CUDA)
STALL_S = 0.004

# Finish reasons of a sequence that ended by itself; "budget" and "cancelled" are cut short (docs/design.md §5).
FINISHED_IN_TIME = ("eos", "stop", "length")


@dataclass(frozen=True)
class SequenceUpdate:
    """What one sequence did in one round."""

    seq: int
    new_token_ids: tuple[int, ...]
    new_text: str  # decoded text appended this round (stop strings already cut off)
    proposed: int  # draft tokens proposed to it this round
    accepted: int  # of those, accepted by the target
    finished: bool
    finish_reason: str | None = None  # "eos" | "stop" | "length" | "budget" | "cancelled"


@dataclass(frozen=True)
class SequenceStats:
    """The metrics (docs/design.md §5) of one sequence."""

    tokens: int
    rounds: int
    proposed: int
    accepted: int
    finish_time_s: float  # since decoding started (after prefill)

    @property
    def acceptance_rate(self) -> float:
        """Accepted draft tokens / proposed draft tokens (0 when nothing was proposed)."""
        return self.accepted / self.proposed if self.proposed else 0.0

    @property
    def tokens_per_round(self) -> float:
        """Tokens emitted per verify pass, bonus included (the first token comes from the prefill)."""
        return (self.tokens - 1) / self.rounds if self.rounds else 0.0

    @property
    def ms_per_token(self) -> float:
        """Per-sequence latency: time to this sequence's finish / its generated tokens."""
        return 1000.0 * self.finish_time_s / self.tokens if self.tokens else 0.0

    def to_dict(self) -> dict:
        return {"tokens": self.tokens, "rounds": self.rounds, "proposed": self.proposed,
                "accepted": self.accepted, "acceptance_rate": self.acceptance_rate,
                "tokens_per_round": self.tokens_per_round, "ms_per_token": self.ms_per_token,
                "finish_time_s": self.finish_time_s}


@dataclass(frozen=True)
class Candidate:
    prompt_index: int
    sample_index: int
    text: str
    token_ids: tuple[int, ...]  # generated ids only, prompt excluded
    finish_reason: str
    stats: SequenceStats

    @property
    def finished_in_time(self) -> bool:
        """It ended by itself (EOS, stop string, token limit), not cut by the time budget or a cancel."""
        return self.finish_reason in FINISHED_IN_TIME

    @property
    def has_rate(self) -> bool:
        """Whether its ms/token means anything: all but a sequence cut (cancel, time budget) before its first round.
        Such a sequence holds only its prefill's token at the time of the cut: single-sequence decoding stopped at
        the first pass never starts the candidates after the one that passed, and each read its wait over that one
        token (16,146 ms/token for the method in one CPU run, from 457 for the candidate that ran to 21,524)."""
        return self.finished_in_time or self.stats.rounds > 0

    @property
    def finish_time_or_none(self) -> float | None:
        """Its finish time if it finished in time, else None: the input of Pass@First / Pass@All."""
        return self.stats.finish_time_s if self.finished_in_time else None

    def to_dict(self) -> dict:
        return {"prompt_index": self.prompt_index, "sample_index": self.sample_index, "text": self.text,
                "token_ids": list(self.token_ids), "finish_reason": self.finish_reason,
                "stats": self.stats.to_dict()}


@dataclass(frozen=True)
class BatchStats:
    """The metrics (docs/design.md §5) of the whole batch."""

    method: str
    drafter: str | None
    backend: str
    num_sequences: int
    prefill_s: float
    decode_s: float
    tokens: int
    rounds: int
    proposed: int
    accepted: int
    mean_ms_per_token: float  # the paper's headline: mean over sequences of per-sequence latency
    draft_lengths: tuple[int, ...] = ()  # draft length used in each round
    round_ends_s: tuple[float, ...] = ()  # when each round's results were read, on the decode clock
    round_waits_s: tuple[float, ...] = ()  # how long the host waited for the device to finish each (CUDA)
    # what the draft-length policy measured and decided (`DraftLengthPolicy.describe`); None for "single"
    policy: dict | None = field(default=None, compare=False)

    @property
    def throughput_tok_s(self) -> float:
        return self.tokens / self.decode_s if self.decode_s > 0 else 0.0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.proposed if self.proposed else 0.0

    @property
    def tokens_per_round(self) -> float:
        """Tokens emitted per sequence per verify pass (the prefill's first token left out)."""
        return (self.tokens - self.num_sequences) / self.rounds if self.rounds else 0.0

    def host_stalls(self, over_s: float = STALL_S) -> tuple[int, float] | None:
        """(rounds, seconds): the rounds whose host time exceeded the generation's median by more than `over_s`,
        and what they took beyond that median. A round's host time is its interval since the round before it
        was read, less the time the host then waited for the device: its bookkeeping and launches, which the
        device overlaps while they stay shorter than its work. A round far over the median is the host held up
        (descheduled, say), and the device idles for the difference. None where the host never waited (the CPU,
        whose rounds run as they are launched) or there are fewer than three rounds."""
        if len(self.round_ends_s) < 3 or not any(self.round_waits_s):
            return None
        host = [b - a - w for a, b, w in zip(self.round_ends_s, self.round_ends_s[1:], self.round_waits_s[1:],
                                              strict=False)]
        typical = statistics.median(host)
        over = [h - typical for h in host if h - typical > over_s]
        return len(over), sum(over)

    def to_dict(self) -> dict:
        return {"method": self.method, "drafter": self.drafter, "backend": self.backend,
                "num_sequences": self.num_sequences, "prefill_s": self.prefill_s, "decode_s": self.decode_s,
                "tokens": self.tokens, "rounds": self.rounds, "proposed": self.proposed,
                "accepted": self.accepted, "acceptance_rate": self.acceptance_rate,
                "tokens_per_round": self.tokens_per_round, "throughput_tok_s": self.throughput_tok_s,
                "mean_ms_per_token": self.mean_ms_per_token, "draft_lengths": list(self.draft_lengths),
                "round_ends_s": list(self.round_ends_s), "round_waits_s": list(self.round_waits_s),
                "policy": self.policy}


@dataclass(frozen=True)
class GenerationResult:
    candidates: tuple[Candidate, ...]
    stats: BatchStats

    @property
    def token_ids(self) -> list[tuple[int, ...]]:
        """Each candidate's generated ids, in engine order: what greedy exactness compares."""
        return [c.token_ids for c in self.candidates]

    def to_dict(self) -> dict:
        return {"candidates": [c.to_dict() for c in self.candidates], "stats": self.stats.to_dict()}


@dataclass(frozen=True)
class GenerationEvent:
    """One step of a streamed generation.

    kind "queued": the request waits for room in the running batch (`queue_position`, 1 = next, and
    `wait_estimate_s`; `time_s` is the time waited so far); "prefilling": a long prompt is being encoded a chunk
    at a time (`prefilled`: tokens done, of all; `time_s` since it began); "prefill": the prompts are encoded
    (updates empty); "round": one draft+verify round (or one decode step for method="regular"); "done": generation
    ended and `result` is set.
    """

    kind: str
    round: int
    time_s: float  # since decoding started (prefill time for "prefill")
    draft_length: int
    updates: tuple[SequenceUpdate, ...] = ()
    texts: tuple[str, ...] = ()  # full text so far of every sequence, by seq index
    result: GenerationResult | None = field(default=None)
    # "round": seconds since decoding started, read by the time-budget check just before this round began
    # (the round ran because started_s < time_budget_s - prefill_s); None for the prefill's first tokens,
    # which no budget check precedes
    started_s: float | None = None
    queue_position: int | None = None  # "queued": the request's place in line, 1 = next to join
    prefilled: tuple[int, int] | None = None  # "prefilling": (prompt tokens in the cache, of all its prompts')
    wait_estimate_s: float | None = None  # "queued": the expected wait before it starts, when one is known
