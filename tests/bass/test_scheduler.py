"""Many requests, one engine (`bass.engine.scheduler`, `bass.engine.batch`): requests join a running batch
between rounds and leave as their candidates finish, and each gets exactly what it gets alone.

A join is made deterministic by holding the running batch after one of its rounds until the second request
is in line (`_held_after`), so that it joins mid-run rather than after the first request ended.
"""

import threading
import time

import pytest

from bass.config import DraftLengthConfig, SamplingParams
from bass.engine.batch import Batch
from bass.engine.scheduler import Scheduler

GREEDY = dict(temperature=0.0)
FIXED = DraftLengthConfig("fixed", l0=3)
PROMPTS = ["def fib(n):\n", "class Stack:\n    def push(self, x):\n", "import os\n\n\ndef walk(root):\n"]



@pytest.fixture
def joins(monkeypatch):
    """Rows running in the batch at each join (0: the request started a batch)."""
    seen: list[int] = []
    join = Batch.join

    def spy(self, request):
        seen.append(sum(not s.finished for s in self.state.live))
        return join(self, request)

    monkeypatch.setattr(Batch, "join", spy)
    return seen


def _held_after(monkeypatch, round_index: int, waiting: int | None = 1) -> threading.Event:
    """Hold every batch after its round `round_index` until `waiting` more requests are in line (None: until
    the caller sets the Event returned); the Event is set once they are."""
    queued = threading.Event()
    submit, route = Scheduler.submit, Batch._route
    count = [0]

    def counted(self, request):
        submit(self, request)
        count[0] += 1
        if waiting is not None and count[0] > 1 and count[0] - 1 >= waiting:
            queued.set()

    def held(self, report):
        route(self, report)
        if report.index == round_index:
            assert queued.wait(30), "the second request never came"

    monkeypatch.setattr(Scheduler, "submit", counted)
    monkeypatch.setattr(Batch, "_route", held)
    return queued


def _run_joined(engine, first: dict, others: list[dict]) -> list:
    """Results of `first` and of `others`, these submitted from their own threads while `first` runs."""
    results: dict[int, object] = {}

    def run(i: int, kw: dict):
        results[i] = engine.generate(**kw)

    threads = [threading.Thread(target=run, args=(i + 1, kw)) for i, kw in enumerate(others)]
    a = threading.Thread(target=run, args=(0, first))
    a.start()
    for t in threads:
        t.start()
    for t in [a, *threads]:
        t.join(120)
    return [results[i] for i in range(len(others) + 1)]


@pytest.mark.parametrize("drafter", ["model", "ngram", "feature", "regular"])
@pytest.mark.parametrize("static", [False, True], ids=["eager", "static-shapes"])
def test_greedy_output_is_the_same_alone_and_joined_mid_run(tiny_engine, monkeypatch, joins, drafter, static):
    """On the eager caches, and on the static-shape ones of the CUDA path (run eagerly here, with look-ahead and
    riders): the target's and the draft's caches grow in place."""
    seed = dict(feature_seed=3) if drafter == "feature" else dict(draft_seed=1)
    # (max_batch_rows only tells the cached static engine apart from the eager one)
    engine = tiny_engine("llama", **seed, look_ahead=static, max_batch_rows=63 if static else 64)
    if static and not hasattr(engine.target_forward, "use_graphs"):
        engine.use_static_shapes(capture=False)
    method = "regular" if drafter == "regular" else "bass"
    name = None if drafter == "regular" else "model" if drafter == "feature" else drafter
    kw = [dict(prompts=p, k=k, params=SamplingParams(max_new_tokens=n, **GREEDY), method=method, drafter=name,
               draft_length=FIXED) for p, k, n in zip(PROMPTS, (3, 2, 4), (30, 12, 20), strict=True)]
    alone = [engine.generate(**x) for x in kw]
    joins.clear()
    _held_after(monkeypatch, 2, waiting=2)
    together = _run_joined(engine, kw[0], kw[1:])
    assert joins[0] == 0 and any(j > 0 for j in joins[1:])  # the later requests joined a running batch
    for a, b in zip(alone, together, strict=True):
        assert a.token_ids == b.token_ids


