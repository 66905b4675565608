"""The Generate flow without a browser, the run that waits for a sibling still decoding (seconds of real time):
the slow part of test_generate_flow.py."""

from __future__ import annotations

import threading

import pytest
from app_fakes import GOOD, fake_session
from flow_cases import badges, settings

from app.generate import generate_views

pytestmark = pytest.mark.slow  # a run that waits for a sibling still decoding


def test_a_pass_badge_appears_while_a_sibling_is_still_decoding():
    # seq 0 finishes after ~17 rounds, seq 1 needs ~100 more: its card is still running when seq 0's verdict lands
    session = fake_session(texts=[GOOD, GOOD * 6], chunk=8, round_s=0.02)
    views = list(generate_views(session, settings(k=2), threading.Event()))
    live = [v for v in views[:-1] if "PASS" in badges(v.candidates)]
    assert live, "no live view showed a verdict before decoding ended"
    assert "running" in badges(live[0].candidates)
    assert "1 tested, 1 pass" in live[0].status
    final = views[-1]
    assert "time to first pass" in final.summary and "Done." in final.status
