"""What a round costs on this device: the cost policy's timing half (`bass.draft_length`, DESIGN.md §7).

The policy needs c(L, B), what one round of draft length L costs at batch B, drafting, verifying and
bookkeeping included. It is measured whole, with the host clock, and never split: every round is timed from
its start to the end of its bookkeeping, and with look-ahead (rounds overlapping on the device) a round's
time runs from the previous round's end instead, the interval between two rounds' results, which is what
a round costs once the pipeline is full (`RoundClock`). No event and no host synchronisation is added.
A round during which a CUDA graph was captured (`bass.graphs.captures`: a shape that no wider batch's graph
can run, such as a draft width first drafted, captures its own the first time it runs, mid-run) is no sample.

An earlier version split the round into a draft part, timed on the device between two CUDA events, and
the rest (c_verify = whole − draft). Under look-ahead that split is wrong in both halves: a draft step's
device time (about 0.5 ms at batch 8 on the H100) is not what it adds to a host-bound round (about 1 ms),
and the rest came out as noise, L = 1 dearer than L = 2 (`real_bench_2026-11-23_h100_vocab.json`,
`policy_state`). The policy chose L ≈ 2 where fixed L = 1 took 11 % less time per token.

Each (L bucket, batch bucket) keeps its last cost_window samples and estimates their lower quartile
(cost_quantile; the lower of the first two while there are only two: a bucket's first round may carry
one-off costs, a CUDA graph capture or the allocator). What else runs on the device or the host only ever
slows a round, so its time is the round's own cost plus a one-sided noise, and a low quantile is where the
own cost shows. A quartile ignores a late capture or a descheduled thread, where a mean would carry it for
many rounds, and a slow stretch of up to three quarters of the window; it follows a real fall within a
quarter of a window and a real rise within three quarters. The median did worse on an H100 at k = 8: in one
request rounds of every length ran slow for about twenty rounds (L = 3 at 3.2–8.0 ms against its 2.2, L = 7
at 4.7–17), by the end of the run the median of L = 3's window read 2.69 ms, above L = 4's 2.50 and L = 5's
2.63, and the policy drafted L = 4 to 7 in most rounds (mean L 4.3): 1.04 ms/token/seq against 0.93 for fixed
L = 3 in the same run (`real_bench_2026-11-26_h100v_median.json`, the first cost-policy row's `policy_state`
and `traces`). With the quartile, two runs on another H100 read 0.97 and 0.93 against fixed L = 3's 0.98 and
0.92 (`real_bench_2026-11-26_h100w_quartile*.json`), and on two more 0.92 and 0.95 against 0.89 and 0.90, their
costs sane and their drafts longer than L = 3 (`real_bench_2026-11-26_h100{x,y}_quartile*.json`): the quartile
mends the estimate of what a round costs, not the acceptance model's choice of length.

A window fills at the pace its length runs, so a length the policy seldom runs keeps samples from long
ago. When a new sample arrives, the ones more than cost_horizon timed rounds (of any length) older are
dropped, down to its two newest: the estimate of a seldom-run length is then what its last few probes
read. Without the horizon, an H100 run at k = 8 kept L = 1 .. 3 at 2.60 / 2.90 / 2.77 ms from an early,
slow stretch while a probe read L = 3 at 2.40; the flattened curve made L = 4 and 5 look nearly free and
the policy drafted them (1.42x regular where fixed L = 3 made 1.62x, `real_bench_2026-11-25_h100_lookahead
.json`, the look-ahead pair's `policy_state` and `traces`).

A longer draft never makes a round cheaper, so the curve is fitted monotone: the measured buckets are
pooled where they decrease (pool-adjacent-violators, weighted by their sample counts), interpolated
linearly between them and extrapolated with the last slope. A draft token never costs less than
draft_cost_floor of a plain step, lest a flat fit of noisy points make long drafts look free. A batch
bucket with one measured length borrows the shape of the nearest bucket with two or more, scaled to its
point; with none, the nearest bucket's curve. Before any bucket has two lengths the curve is unknown
(the policy probes).

Staleness. A length the policy stopped running keeps its last two samples however old they are, and the
policy probes only lengths that could win (`bass.draft_length`), so a length that once timed dear is never
timed again: its estimate stands for the engine's lifetime. On an H100 at k = 8 a cost-policy memory held L = 2
and 3 at 3.91 and 4.09 ms from rounds before its timed passes (warm-up or first rounds), while its own rounds at
L = 4 .. 8 read 2.53-3.20 and other rows read L = 3 at 2.23; the policy drafted L = 7 at B = 8 for the whole of
two rows, 0.96-0.97 ms/token/seq against 0.93 for the row before them at L = 3
(`real_bench_2026-11-26_h100o_launchtrim.json`, the look-ahead pair's and chained rows' `policy_state` and
`traces`). So a drafting length with no sample within the horizon, shorter than one timed since, leaves the
fit, and the curve through the lengths timed since stands for it, until the policy runs or probes it again.
Plain decoding always stays in (its estimate anchors the curve, and the policy times it whenever drafting's
lead narrows), and so do stale lengths past the longest fresh one: left out, they would leave the curve to an
extrapolation of the last fresh slope, which made long drafts look cheap enough to probe again every horizon
(widths no graph was warmed for, captured inside an H100 run's timed passes, `real_bench_2026-11-26_h100q_staleness.*`).
A bucket with fewer than two lengths left keeps all of them.

The estimate of a length the policy seldom runs is as old as its samples, so the policy's exploration
(`bass.draft_length`) keeps timing the lengths beside its choice and plain decoding. Before the window
and that exploration, the H100 showed what a stale estimate does (`real_bench_2026-11-23_h100_whole*.json`,
`policy_state`): plain decoding at batch 32 stayed at 6.9 ms, from its two probes, against 2.8 ms measured by
regular decoding; pooled with L = 1 by the monotone fit, it made L = 1 look dear, and at k = 32 the policy
drafted L ≈ 2 where fixed L = 1 took 12 % less time per token. The estimate then also fell fast and rose
slowly (an asymmetric average), which sat in the low tail of a length's noisy costs: the lengths run
often looked cheaper than the lengths probed.
"""

