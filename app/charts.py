"""Engine events → chart data. Pure bookkeeping over `GenerationEvent`s; no engine maths.

`LiveRun` accumulates what the live view shows while a generation streams: every sequence's text,
token count and finish state, plus the rows of the two live charts. The charts are long-format
DataFrames, one row per (point, sequence), which is what `gr.LinePlot(x=..., y=..., color=...)` wants.

Speed is plotted as each sequence's *average* rate since decoding started, tokens so far / elapsed
time: a per-round rate jumps between 0 and a burst on every accepted draft, while the average settles
on exactly 1000 / (ms/token) of docs/design.md §5 when the sequence finishes, so chart and table agree.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import pandas as pd

from bass.events import GenerationEvent

SPEED_COLUMNS = ("time (s)", "tokens/s", "sequence")
ACCEPT_COLUMNS = ("round", "accepted tokens", "sequence")
DRAFT_LENGTH_SERIES = "draft length L"


# One colour per sequence for the whole run, the same in both charts and on the cards' swatches: the plot's own
# palette assigned colours by the order series appeared, so "seq 03" changed colour as others joined. Greys are
# kept out of it: grey is the draft length's, which is a setting of the round, not a sequence.
SEQ_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#bcbd22",
               "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2")
DRAFT_LENGTH_COLOUR = "#6b7280"
CHART_HEIGHT, LEGEND_ROW_PX = 260, 19  # a legend entry's height in the plot's default font
# An integer format makes the plot tick whole rounds only, however few rounds ran (otherwise 0.5, 1.5 …)
ROUND_AXIS_FORMAT = "d"


def seq_colour(seq: int) -> str:
    return SEQ_COLOURS[seq % len(SEQ_COLOURS)]


@dataclass(frozen=True)
class ChartLook:
    """How one live chart is drawn: fixed colours, axes from 0, a height whose legend holds every series."""

    color_map: dict[str, str]
    legend: list[str]
    y_lim: list[float]
    x_lim: list[float] | None
    height: int
    x_format: str | None = None


def chart_look(frame: pd.DataFrame, k: int, x_is_round: bool = False, y_column: int = 1) -> ChartLook:
    """`frame`'s series get their sequence's colour (the draft length its grey); y spans [0, 1.1 max]; a round
    axis spans the rounds that ran (at least one), ticked at whole rounds; the height grows with k so that the
    legend (k sequences and the draft length, one entry a row) is never cut."""
    colours = {seq_label(s): seq_colour(s) for s in range(k)}
    colours[DRAFT_LENGTH_SERIES] = DRAFT_LENGTH_COLOUR
    top = float(frame.iloc[:, y_column].max()) if len(frame) else 0.0
    x_lim, x_format = None, None
    if x_is_round:
        last = float(frame.iloc[:, 0].max()) if len(frame) else 0.0
        x_lim, x_format = [0.0, max(1.0, last)], ROUND_AXIS_FORMAT
    height = max(CHART_HEIGHT, 90 + LEGEND_ROW_PX * (k + 1))
    return ChartLook(color_map=colours, legend=series_of(frame), y_lim=[0.0, top * 1.1 if top > 0 else 1.0],
                     x_lim=x_lim, height=height, x_format=x_format)


def seq_label(seq: int) -> str:
    """Chart/legend name of a sequence; zero-padded so that legends sort 01, 02, ... 10, not 1, 10, 2."""
    return f"seq {seq:02d}"


@dataclass
class LiveRun:
    """State of one streamed generation as the UI sees it, built only from events."""

    k: int
    texts: list[str] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    proposed: list[int] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)
    finish_reasons: list[str | None] = field(default_factory=list)
    finish_times: list[float | None] = field(default_factory=list)
    speed_rows: list[tuple[float, float, str]] = field(default_factory=list)
    accept_rows: list[tuple[int, int, str]] = field(default_factory=list)
    # per sequence, (accepted, proposed) of every round in which it was given a draft: the card's sparkline
    per_round: list[list[tuple[int, int]]] = field(default_factory=list)
    phase: str = "waiting"  # waiting | queued | prefilling | decoding | done
    prefilled: tuple[int, int] | None = None  # "prefilling": (prompt tokens read, of all of them)
    round: int = 0
    time_s: float = 0.0
    prefill_s: float = 0.0
    draft_length: int = 0

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ValueError(f"k must be >= 1, got {self.k}")
        n = self.k
        self.texts = self.texts or [""] * n
        self.tokens = self.tokens or [0] * n
        self.proposed = self.proposed or [0] * n
        self.accepted = self.accepted or [0] * n
        self.finish_reasons = self.finish_reasons or [None] * n
        self.finish_times = self.finish_times or [None] * n
        self.per_round = self.per_round or [[] for _ in range(n)]

    def add(self, event: GenerationEvent) -> None:
        """Fold one event into the state (events must arrive in stream order)."""
        if event.kind == "queued":  # waiting in the engine's line: nothing decoded yet
            self.phase = "queued"
            return
        if event.kind == "prefilling":  # a long prompt read a chunk at a time, beside the other visitors' rounds
            self.phase, self.prefilled, self.time_s = "prefilling", event.prefilled, event.time_s
            return
        if event.kind == "prefill":
            self.phase, self.prefill_s = "decoding", event.time_s
            self.draft_length = event.draft_length
            return
        if event.kind == "done":
            self.phase = "done"
            if event.result is not None:
                self._take_result_texts(event)
            return
        self.phase, self.round, self.time_s = "decoding", event.round, event.time_s
        self.draft_length = event.draft_length
        for update in event.updates:
            s = update.seq
            if not 0 <= s < self.k:
                continue  # a malformed event must not take the live view down
            self.tokens[s] += len(update.new_token_ids)
            self.proposed[s] += update.proposed
            self.accepted[s] += update.accepted
            if update.finished and self.finish_reasons[s] is None:
                self.finish_reasons[s] = update.finish_reason or "stop"
                self.finish_times[s] = event.time_s
            self.accept_rows.append((event.round, update.accepted, seq_label(s)))
            if update.proposed:
                self.per_round[s].append((update.accepted, update.proposed))
        if event.updates and any(u.proposed for u in event.updates):
            self.accept_rows.append((event.round, event.draft_length, DRAFT_LENGTH_SERIES))
        # Round 0 is the token sampled from the prefill's logits, stamped microseconds after decoding
        # began: its "rate" would be a meaningless spike, so speed points start with the first real round.
        if event.time_s > 0 and event.round > 0:
            live = {u.seq for u in event.updates}
            for s in sorted(live):
                if 0 <= s < self.k:
                    self.speed_rows.append((event.time_s, self.tokens[s] / event.time_s, seq_label(s)))
        if event.texts:
            self._take_texts(event.texts)

    def _take_texts(self, texts: Iterable[str]) -> None:
        for s, text in enumerate(texts):
            if s < self.k:
                self.texts[s] = text

    def _take_result_texts(self, event: GenerationEvent) -> None:
        """The final texts are the result's (stop strings cut); finish data too, in case rounds lagged."""
        for cand in event.result.candidates:
            s = cand.prompt_index * self.k + cand.sample_index
            if 0 <= s < self.k:
                self.texts[s] = cand.text
                self.tokens[s] = cand.stats.tokens
                if self.finish_reasons[s] is None:
                    self.finish_reasons[s] = cand.finish_reason
                    self.finish_times[s] = cand.stats.finish_time_s

    @property
    def finished(self) -> list[bool]:
        return [r is not None for r in self.finish_reasons]

    def rate(self, seq: int) -> float | None:
        """Average tokens/s of one sequence so far (up to its finish if it finished); None before the first
        round, when the only token is the prefill's, stamped microseconds after decoding began."""
        t = self.finish_times[seq] if self.finish_times[seq] is not None else self.time_s
        return self.tokens[seq] / t if self.round > 0 and t and t > 0 else None

    def acceptance(self, seq: int) -> float | None:
        """Accepted / proposed draft tokens of one sequence, None while nothing was proposed."""
        return self.accepted[seq] / self.proposed[seq] if self.proposed[seq] else None

    def speed_frame(self) -> pd.DataFrame:
        return _typed(self.speed_rows, SPEED_COLUMNS, ("float64", "float64", "string"))

    def accept_frame(self) -> pd.DataFrame:
        """Accepted draft tokens per round and sequence, the draft length's rows first: the plot draws its lines in
        the order their series first appear, so the draft length lies beneath a sequence that accepted all L."""
        rows = sorted(self.accept_rows, key=lambda row: row[2] != DRAFT_LENGTH_SERIES)  # stable: rounds keep order
        return _typed(rows, ACCEPT_COLUMNS, ("int64", "int64", "string"))


def _typed(rows: list[tuple], columns: tuple[str, ...], dtypes: tuple[str, ...]) -> pd.DataFrame:
    """A frame with fixed column types even when empty: the plot reads each column's type from its dtype
    (numeric → quantitative axis), and an untyped empty frame would make the axes categorical."""
    frame = pd.DataFrame(rows, columns=list(columns))
    return frame.astype(dict(zip(columns, dtypes)))


def empty_speed_frame() -> pd.DataFrame:
    return _typed([], SPEED_COLUMNS, ("float64", "float64", "string"))


def empty_accept_frame() -> pd.DataFrame:
    return _typed([], ACCEPT_COLUMNS, ("int64", "int64", "string"))


def series_of(frame: pd.DataFrame, column: str = "sequence") -> list[str]:
    """The distinct series of a long-format chart frame, sorted (sequences first, then 'draft length L')."""
    return sorted(set(frame[column].dropna()), key=lambda name: (name == DRAFT_LENGTH_SERIES, name))
