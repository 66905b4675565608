"""Live updates are spaced so that drawing a run never takes the cores its engine needs."""

from __future__ import annotations

import re
import threading
import time

from app_fakes import GOOD, fake_session

from app.generate import generate_views
from app.problems import load_problems
from app.settings import METHOD_LABELS, parse_settings
from app.throttle import CPU_INTERVAL_S, GPU_INTERVAL_S, SHARE, Throttle, min_interval_s


def test_a_cpu_gets_fewer_updates_than_a_gpu():
    assert min_interval_s("cpu") == CPU_INTERVAL_S > min_interval_s("cuda") == GPU_INTERVAL_S


def test_updates_that_cost_more_go_out_further_apart():
    throttle = Throttle(min_interval_s=0.1)
    assert throttle.due(time.perf_counter())  # nothing sent yet
    throttle.sending()
    time.sleep(0.02)  # building, serializing and sending this update took 20 ms
    throttle.sent()
    assert throttle.cost_s >= 0.02 and throttle.interval_s >= 0.02 / SHARE > 0.1
    assert not throttle.due(throttle.last_s + 0.1) and throttle.due(throttle.last_s + throttle.interval_s + 1e-6)


def test_a_run_of_many_short_rounds_on_the_cpu_sends_an_update_every_few_seconds():
    """~200 rounds in ~5 s: one view a round would be 200, one every 0.25 s twenty."""
    session = fake_session(texts=[GOOD * 6], chunk=4, round_s=0.02)
    p = load_problems()[0]
    s = parse_settings(p.prompt, "", "completion", 1, 0.8, 0.95, 64, 0, METHOD_LABELS["bass"], None, None, None, 1)
    began = time.perf_counter()
    views = list(generate_views(session, s, threading.Event()))
    wall_s = time.perf_counter() - began
    decoding = [v for v in views if re.search(r'bass-status-title">Generating…<', v.status)]
    assert wall_s > 2 * CPU_INTERVAL_S and len(decoding) <= wall_s / CPU_INTERVAL_S + 2, (len(decoding), wall_s)
    assert len(decoding) >= 2  # still live: the page is not frozen until the end
