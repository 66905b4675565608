"""What a round costs on this device: the cost policy's timing half (`bass.draft_length`, DESIGN.md §7).

Every round is timed: its draft part (propose) and its whole (start of drafting to the end of the round's
bookkeeping). On the CPU with time.perf_counter; on CUDA the host clock around asynchronous launches says
nothing, so the draft part is bracketed by two torch.cuda.Events, read (non-blocking, `query()`) after the
round's own host synchronisation, a round later at worst; no sync is added. The whole round is host time:
with look-ahead, the interval between two rounds' results (`RoundClock`). c_verify(L, B) is the whole
minus the draft part. Under look-ahead the draft's device time overlaps the round before, so that
difference can come out near zero for a single round, and drafting looks cheap to the policy; flooring it
at the plain step's cost was tried and measured worse on the H100 (`bass.draft_length`, Acceptance).

Estimates are EMAs (weight cost_ema) per (L bucket, batch bucket) for c_verify and per batch bucket for
c_draft (draft time / L). The first sample of a bucket may carry one-off costs (CUDA graph capture,
allocator), so the second sample replaces it when lower, and later samples are clipped to 4x the estimate.
Timing noise is one-sided (a capture or a descheduled thread only adds time), so a sample below the
estimate moves it at least half way: an estimate inflated by a late capture recovers in a few rounds, not
dozens, which matters when the inflated cost stops the policy from drafting, and so from timing drafts.

Between measured L buckets c_verify is interpolated linearly; beyond them it is extrapolated with the last
measured slope (never negative). A batch bucket with one measured length borrows the shape of the nearest
bucket with two (scaled to its point), else assumes the prior slope verify_growth · c; one with none
borrows the nearest bucket's curve.
"""

from __future__ import annotations

import bisect
import math
import time
from collections import deque

import numpy as np
import torch

from bass.config import DraftLengthConfig

# Cost buckets. Lengths: exact up to 8, then coarser (the verify cost is smooth in L there).
L_BUCKETS = (0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 28, 32)
B_BUCKETS = (1, 2, 4, 8, 16, 32, 64)


def bucket(n: int, buckets: tuple[int, ...]) -> int:
    """The smallest bucket >= n (the largest bucket for anything beyond)."""
    i = bisect.bisect_left(buckets, n)
    return buckets[min(i, len(buckets) - 1)]



class _Ema:
    """A timing average robust to the one-off first sample of a bucket (graph capture, allocator warm-up)."""

    __slots__ = ("value", "n")

    def __init__(self) -> None:
        self.value, self.n = 0.0, 0

    def add(self, x: float, w: float) -> None:
        """One sample x (seconds), weight w once the estimate has settled."""
        if self.n == 0:
            self.value = x
        elif self.n == 1:
            self.value = min(self.value, x)  # a slow first sample is usually warm-up
        elif x < self.value:  # timing noise is one-sided (captures, descheduling): a low sample is news,
            self.value += max(w, 0.5) * (x - self.value)  # so the estimate falls fast and rises slowly
        else:
            self.value += w * (min(x, 4 * self.value) - self.value)
        self.n += 1