def test_seeded_sampling_is_the_same_alone_and_joined_under_a_fixed_draft_length(tiny_engine, monkeypatch, joins):
    engine = tiny_engine("llama", draft_seed=1, head_scale=6.0)
    kw = [dict(prompts=p, k=3, params=SamplingParams(max_new_tokens=n, temperature=0.8, top_p=0.95, seed=s),
               drafter="model", draft_length=FIXED) for p, n, s in zip(PROMPTS, (24, 10, 16), (5, 6, 7), strict=True)]
    alone = [engine.generate(**x) for x in kw]
    joins.clear()
    _held_after(monkeypatch, 1, waiting=2)
    together = _run_joined(engine, kw[0], kw[1:])
    assert any(j > 0 for j in joins[1:])
    for a, b in zip(alone, together, strict=True):
        assert a.token_ids == b.token_ids
    assert len({c.token_ids for c in alone[0].candidates}) > 1  # k draws of one seed differ


def test_cancelling_one_request_leaves_the_others_running(tiny_engine, monkeypatch, joins):
    engine = tiny_engine("llama", draft_seed=1)
    params = SamplingParams(max_new_tokens=30, **GREEDY)
    alone = engine.generate(PROMPTS[1], k=2, params=params, drafter="model", draft_length=FIXED)
    cancel = threading.Event()
    _held_after(monkeypatch, 2)
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
    release = _held_after(monkeypatch, 1, waiting=None)  # the first request holds until the second gave up
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
    release = _held_after(monkeypatch, 1, waiting=None)
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
    _held_after(monkeypatch, 1)
    joins.clear()
    a, b = _run_joined(engine, dict(prompts=PROMPTS[0], k=2, params=greedy, draft_length=FIXED),
                       [dict(prompts=PROMPTS[1], k=2, params=sampled, draft_length=FIXED)])
    assert joins == [0, 0]  # the sampled request started its own batch once the greedy one had drained
    assert b.token_ids == engine.generate(PROMPTS[1], k=2, params=sampled, draft_length=FIXED).token_ids


def test_memory_admission_refuses_what_can_never_fit_and_queues_what_fits_later(tiny_engine, monkeypatch, joins):
    engine = tiny_engine("llama", draft_seed=1)
    params = SamplingParams(max_new_tokens=24, **GREEDY)
    budget = engine.scheduler.budget
    from bass.engine.validate import request_bytes

    one = request_bytes(engine, [engine.encode(PROMPTS[0])[0]], 2, params, FIXED)
    monkeypatch.setattr(engine.scheduler, "budget", int(1.5 * one))  # room for one such request at a time
    try:
        with pytest.raises(ValueError, match="lower k or max_new_tokens"):
            engine.generate(PROMPTS[0], k=8, params=params, draft_length=FIXED)
        alone = [engine.generate(p, k=2, params=params, draft_length=FIXED) for p in PROMPTS[:2]]
        joins.clear()
        _held_after(monkeypatch, 1)
        together = _run_joined(engine, dict(prompts=PROMPTS[0], k=2, params=params, draft_length=FIXED),
                               [dict(prompts=PROMPTS[1], k=2, params=params, draft_length=FIXED)])
    finally:
        monkeypatch.setattr(engine.scheduler, "budget", budget)
    assert joins == [0, 0]  # the second waited for memory instead of joining
    assert [r.token_ids for r in together] == [r.token_ids for r in alone]


def test_bad_arguments_get_a_message_before_anything_runs(tiny_engine):
    engine = tiny_engine("llama", draft_seed=1)
    with pytest.raises(ValueError, match="params must be a bass.SamplingParams"):
        engine.generate(PROMPTS[0], params={"max_new_tokens": 8})
    with pytest.raises(ValueError, match="draft_length must be"):
        engine.generate(PROMPTS[0], draft_length=4)
    with pytest.raises(ValueError, match="prompt"):
        engine.generate(b"def f():")

