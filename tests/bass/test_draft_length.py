"""The draft-length rule of docs/design.md §4, checked against hand-worked traces."""

import pytest

from bass.config import DraftLengthConfig
from bass.draft_length import DraftLengthPolicy, heuristic_step


def test_heuristic_trace_by_hand():
    cfg = DraftLengthConfig("heuristic", l0=7)  # the paper's: l0 7, incre 2, mod 10, limit 32
    L, s = 7, 0
    # full acceptance grows by 2; a miss shrinks by ceil(L/10) (+1 when the previous round missed too)
    trace = []
    for x in [7, 9, 3, 2, 11, 11]:
        L, s = heuristic_step(L, s, x, cfg)
        trace.append((L, s))
    # 7 -> 9 (x=7=L); 9 -> 11; x=3<11: 11 - 2 - 0 = 9; x=2<9: 9 - 1 - 1 = 7; x=11>=7: 9; 11
    assert trace == [(9, 0), (11, 0), (9, 1), (7, 1), (9, 0), (11, 0)]


def test_heuristic_limits():
    cfg = DraftLengthConfig(l0=31)
    assert heuristic_step(31, 0, 31, cfg) == (32, 0)
    assert heuristic_step(32, 0, 32, cfg) == (32, 0)
    assert heuristic_step(2, 1, 0, cfg) == (1, 1)  # never below 1
    assert heuristic_step(20, 1, 17, cfg) == (17, 1)  # never below what the best sequence used


def test_policies():
    shared = DraftLengthPolicy(DraftLengthConfig(policy="heuristic", l0=7), [0, 1, 2])
    shared.update([0, 1, 2], [1, 7, 0])
    assert shared.lengths([0, 2]) == [9, 9]
    fixed = DraftLengthPolicy(DraftLengthConfig(policy="fixed", l0=4), [0, 1])
    fixed.update([0, 1], [4, 4])
    assert fixed.lengths([0, 1]) == [4, 4]
    own = DraftLengthPolicy(DraftLengthConfig(policy="per-sequence", l0=7), [0, 1])
    own.update([0, 1], [7, 0])
    assert own.lengths([0, 1]) == [9, 6]


def test_bad_config_is_refused_with_a_hint():
    for gone in ("adaptive", "cost"):
        with pytest.raises(ValueError, match="policy"):
            DraftLengthConfig(policy=gone)
    with pytest.raises(ValueError, match="l0"):
        DraftLengthConfig(l0=0)


def test_only_a_fixed_length_is_decided_a_round_ahead():
    """The round loop asks a drafting round's length before the round before is read only where the length cannot
    depend on that round (`bass.pipeline`, look-ahead): a fixed length, the default, at the measured L = 3."""
    assert (DraftLengthConfig().policy, DraftLengthConfig().l0) == ("fixed", 3)
    ahead = {p: DraftLengthPolicy(DraftLengthConfig(policy=p), [0]).decides_ahead
             for p in ("fixed", "heuristic", "per-sequence")}
    assert ahead == {"fixed": True, "heuristic": False, "per-sequence": False}
