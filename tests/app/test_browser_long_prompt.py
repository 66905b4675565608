"""A long prompt beside a normal one, in real browsers on the real app (Gemma 3 270M on the CPU): the engine reads
the long prompt a chunk at a time between the other visitor's rounds (`bass.engine.prefill`), so the other is
served at close to its pace alone, and the long prompt's Stop takes effect before its next chunk."""

from __future__ import annotations

import time

import pytest
from test_browser import _click, _open, _set_number, _wait, app_url, new_driver  # noqa: F401 (app_url: a fixture)

from app.problems import load_problems

pytestmark = pytest.mark.browser

LONG_CHARS = 20_000
RUN_S = 300


def _status(driver) -> str:
    return driver.find_element("css selector", "#bass-status").text


def _set_text(driver, selector: str, text: str) -> None:
    """Set a textarea as a paste would (one input event), not a keystroke per character."""
    box = driver.find_element("css selector", selector)
    driver.execute_script("arguments[0].value = arguments[1];"
                          "arguments[0].dispatchEvent(new Event('input', {bubbles: true}));", box, text)


def _ask(driver, prompt: str, tests: str) -> None:
    _set_text(driver, "#bass-prompt textarea", prompt)
    _set_text(driver, "#bass-tests textarea", tests)
    _set_number(driver, "#bass-k input[type=number]", "2")
    _set_number(driver, "#bass-max-new input[type=number]", "24")


def _ranked_after_click(driver) -> float:
    """Press Generate; the seconds until both candidates of this run are ranked (the last run's cards are marked
    first: the page replaces them with new elements)."""
    driver.execute_script("document.querySelectorAll('#bass-candidates .bass-ranked')"
                          ".forEach(c => c.setAttribute('data-earlier', '1'));")
    t0 = time.monotonic()
    _click(driver, "#bass-generate")
    _wait(driver, lambda d: len(d.find_elements("css selector", "#bass-candidates .bass-ranked:not([data-earlier])"))
          == 2, RUN_S, "two ranked candidates")
    return time.monotonic() - t0


@pytest.fixture
def two_visitors(tmp_path):
    drivers = [new_driver(tmp_path), new_driver(tmp_path)]
    yield drivers
    for d in drivers:
        d.quit()


def test_a_20000_character_prompt_holds_no_other_visitor_and_stops_at_once(app_url, two_visitors):  # noqa: F811
    a, b = two_visitors
    problems = load_problems()
    long_prompt = "".join(p.prompt for p in problems)[:LONG_CHARS - 40] + "\ndef long_prompt_tail():\n"
    short = problems[2]
    for driver in (a, b):
        _open(driver, app_url)
    _ask(b, short.prompt, short.editable_tests())
    _ranked_after_click(b)  # the first run warms the engine and the sandbox
    alone = _ranked_after_click(b)

    _ask(a, long_prompt, "")
    _click(a, "#bass-generate")
    _wait(a, lambda d: "Reading your prompt" in _status(d), 120, "the long prompt being read")
    beside = _ranked_after_click(b)
    assert "Reading your prompt" in _status(a), "the long prompt was read before B finished: the test proves nothing"
    assert beside < 2 * alone, f"B took {beside:.1f} s beside the long prompt, {alone:.1f} s alone"

    t0 = time.monotonic()
    _click(a, "#bass-stop")
    _wait(a, lambda d: "Stopped while reading your prompt" in _status(d), 30, "A's Stop")
    assert time.monotonic() - t0 < 2.0