from __future__ import annotations

import bisect
import math
import time
from collections import deque

import numpy as np

from bass.config import DraftLengthConfig
from bass.graphs import captures

# A drafting round timed at more than this many times (1 + L) plain steps of its batch bucket is taken for a
# one-off (a kernel compiled or a graph captured inside it): the first such round of a bucket is dropped, not
# sampled; a second one is sampled, since a drafter that slow is slow for real. One
# such round, 2.6 s at L = 2 against 2 ms plain steps (a compile), was the only sample of its length when
# the policy judged drafting hopeless, and it decoded plainly for the rest of an H100 run (0.95x regular,
# `real_bench_2026-11-24_h100_splits.json`). The slowest steady drafting round seen, n-gram L = 1 at batch
# 32 with its pipeline broken, cost 2.5 plain steps; a layer-skip draft of L costs about 1 + L/2.
OUTLIER_RATIO = 4.0

# Cost buckets. Lengths: exact up to 8, then coarser (a round's cost is smooth in L there).
L_BUCKETS = (0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 28, 32)
B_BUCKETS = (1, 2, 4, 8, 16, 32, 64)


def bucket(n: int, buckets: tuple[int, ...]) -> int:
    """The smallest bucket >= n (the largest bucket for anything beyond)."""
    i = bisect.bisect_left(buckets, n)
    return buckets[min(i, len(buckets) - 1)]



class _Window:
    """A bucket's timing estimate: the q-quantile of its last `size` samples within the horizon (at least its
    two newest), the lower of the two while there are only two (module docstring). Kept up to date on `add`:
    the policy reads it every round."""

    __slots__ = ("samples", "n", "value", "q")

    def __init__(self, size: int, q: float = 0.5) -> None:
        self.samples: deque[tuple[int, float]] = deque(maxlen=size)  # (timed round, seconds), oldest first
        self.n, self.value = 0, 0.0  # samples ever added; the estimate (seconds)
        self.q = q  # which quantile (DraftLengthConfig.cost_quantile)

    def add(self, x: float, now: int, horizon: int) -> bool:
        """One sample x (seconds) taken at timed round `now`; whether the estimate changed."""
        self.samples.append((now, x))
        while len(self.samples) > 2 and now - self.samples[0][0] >= horizon:
            self.samples.popleft()
        self.n += 1
        before = self.value
        xs = [v for _, v in self.samples]
        self.value = min(xs) if len(xs) <= 2 else quantile(xs, self.q)
        return self.n == 1 or self.value != before

    @property
    def weight(self) -> int:
        """How many samples the estimate stands on (the monotone fit's weight)."""
        return len(self.samples)

    @property
    def newest(self) -> int:
        """The timed round of its newest sample."""
        return self.samples[-1][0]


def quantile(xs: list[float], q: float) -> float:
    """The q-quantile of xs, linear between order statistics (NumPy's default; q = 0.5: the median): x at
    position q · (n − 1) of the sorted xs. Written out because `np.quantile` costs about 100 µs a call on a
    2-core host, against 1-2 µs here, and the policy pays it on every round's bookkeeping."""
    xs = sorted(xs)
    pos = q * (len(xs) - 1)
    i = min(int(pos), len(xs) - 2)
    return xs[i] + (pos - i) * (xs[i + 1] - xs[i])


