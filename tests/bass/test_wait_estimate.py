"""The wait a queued visitor is told (`Scheduler.wait_estimate`): the work really ahead of them in line, at the rates
measured on the requests served."""

from types import SimpleNamespace

import pytest

from bass.config import DraftLengthConfig, SamplingParams
from bass.decode.sequences import Sequence
from bass.engine.request import BatchKind, Request
from bass.engine.scheduler import Scheduler

KIND = BatchKind("bass", "model", "torch", False, DraftLengthConfig(), SamplingParams())


def _request(prompt_tokens: int, k: int, max_new_tokens: int = 100, generated: int = 0) -> Request:
    r = Request([[1] * prompt_tokens], k, SamplingParams(max_new_tokens=max_new_tokens), KIND, 0)
    r.seqs = [Sequence(seq=s, prompt_index=0, sample_index=s, prompt_len=prompt_tokens,
                       history=[1] * (prompt_tokens + generated)) for s in range(k)]
    return r


def _scheduler(rows: int = 16) -> Scheduler:
    s = Scheduler(SimpleNamespace(max_batch_rows=rows), budget=10**12)
    s._prefill_s_per_token, s._row_tokens_per_s = 0.001, 50.0  # 1 ms a prompt token; 50 tokens/s a row
    return s


def test_no_estimate_before_any_request_was_served():
    s = Scheduler(SimpleNamespace(max_batch_rows=16), budget=10**12)
    r = _request(10, 2)
    s._queue.append(r)
    assert s.wait_estimate(r) is None


def test_with_room_a_visitor_waits_for_the_prompts_ahead_to_prefill():
    s = _scheduler()
    ahead, mine = _request(2000, 2), _request(30, 2)
    s._running.append(_request(100, 4, generated=10))
    s._queue.extend([ahead, mine])
    assert s.wait_estimate(mine) == pytest.approx(2000 * 0.001)  # 4 + 2 + 2 rows fit in 16: only the prefill
    assert s.wait_estimate(ahead) == 0.0


def test_without_room_a_visitor_waits_for_running_rows_to_end():
    s = _scheduler(rows=8)
    soon, late = _request(100, 4, generated=90), _request(100, 4, generated=20)  # 10 and 80 tokens left
    s._running.extend([late, soon])
    mine = _request(30, 4)
    s._queue.append(mine)
    assert s.wait_estimate(mine) == pytest.approx(10 / 50.0)  # the request ending first frees its 4 rows
    other = _request(30, 8)  # needs both to end
    s._queue.append(other)
    assert s.wait_estimate(other) == pytest.approx(max(30 * 0.001, 80 / 50.0))