class CostModel:
    """c_verify(L, B) per (L bucket, batch bucket) and c_draft(B) per batch bucket, in seconds."""

    def __init__(self, cfg: DraftLengthConfig):
        self.cfg = cfg
        self.verify_: dict[int, dict[int, _Ema]] = {}  # B bucket -> L bucket -> EMA
        self.draft_: dict[int, _Ema] = {}  # B bucket -> EMA of seconds per draft step

    def observe(self, L: int, B: int, draft_s: float, round_s: float) -> None:
        """One timed round: draft length L, batch B, its draft part and its whole, in seconds."""
        bb, w = bucket(B, B_BUCKETS), self.cfg.cost_ema
        self.verify_.setdefault(bb, {}).setdefault(bucket(L, L_BUCKETS), _Ema()).add(max(0.0, round_s - draft_s), w)
        if L > 0:
            self.draft_.setdefault(bb, _Ema()).add(max(0.0, draft_s) / L, w)

    @staticmethod
    def _nearest(table: dict, bb: int):
        """The entry of the batch bucket closest to bb (in log2), or None if there is none."""
        if not table:
            return None
        return table[min(table, key=lambda k: (abs(math.log2(k) - math.log2(bb)), k))]

    def _row_curve(self, row: dict[int, _Ema], l_max: int) -> np.ndarray:
        """Piecewise-linear c_verify over 0 .. l_max from one batch bucket's measured L buckets (>= 2)."""
        xs = sorted(row)
        ys = [row[x].value for x in xs]
        Ls = np.arange(l_max + 1, dtype=np.float64)
        curve = np.interp(Ls, xs, ys)  # a measurement stands for its bucket's top length
        slope_hi = max(0.0, (ys[-1] - ys[-2]) / (xs[-1] - xs[-2]))  # never negative: noise must not
        slope_lo = max(0.0, (ys[1] - ys[0]) / (xs[1] - xs[0]))  # make long drafts look free
        hi, lo = Ls > xs[-1], Ls < xs[0]
        curve[hi] = ys[-1] + slope_hi * (Ls[hi] - xs[-1])
        curve[lo] = np.maximum(ys[0] - slope_lo * (xs[0] - Ls[lo]), 0.5 * ys[0])
        return curve

    def verify_curve(self, B: int, l_max: int) -> np.ndarray | None:
        """[l_max + 1] predicted c_verify(L, B), or None before any measurement.

        A batch bucket with one measured length borrows the shape of the nearest bucket with two or more
        (scaled to its own point), else assumes the prior growth; one with none borrows the nearest's.
        """
        bb = bucket(B, B_BUCKETS)
        row = self.verify_.get(bb) or self._nearest(self.verify_, bb)
        if not row:
            return None
        if len(row) >= 2:
            return self._row_curve(row, l_max)
        (x, e), = row.items()
        shaped = {b: r for b, r in self.verify_.items() if len(r) >= 2}
        if shaped:
            other = self._row_curve(self._nearest(shaped, bb), l_max)
            return other * (e.value / other[min(x, l_max)])
        return e.value * (1 + self.cfg.verify_growth * (np.arange(l_max + 1) - x)).clip(min=0.5)

    def samples(self, L: int, B: int) -> int:
        """How many rounds were timed in the (L, B) bucket."""
        e = self.verify_.get(bucket(B, B_BUCKETS), {}).get(bucket(L, L_BUCKETS))
        return 0 if e is None else e.n

    def known(self, B: int) -> bool:
        """Whether B's batch bucket has what the probes measure: plain decoding and a draft length, twice each."""
        row = self.verify_.get(bucket(B, B_BUCKETS), {})
        return 0 in row and row[0].n >= 2 and any(L > 0 and e.n >= 2 for L, e in row.items())

    def draft_step(self, B: int) -> float | None:
        """Predicted c_draft(B), or None before any drafting round was timed."""
        e = self._nearest(self.draft_, bucket(B, B_BUCKETS))
        return None if e is None else e.value

    def describe(self) -> dict:
        """Measured costs in milliseconds: {"verify_ms": {B: {L: ms}}, "draft_step_ms": {B: ms}}."""
        return {"verify_ms": {b: {L: round(e.value * 1e3, 4) for L, e in sorted(r.items())}
                              for b, r in sorted(self.verify_.items())},
                "draft_step_ms": {b: round(e.value * 1e3, 4) for b, e in sorted(self.draft_.items())}}


class RoundClock:
    """Times each round's draft part and whole without adding a host synchronisation.

    CPU: time.perf_counter. CUDA: the draft part between two events, read once `query()` says they are
    done, which the round's own sync guarantees by its end (so at worst a round later).

    Rounds may overlap: the round loop may launch a round before it reads the round before
    (`bass.speculative`, look-ahead). Rounds end in the order they start, and a round's whole time runs
    from its start or the previous round's end, whichever is later: in a pipelined run of rounds that is
    the interval between results, what a round costs once the pipeline is full.
    """

    def __init__(self, device: torch.device | str = "cpu"):
        self.cuda = torch.device(device).type == "cuda"
        self._open: deque = deque()  # started rounds: [t0, t1, ev0, ev1]
        self._pending: deque = deque()  # ended CUDA rounds whose events are not read yet
        self._last_end: float | None = None

    def start(self) -> None:
        """A round starts drafting."""
        t0, ev0 = time.perf_counter(), None  # the host clock first: the round's whole holds its draft part
        if self.cuda:
            ev0 = torch.cuda.Event(enable_timing=True)
            ev0.record()
        self._open.append([t0, None, ev0, None])

    def restart(self) -> None:
        """The round started last, decided early, starts only now."""
        if self._open:
            self._open.pop()
            self.start()

    def drafted(self) -> None:
        """The round's proposals are made: the draft part ends here."""
        if not self._open:  # no round being timed (regular decoding never starts one): record nothing
            return
        if self.cuda:
            self._open[-1][3] = torch.cuda.Event(enable_timing=True)
            self._open[-1][3].record()
        else:
            self._open[-1][1] = time.perf_counter()

    def stop(self, key) -> list[tuple]:
        """End the oldest open round, tagged `key`; return [(key, draft_s, round_s)] for every round whose
        timing is ready."""
        if not self._open:
            return []
        end = time.perf_counter()
        t0, t1, ev0, ev1 = self._open.popleft()
        round_s = end - (t0 if self._last_end is None else max(t0, self._last_end))
        self._last_end = end
        if not self.cuda:
            return [(key, (t1 if t1 is not None else t0) - t0, round_s)]
        self._pending.append((key, ev0, ev1 or ev0, round_s))
        ready = []
        while self._pending and self._pending[0][2].query():  # non-blocking: done events only
            k, e0, e1, r = self._pending.popleft()
            ready.append((k, e0.elapsed_time(e1) / 1e3, r))
        return ready