def monotone_fit(xs: list[int], ys: list[float], weights: list[float]) -> list[float]:
    """The non-decreasing sequence closest to ys in weighted least squares (pool-adjacent-violators): a
    run of values that decreases is replaced by its weighted mean. xs only orders the points."""
    blocks: list[list[float]] = []  # [mean, weight, count]
    for _, y, w in sorted(zip(xs, ys, weights, strict=True)):
        blocks.append([y, max(w, 1e-9), 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            (m1, w1, n1), (m2, w2, n2) = blocks.pop(-2), blocks.pop()
            blocks.append([(m1 * w1 + m2 * w2) / (w1 + w2), w1 + w2, n1 + n2])
    return [m for m, _, n in blocks for _ in range(n)]


class CostModel:
    """c(L, B): what a round of draft length L costs at batch B, in seconds, per (L bucket, batch bucket)."""

    def __init__(self, cfg: DraftLengthConfig):
        self.cfg = cfg
        self.round_: dict[int, dict[int, _Window]] = {}  # B bucket -> L bucket -> samples
        self.dropped = 0  # rounds not sampled: outliers (`OUTLIER_RATIO`)
        self.timed = 0  # rounds sampled so far, every bucket: the clock of the horizon
        self._held: set[tuple[int, int]] = set()  # the (B, L) buckets that dropped theirs
        self._expires = math.inf  # the timed round at which the next drafting length goes stale (Staleness)
        # the policy asks for a curve every round, on the host's critical path; an estimate often stays put
        self._version = 0  # bumped whenever an estimate changes
        self._curves: dict[tuple[int, int], tuple[int, np.ndarray | None]] = {}  # (B bucket, l_max) -> fit

    def observe(self, L: int, B: int, round_s: float) -> None:
        """One timed round: draft length L, batch B, its whole time in seconds (dropped if an outlier:
        `OUTLIER_RATIO`)."""
        bb, lb = bucket(B, B_BUCKETS), bucket(L, L_BUCKETS)
        row = self.round_.setdefault(bb, {})
        plain = row.get(0)
        outlier = L > 0 and plain is not None and round_s > OUTLIER_RATIO * (1 + L) * plain.value
        if outlier and (bb, lb) not in self._held:
            self._held.add((bb, lb))
            self.dropped += 1
            return
        self.timed += 1
        window = row.get(lb)
        if window is None:  # (not setdefault: that would build a window on every round)
            window = row[lb] = _Window(self.cfg.cost_window, self.cfg.cost_quantile)
        if window.add(max(0.0, round_s), self.timed, self.cfg.cost_horizon):
            self._version += 1
        if lb > 0:
            self._expires = min(self._expires, self.timed + self.cfg.cost_horizon)
        if self.timed >= self._expires:  # a length left the fit: its curves are fitted again
            self._version += 1
            self._expires = min((w.newest + self.cfg.cost_horizon for r in self.round_.values()
                                 for n, w in r.items() if n > 0 and w.newest + self.cfg.cost_horizon > self.timed),
                                default=math.inf)

    @staticmethod
    def _nearest(table: dict, bb: int):
        """The entry of the batch bucket closest to bb (in log2), or None if there is none."""
        if not table:
            return None
        return table[min(table, key=lambda k: (abs(math.log2(k) - math.log2(bb)), k))]

    def _fresh(self, row: dict[int, _Window]) -> dict[int, _Window]:
        """A batch bucket's L buckets the fit stands on: plain decoding, each drafting length timed within the
        horizon, and the stale ones past the longest of those; every one while fewer than two would be left
        (module docstring, Staleness)."""
        recent = [n for n, w in row.items() if n > 0 and not self._stale(w)]
        longest = max(recent, default=0)
        fresh = {n: w for n, w in row.items() if n == 0 or n in recent or n > longest}  # n: a draft length
        return fresh if len(fresh) >= 2 else row

    def _row_curve(self, row: dict[int, _Window], l_max: int) -> np.ndarray:
        """c over 0 .. l_max from one batch bucket's measured L buckets (>= 2), those gone stale left out:
        monotone, piecewise linear, at least c(0) · (1 + draft_cost_floor · L)."""
        row = self._fresh(row)
        xs = sorted(row)
        ys = monotone_fit(xs, [row[x].value for x in xs], [row[x].weight for x in xs])
        Ls = np.arange(l_max + 1, dtype=np.float64)
        curve = np.interp(Ls, xs, ys)  # a measurement stands for its bucket's top length
        hi, lo = Ls > xs[-1], Ls < xs[0]
        slope_hi = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])  # >= 0 after the fit
        slope_lo = (ys[1] - ys[0]) / (xs[1] - xs[0])
        curve[hi] = ys[-1] + slope_hi * (Ls[hi] - xs[-1])
        curve[lo] = np.maximum(ys[0] - slope_lo * (xs[0] - Ls[lo]), 0.5 * ys[0])
        # noise may pool every point into a flat fit: drafts are never free, or the argmax runs to l_limit
        return np.maximum(curve, curve[0] * (1 + self.cfg.draft_cost_floor * Ls))

    def round_curve(self, B: int, l_max: int) -> np.ndarray | None:
        """[l_max + 1] predicted c(L, B) for L = 0 .. l_max, or None while no batch bucket has two lengths
        measured (module docstring). Fitted again only when an estimate has changed."""
        key = (bucket(B, B_BUCKETS), l_max)
        version, curve = self._curves.get(key, (-1, None))
        if version != self._version:
            curve = self._fit(B, l_max)
            if curve is not None:
                curve.flags.writeable = False  # shared by the rounds until the next change
            self._curves[key] = (self._version, curve)
        return curve

    def _fit(self, B: int, l_max: int) -> np.ndarray | None:
        shaped = {b: r for b, r in self.round_.items() if len(r) >= 2}
        if not shaped:
            return None
        bb = bucket(B, B_BUCKETS)
        row = self.round_.get(bb)
        if row and len(row) >= 2:
            return self._row_curve(row, l_max)
        other = self._row_curve(self._nearest(shaped, bb), l_max)
        if not row:
            return other
        (x, e), = row.items()
        return other * (e.value / other[min(x, l_max)])

    def _window(self, L: int, B: int) -> _Window | None:
        return self.round_.get(bucket(B, B_BUCKETS), {}).get(bucket(L, L_BUCKETS))

    def _stale(self, w: _Window) -> bool:
        return self.timed - w.newest >= self.cfg.cost_horizon

    def samples(self, L: int, B: int) -> int:
        """How many rounds were timed in the (L, B) bucket."""
        e = self._window(L, B)
        return 0 if e is None else e.n

    def stale(self, L: int, B: int) -> bool:
        """Whether the (L, B) bucket was timed, but not within the last cost_horizon timed rounds (Staleness)."""
        e = self._window(L, B)
        return e is not None and self._stale(e)

    def reach(self, B: int) -> int:
        """The longest length timed at B's batch bucket, or at the nearest bucket that timed any (0: none)."""
        row = self.round_.get(bucket(B, B_BUCKETS)) or self._nearest(self.round_, bucket(B, B_BUCKETS)) or {}
        return max(row, default=0)

    def known(self, B: int) -> bool:
        """Whether B's batch bucket has what the probes measure: plain decoding and a draft length, twice each."""
        row = self.round_.get(bucket(B, B_BUCKETS), {})
        return 0 in row and row[0].n >= 2 and any(L > 0 and e.n >= 2 for L, e in row.items())

    def describe(self) -> dict:
        """Measured costs in milliseconds: {"round_ms": {B: {L: ms}}}."""
        return {"round_ms": {b: {L: round(e.value * 1e3, 4) for L, e in sorted(r.items())}
                             for b, r in sorted(self.round_.items())}, "dropped": self.dropped}


