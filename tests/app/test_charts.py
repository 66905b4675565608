"""Engine events → live chart rows, checked against numbers worked out by hand."""

from __future__ import annotations

import pandas as pd
import pytest

from app.charts import DRAFT_LENGTH_SERIES, LiveRun, empty_accept_frame, empty_speed_frame, seq_label, series_of
from bass.events import BatchStats, Candidate, GenerationEvent, GenerationResult, SequenceStats, SequenceUpdate


def upd(seq, ntok, proposed, accepted, finished=False, reason=None, text="x"):
    return SequenceUpdate(seq, tuple(range(ntok)), text, proposed, accepted, finished, reason)


def events():
    """Two sequences: seq 0 gets 1+3+2 tokens and stops at round 2; seq 1 gets 1+1+5+1 and runs to round 3."""
    return [
        GenerationEvent("prefill", 0, 0.5, 0, (), ("", "")),
        GenerationEvent("round", 0, 0.1, 0, (upd(0, 1, 0, 0), upd(1, 1, 0, 0)), ("a", "b")),
        GenerationEvent("round", 1, 0.5, 4, (upd(0, 3, 4, 2), upd(1, 1, 4, 0)), ("a12", "b1")),
        GenerationEvent("round", 2, 1.0, 5, (upd(0, 2, 5, 1, True, "stop"), upd(1, 5, 5, 4)), ("a12xy", "b1234")),
        GenerationEvent("round", 3, 2.0, 6, (upd(1, 1, 6, 0, True, "length"),), ("a12xy", "b12345")),
    ]


def test_speed_rows_are_tokens_so_far_over_elapsed_time():
    run = LiveRun(2)
    for e in events():
        run.add(e)
    frame = run.speed_frame()
    got = {(row["time (s)"], row["sequence"]): row["tokens/s"] for _, row in frame.iterrows()}
    # seq 0: 1 tok @0.1 (round 0), 4 @0.5, 6 @1.0 ; seq 1: 1 @0.1 (round 0), 2 @0.5, 7 @1.0, 8 @2.0.
    # Round 0 (the prefill's token) counts towards the totals but gets no point of its own.
    expected = {(0.5, "seq 00"): 8.0, (1.0, "seq 00"): 6.0,
                (0.5, "seq 01"): 4.0, (1.0, "seq 01"): 7.0, (2.0, "seq 01"): 4.0}
    assert got == pytest.approx(expected)
    # a finished sequence leaves the chart: no point for seq 0 at t=2.0
    assert (2.0, "seq 00") not in got


def test_accept_rows_per_round_with_draft_length_series():
    run = LiveRun(2)
    for e in events():
        run.add(e)
    rows = set(map(tuple, run.accept_frame().itertuples(index=False)))
    assert (1, 2, "seq 00") in rows and (1, 0, "seq 01") in rows and (2, 4, "seq 01") in rows
    # L appears for rounds that proposed drafts (not for round 0, the prefill's first token)
    assert {(r, n) for r, n, s in rows if s == DRAFT_LENGTH_SERIES} == {(1, 4), (2, 5), (3, 6)}


def test_totals_finish_and_acceptance():
    run = LiveRun(2)
    for e in events():
        run.add(e)
    assert run.tokens == [6, 8]
    assert run.finish_reasons == ["stop", "length"]
    assert run.finish_times == [1.0, 2.0]
    assert run.acceptance(0) == pytest.approx(3 / 9)
    assert run.acceptance(1) == pytest.approx(4 / 15)
    assert run.rate(0) == pytest.approx(6.0)  # up to its own finish, not the batch's latest time
    assert run.draft_length == 6 and run.round == 3
    assert run.texts == ["a12xy", "b12345"]


def test_done_event_takes_final_texts_and_stats():
    run = LiveRun(2)
    for e in events()[:3]:
        run.add(e)
    stats = SequenceStats(tokens=9, rounds=3, proposed=9, accepted=3, finish_time_s=1.5)
    cands = (Candidate(0, 0, "final-0", (), "stop", stats), Candidate(0, 1, "final-1", (), "budget", stats))
    batch = BatchStats("bass", "ngram", "torch", 2, 0.5, 1.5, 18, 6, 18, 6, 166.7)
    run.add(GenerationEvent("done", 3, 1.5, 0, (), (), GenerationResult(cands, batch)))
    assert run.phase == "done"
    assert run.texts == ["final-0", "final-1"]
    assert run.tokens == [9, 9]
    assert run.finish_reasons == ["stop", "budget"]


def test_regular_decoding_has_no_acceptance_and_no_draft_series():
    run = LiveRun(1)
    run.add(GenerationEvent("round", 1, 0.5, 0, (upd(0, 1, 0, 0),), ("a",)))
    assert run.acceptance(0) is None
    assert DRAFT_LENGTH_SERIES not in set(run.accept_frame()["sequence"])


def test_out_of_range_sequence_is_ignored():
    run = LiveRun(1)
    run.add(GenerationEvent("round", 1, 0.5, 2, (upd(5, 3, 2, 2), upd(0, 1, 2, 0)), ("a",)))
    assert run.tokens == [1]


def test_frames_are_typed_even_when_empty():
    for frame in (empty_speed_frame(), empty_accept_frame(), LiveRun(3).speed_frame()):
        x, y = frame.columns[:2]
        assert pd.api.types.is_numeric_dtype(frame[x]) and pd.api.types.is_numeric_dtype(frame[y])
        assert len(frame) == 0


def test_series_sorted_numerically_with_draft_length_last():
    frame = pd.DataFrame({"sequence": [seq_label(10), DRAFT_LENGTH_SERIES, seq_label(2), seq_label(2)]})
    assert series_of(frame) == ["seq 02", "seq 10", DRAFT_LENGTH_SERIES]


def test_k_must_be_positive():
    with pytest.raises(ValueError, match="k must be"):
        LiveRun(0)


def test_the_draft_length_lies_beneath_a_sequence_that_accepted_all_of_it():
    """The plot draws series in the order they first appear: the draft length's rows come first, so its grey line
    is drawn first and a sequence on it (all L accepted) is drawn over it, not hidden."""
    run = LiveRun(2)
    for r, accepted in ((1, (3, 1)), (2, (3, 3))):
        run.add(GenerationEvent("round", r, 0.1 * r, 3, tuple(
            SequenceUpdate(s, tuple(range(a + 1)), "x", 3, a, False) for s, a in enumerate(accepted)), ("", "")))
    frame = run.accept_frame()
    first_seen = list(dict.fromkeys(frame["sequence"]))
    assert first_seen == [DRAFT_LENGTH_SERIES, seq_label(0), seq_label(1)]
    # each series keeps its rounds in order
    assert list(frame[frame["sequence"] == seq_label(0)]["accepted tokens"]) == [3, 3]
    assert list(frame[frame["sequence"] == DRAFT_LENGTH_SERIES]["round"]) == [1, 2]
