"""The draft-length policies (`bass.decode.draft_length`): the paper's heuristic against hand-worked traces, and the
cost table's rule against the arithmetic it states."""

import numpy as np
import pytest

from bass.config import DraftLengthConfig
from bass.decode.draft_length import L_MAX, Acceptance, CostTable, DraftLengthPolicy, heuristic_step
from bass.decode.sequences import Sequence


def _rows(n: int, finished: int = 0) -> list[Sequence]:
    return [Sequence(seq=i, prompt_index=0, sample_index=i, prompt_len=1, history=[0],
                     finish_reason="eos" if i < finished else None) for i in range(n)]


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


def test_policies_and_finished_rows_draft_nothing():
    rows = _rows(3)
    shared = DraftLengthPolicy(DraftLengthConfig(policy="heuristic", l0=7))
    shared.update(rows, [1, 7, 0], [7, 7, 7])
    assert shared.lengths(rows) == [9, 9, 9]
    fixed = DraftLengthPolicy(DraftLengthConfig(policy="fixed", l0=4))
    fixed.update(rows, [4, 4, 4], [4, 4, 4])
    assert fixed.lengths(_rows(3, finished=1)) == [0, 4, 4]  # a finished row riding along: width 0
    own = DraftLengthPolicy(DraftLengthConfig(policy="per-sequence", l0=7))
    own.update(rows[:2], [7, 0], [7, 7])
    assert own.lengths(rows) == [9, 6, 7]  # (a row it has not seen: l0)
    off = DraftLengthPolicy(DraftLengthConfig(policy="fixed", l0=0))  # speculation off
    assert off.lengths(rows) == [0, 0, 0]


def test_bad_config_is_refused_with_a_hint():
    for gone in ("adaptive", "cost"):
        with pytest.raises(ValueError, match="policy"):
            DraftLengthConfig(policy=gone)
    with pytest.raises(ValueError, match="l0"):
        DraftLengthConfig(policy="heuristic", l0=0)
    with pytest.raises(ValueError, match="l0"):
        DraftLengthConfig(l0=-1)
    with pytest.raises(ValueError, match="positive time"):
        CostTable({(8, 0): 1e-3, (8, 1): 0.0})


def test_what_may_be_decided_a_round_ahead():
    """The round loop asks a drafting round's length before the round before is read only where the length cannot
    depend on that round (`bass.decode.pipeline`, look-ahead): a fixed length, and the table's rule, which reads
    only the rounds read. The default follows the batch, and drafts l0 = 3 where no table was measured."""
    assert (DraftLengthConfig().policy, DraftLengthConfig().l0) == ("auto", 3)
    ahead = {p: DraftLengthPolicy(DraftLengthConfig(policy=p)).decides_ahead
             for p in ("auto", "fixed", "heuristic", "per-sequence")}
    assert ahead == {"auto": True, "fixed": True, "heuristic": False, "per-sequence": False}
    assert DraftLengthPolicy(DraftLengthConfig()).lengths(_rows(2)) == [3, 3]  # no table: l0


def test_acceptance_counts_each_position_a_row_reached():
    acc = Acceptance(prior=0.5, weight=0.0, decay=1.0)
    # asked 3 each: a row accepting 3 reached and passed 1..3; one accepting 1 reached 1, 2 and passed 1; one
    # accepting 0 reached 1 only; a row asked nothing (riding along) counts nowhere
    acc.update([3, 1, 0, 0], [3, 3, 3, 0])
    np.testing.assert_allclose(acc.reached[:3], [3, 2, 1])
    np.testing.assert_allclose(acc.passed[:3], [2, 1, 1])
    alpha = acc.rates[:3]
    np.testing.assert_allclose(alpha, [2 / 3, 1 / 2, 1.0])
    e = acc.expected()
    assert e[0] == 1.0 and e[1] == pytest.approx(1 + 2 / 3) and e[2] == pytest.approx(1 + 2 / 3 + 1 / 3)
    prior = Acceptance(prior=0.7)  # no round yet: the prior at every position
    assert prior.expected()[L_MAX] == pytest.approx(sum(0.7 ** j for j in range(L_MAX + 1)))


def test_the_table_picks_the_length_of_most_tokens_per_second():
    # a weight-bound small batch: every verify costs about a plain step, drafting a little; a large batch is
    # compute-bound: each draft token costs nearly a step
    small = {(8, L): 1e-3 * (1.0 + 0.1 * L) for L in range(L_MAX + 1)}
    large = {(64, L): 1e-3 * (1.0 + 0.9 * L) for L in range(L_MAX + 1)}
    table = CostTable({**small, **large})
    e = [1.0, 1.8, 2.4, 2.8, 3.0]  # E(L) at α of about 0.8, falling with the position
    assert table.best(8, e) == max(range(L_MAX + 1), key=lambda L: e[L] / small[(8, L)])
    assert table.best(8, e) == 3  # 2.8 / 1.3 against 3.0 / 1.4 at L = 4
    assert table.best(64, e) == 0  # speculation does not pay: the plain step
    assert table.best(5, e) == table.best(8, e)  # 5 rows run in the bucket of 8
    assert table.best(200, e) == table.best(64, e)  # past the widest bucket measured: that one's costs
    cfg = DraftLengthConfig()
    policy = DraftLengthPolicy(cfg, table)
    assert policy.lengths(_rows(8)) == [table.best(8, policy.acceptance.expected())] * 8
    assert policy.lengths(_rows(64, finished=3)) == [0] * 64
    assert policy.describe()["policy"] == "table" and policy.describe()["mean_L"] == pytest.approx(
        np.mean([table.best(8, policy.acceptance.expected()), 0]))
    fixed = DraftLengthPolicy(DraftLengthConfig("fixed", l0=2), table)  # only "auto" reads a table
    assert fixed.lengths(_rows(64)) == [2] * 64