class RoundClock:
    """Times each round whole, with the host clock, without adding a host synchronisation.

    Rounds may overlap: the round loop may launch a round before it reads the round before
    (`bass.pipeline`, look-ahead). Rounds end in the order they start, and a round's time runs from its
    start or the previous round's end, whichever is later: in a pipelined run of rounds that is the
    interval between results, what a round costs once the pipeline is full.
    """

    def __init__(self) -> None:
        self._open: deque[tuple[float, int]] = deque()  # (start time, graphs captured) of the rounds not ended
        self._last_end: float | None = None
        self.captured = False  # whether the round `stop` ended last saw a CUDA graph captured
        self.overlapped = False  # whether it started before the round before it ended (a pipelined round)

    def start(self) -> None:
        """A round starts (its draft lengths are decided)."""
        self._open.append((time.perf_counter(), captures()))

    def restart(self) -> None:
        """The round started last, decided early, starts only now."""
        if self._open:
            self._open[-1] = (time.perf_counter(), self._open[-1][1])

    def stop(self) -> float | None:
        """End the oldest open round; return its time in seconds (None if no round was started: regular
        decoding never starts one), and set `captured`: a graph captured while it ran (its own, or a
        round's launched ahead of it) makes its time no cost sample."""
        if not self._open:
            return None
        end, (t0, before) = time.perf_counter(), self._open.popleft()
        self.overlapped = self._last_end is not None and t0 < self._last_end
        round_s = end - (max(t0, self._last_end) if self.overlapped else t0)
        self._last_end, self.captured = end, captures() != before
        return round_s
