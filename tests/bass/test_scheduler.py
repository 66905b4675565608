"""Many requests, one engine (`bass.engine.scheduler`, `bass.engine.batch`): requests join a running batch
between rounds and leave as their candidates finish, and each gets exactly what it gets alone.

A join is made deterministic by holding the running batch after one of its rounds until the second request
is in line (`held_after`), so that it joins mid-run rather than after the first request ended.
"""

import threading
import time

import pytest
from scheduling import FIXED, GREEDY, PROMPTS, held_after, run_joined

from bass.config import SamplingParams


def test_seeded_sampling_is_the_same_alone_and_joined_under_a_fixed_draft_length(tiny_engine, monkeypatch, joins):
    engine = tiny_engine("llama", draft_seed=1, head_scale=6.0)
    kw = [dict(prompts=p, k=3, params=SamplingParams(max_new_tokens=n, temperature=0.8, top_p=0.95, seed=s),
               drafter="model", draft_length=FIXED) for p, n, s in zip(PROMPTS, (24, 10, 16), (5, 6, 7), strict=True)]
    alone = [engine.generate(**x) for x in kw]
    joins.clear()
    held_after(monkeypatch, 1, waiting=2)
    together = run_joined(engine, kw[0], kw[1:])
    assert any(j > 0 for j in joins[1:])
    for a, b in zip(alone, together, strict=True):
        assert a.token_ids == b.token_ids
    assert len({c.token_ids for c in alone[0].candidates}) > 1  # k draws of one seed differ


def test_cancelling_one_request_leaves_the_others_running(tiny_engine, monkeypatch, joins):
    engine = tiny_engine("llama", draft_seed=1)
    params = SamplingParams(max_new_tokens=30, **GREEDY)
    alone = engine.generate(PROMPTS[1], k=2, params=params, drafter="model", draft_length=FIXED)
    cancel = threading.Event()
    held_after(monkeypatch, 2)
    seen = []

    def watched():
        for event in engine.stream(PROMPTS[0], k=2, params=params, drafter="model", draft_length=FIXED,
                                   cancel=cancel):
            seen.append(event)
            if event.kind == "round" and event.round == 4:
                cancel.set()

    a = threading.Thread(target=watched)
    a.start()
    other = engine.generate(PROMPTS[1], k=2, params=params, drafter="model", draft_length=FIXED)
    a.join(60)
    done = seen[-1].result
    assert {c.finish_reason for c in done.candidates} == {"cancelled"}
    assert all(0 < len(c.token_ids) < 30 for c in done.candidates)
    assert other.token_ids == alone.token_ids


def test_a_request_cancelled_while_queued_ends_at_once(tiny_engine, monkeypatch):
    engine = tiny_engine("llama", draft_seed=1)
    params = SamplingParams(max_new_tokens=20, **GREEDY)
    release = held_after(monkeypatch, 1, waiting=None)  # the first request holds until the second gave up
    cancel = threading.Event()
    events = []

    def second():
        for event in engine.stream(PROMPTS[1], k=2, params=params, cancel=cancel, exclusive=True):
            events.append(event)
            if event.kind == "queued":
                cancel.set()

    first = threading.Thread(target=lambda: engine.generate(PROMPTS[0], k=2, params=params, exclusive=True))
    first.start()
    while not engine.scheduler._running:
        time.sleep(0.001)
    b = threading.Thread(target=second)
    b.start()
    b.join(30)
    release.set()
    first.join(60)
    assert [e.kind for e in events][0] == "queued" and events[0].queue_position == 1
    assert events[-1].kind == "done" and all(c.finish_reason == "cancelled" and not c.token_ids
                                             for c in events[-1].result.candidates)
    assert not any(e.kind == "prefill" for e in events)


def test_requests_in_line_see_their_place(tiny_engine, monkeypatch):
    """Exclusive requests run one at a time: the ones behind see their places, 1 and 2."""
    engine = tiny_engine("llama", draft_seed=1)
    params = SamplingParams(max_new_tokens=8, **GREEDY)
    release = held_after(monkeypatch, 1, waiting=None)
    places: dict[int, list[int]] = {1: [], 2: []}

    def run(i: int):
        for event in engine.stream(PROMPTS[i], k=1, params=params, exclusive=True):
            if event.kind == "queued":
                places[i].append(event.queue_position)

    threads = [threading.Thread(target=lambda: engine.generate(PROMPTS[0], k=1, params=params, exclusive=True))]
    threads += [threading.Thread(target=run, args=(i,)) for i in (1, 2)]
    for i, t in enumerate(threads):  # one after another: the first running, each other in line before the next
        t.start()
        while not engine.scheduler._running or len(engine.scheduler._queue) < i:
            time.sleep(0.001)
    deadline = time.monotonic() + 30
    while not (places[1] and places[2]) and time.monotonic() < deadline:  # both told while the batch is held
        time.sleep(0.01)
    release.set()
    for t in threads:
        t.join(60)
    assert places[1] and set(places[1]) == {1}
    assert places[2] and places[2][0] == 2 and set(places[2]) <= {1, 2}


def test_a_request_of_another_kind_waits_for_the_batch_to_drain(tiny_engine, monkeypatch, joins):
    engine = tiny_engine("llama", draft_seed=1)
    greedy = SamplingParams(max_new_tokens=16, **GREEDY)
    sampled = SamplingParams(max_new_tokens=16, temperature=0.8, seed=1)
    held_after(monkeypatch, 1)
    joins.clear()
    a, b = run_joined(engine, dict(prompts=PROMPTS[0], k=2, params=greedy, draft_length=FIXED),
                       [dict(prompts=PROMPTS[1], k=2, params=sampled, draft_length=FIXED)])
    assert joins == [0, 0]  # the sampled request started its own batch once the greedy one had drained
    assert b.token_ids == engine.generate(PROMPTS[1], k=2, params=sampled, draft_length=FIXED).token_ids


def test_bad_arguments_get_a_message_before_anything_runs(tiny_engine):
    engine = tiny_engine("llama", draft_seed=1)
    with pytest.raises(ValueError, match="params must be a bass.SamplingParams"):
        engine.generate(PROMPTS[0], params={"max_new_tokens": 8})
    with pytest.raises(ValueError, match="draft_length must be"):
        engine.generate(PROMPTS[0], draft_length=4)
    with pytest.raises(ValueError, match="prompt"):
        engine.generate(b"def f():")
