"""Requests that join a running batch, made deterministic: shared by test_scheduler.py and test_scheduler_slow.py
(the `joins` fixture, counting the rows each join found running, is in conftest.py)."""

import threading

from bass.config import DraftLengthConfig
from bass.engine.batch import Batch
from bass.engine.scheduler import Scheduler

GREEDY = dict(temperature=0.0)
FIXED = DraftLengthConfig("fixed", l0=3)
PROMPTS = ["def fib(n):\n", "class Stack:\n    def push(self, x):\n", "import os\n\n\ndef walk(root):\n"]


def held_after(monkeypatch, round_index: int, waiting: int | None = 1) -> threading.Event:
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


def run_joined(engine, first: dict, others: list[dict]) -> list:
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
