"""Many visitors on one engine, a visitor waiting in line while others decode in real time (seconds): the slow part
of test_generate_queue.py."""

from __future__ import annotations

import threading
import time

import pytest
from app_fakes import GOOD, fake_session
from batching_fake import BatchingFakeEngine
from flow_cases import add, by_prompt, he0, run_in_thread, title

pytestmark = pytest.mark.slow  # visitors in line while others decode, in real time


def test_a_visitor_in_line_sees_their_place_and_stop_takes_them_out_of_it():
    session = fake_session(BatchingFakeEngine, texts=by_prompt(long=12), chunk=4, seats=2, round_s=0.03)
    first, views_first = run_in_thread(session, he0(), threading.Event())
    while not session.engine.batches:
        time.sleep(0.01)
    cancel = threading.Event()
    second, views_second = run_in_thread(session, add(), cancel)
    deadline = time.monotonic() + 20
    while not any("Waiting in line" in v.status for v in views_second) and time.monotonic() < deadline:
        time.sleep(0.02)
    waiting = [v.status for v in views_second if "Waiting in line" in v.status]
    assert waiting and "you are 1st in line" in waiting[0] and "about" in waiting[0], [v.status for v in views_second]
    cancel.set()
    second.join(20)
    assert title(views_second[-1].status) == "Stopped while waiting in line: nothing was generated."
    assert not views_second[-1].candidates and not views_second[-1].best_code
    assert len(session.engine.calls) == 1  # the second request never decoded
    first.join(60)
    assert title(views_first[-1].status) == "Done." and views_first[-1].best_code.endswith(GOOD * 12)
