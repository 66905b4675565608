"""What the page says about a visitor's own input and about the model's load, in a real browser: the app around a
scripted engine (`fake_app.py`), Debian's Chromium through Selenium (`test_browser`'s helpers)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_browser import _click, _open, _set_number, _wait, new_driver, pick_humaneval0, serving

pytestmark = [pytest.mark.browser, pytest.mark.slow]

RUN_S = 120


@pytest.fixture
def browser(tmp_path) -> Iterator:
    driver = new_driver(tmp_path)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def batching_url(tmp_path_factory) -> Iterator[str]:
    """The batching app with short rounds: no test here needs two visitors' runs to overlap, only whole runs."""
    with serving([str(Path(__file__).with_name("fake_app.py")), "batching"],
                 tmp_path_factory.mktemp("batching_app") / "app.log", BASS_FAKE_ROUND_S="0.02") as url:
        yield url


def _status(driver) -> str:
    return driver.find_element("css selector", "#bass-status").text


def _ranked(driver) -> list:
    return _wait(driver, lambda d: d.find_elements("css selector", "#bass-candidates .bass-ranked"), RUN_S,
                 "the ranked cards")


def _note(driver) -> str:
    return driver.find_element("css selector", "#bass-candidates .bass-note").text


def _field_error(driver, field: str) -> str:
    """The validation message Gradio shows under the label of the field whose elem_id is `field` ('' if none)."""
    marks = driver.find_elements("css selector", f"#{field} .validation-error")
    return " ".join(m.text for m in marks if m.text)


def _set_text(driver, selector: str, text: str) -> None:
    box = driver.find_element("css selector", selector)
    box.clear()
    box.send_keys(text)


def test_a_blank_seed_draws_a_new_one_per_press_and_names_it(batching_url, browser):
    _open(browser, batching_url)
    seed = browser.find_element("css selector", "#bass-seed input")
    assert seed.get_attribute("value") == "" and seed.get_attribute("placeholder") == "random"
    pick_humaneval0(browser)
    _set_number(browser, "#bass-k input[type=number]", "2")
    drawn = []
    for _ in range(2):
        _click(browser, "#bass-generate")
        _wait(browser, lambda d: "Done." in _status(d) and d.find_elements(
            "css selector", "#bass-candidates .bass-ranked"), RUN_S, "the run to end")
        found = re.search(r"fresh draws \(seed (\d+), drafted at the lengths", _note(browser))
        assert found, _note(browser)
        assert "reproduces" not in _note(browser)
        drawn.append(found[1])
        assert browser.find_element("css selector", "#bass-seed input").get_attribute("value") == ""
    assert drawn[0] != drawn[1]
    # the drawn seed typed in: a seeded run, which says so
    _set_text(browser, "#bass-seed input", drawn[0])
    _click(browser, "#bass-generate")
    _wait(browser, lambda d: f"Seed {drawn[0]} reproduces these candidates" in d.find_element(
        "css selector", "#bass-candidates").text, RUN_S, "the seeded run's note")


def test_a_wrong_value_is_marked_at_its_field_and_in_the_status(batching_url, browser):
    _open(browser, batching_url)
    pick_humaneval0(browser)
    _set_number(browser, "#bass-budget input[type=number]", "-5")
    _click(browser, "#bass-generate")
    message = "Time budget (s) must be a number from 0 to 3600, got -5"
    _wait(browser, lambda d: message in _field_error(d, "bass-budget"), 30, "the mark at the budget field")
    assert _field_error(browser, "bass-k") == "" and _field_error(browser, "bass-prompt") == ""
    _wait(browser, lambda d: message in _status(d), 30, "the message in the status box")
    # fixed, the mark goes and the run starts
    _set_number(browser, "#bass-budget input[type=number]", "0")
    _click(browser, "#bass-generate")
    _ranked(browser)
    assert _field_error(browser, "bass-budget") == ""


def test_tests_without_an_assert_are_refused_before_anything_is_generated(batching_url, browser):
    _open(browser, batching_url)
    pick_humaneval0(browser)
    _set_text(browser, "#bass-tests textarea", "def check(candidate):\n    candidate([1.0, 2.0], 0.5)\n")
    _click(browser, "#bass-generate")
    _wait(browser, lambda d: "The unit tests were refused" in _field_error(d, "bass-tests"), 30,
          "the mark at the tests field")
    assert "no assert that can fail" in _status(browser) and "nothing was generated" in _status(browser)
    time.sleep(2)  # nothing starts
    assert not browser.find_elements("css selector", "#bass-candidates .bass-card")


def test_a_chat_prompt_asking_for_tests_is_told_where_tests_go(batching_url, browser):
    _open(browser, batching_url)
    _set_text(browser, "#bass-prompt textarea", "Write a function add(a, b) that returns a + b, with unit tests")
    _set_number(browser, "#bass-k input[type=number]", "1")
    _click(browser, "#bass-generate")
    _ranked(browser)
    assert "Put tests in the Unit tests box" in _note(browser)


@pytest.fixture(scope="module")
def slow_load_url(tmp_path_factory) -> Iterator[str]:
    with serving([str(Path(__file__).with_name("fake_app.py")), "slow-load"],
                 tmp_path_factory.mktemp("slow_load_app") / "app.log") as url:
        yield url


def test_the_loading_bar_moves_through_loading_weights_and_ready_comes_last(slow_load_url, browser):
    from fake_app import LOAD_S

    _open(browser, slow_load_url)
    seen: list[tuple[str, str, str]] = []  # (banner, bar width, status) as the page showed them
    deadline = time.monotonic() + LOAD_S + 60
    while time.monotonic() < deadline:
        banner, status, width = browser.execute_script(
            "const bar = document.querySelector('#bass-model-status .bass-bar-fill');"
            "return [document.querySelector('#bass-model-status').innerText,"
            "        document.querySelector('#bass-status').innerText,"
            "        bar ? (bar.classList.contains('bass-indeterminate') ? 'animated' : bar.style.width) : ''];")
        seen.append((banner, width, status))
        if banner.startswith("Model ready"):
            break
        time.sleep(0.25)
    assert seen[-1][0].startswith("Model ready"), seen[-5:]
    weights = [float(w.rstrip("%")) for b, w, _ in seen if "loading weights" in b and w.endswith("%")]
    assert len(weights) >= 3 and weights == sorted(weights) and 0 < weights[len(weights) // 2] < 100, weights
    assert any(w == "animated" for b, w, _ in seen if "dequantizing" in b)  # no fraction: no bar stuck at 0 %
    not_ready = [s for b, _, s in seen if not b.startswith("Model ready")]
    assert not_ready and not any("Ready" in s for s in not_ready), not_ready[-3:]
    assert any("still loading" in s for s in not_ready)
    _wait(browser, lambda d: "Ready when you are." in _status(d), 10, "the status to say ready")
    # a run on the loaded model: the acceptance chart spans the rounds that ran, ticked at whole rounds, and its
    # draft-length line is drawn first (beneath the sequences that accepted all of it)
    from app_fakes import GOOD
    from fake_app import CHUNK

    from app.charts import DRAFT_LENGTH_COLOUR

    pick_humaneval0(browser)
    _set_number(browser, "#bass-k input[type=number]", "2")
    _click(browser, "#bass-generate")
    _ranked(browser)
    last_round = -(-len(GOOD) // CHUNK)
    strokes = [p.get_attribute("stroke") for p in browser.find_elements("css selector",
                                                                           "#bass-accept-plot g.mark-line path")]
    assert strokes and strokes[0] == DRAFT_LENGTH_COLOUR and len(strokes) == 3, strokes
    labels = browser.execute_script("return [...document.querySelectorAll('#bass-accept-plot g.role-axis')]"
                                    ".filter(a => a.getAttribute('aria-label')?.includes('X-axis'))"
                                    ".flatMap(a => [...a.querySelectorAll('g.role-axis-label text')])"
                                    ".map(t => t.textContent);")
    assert labels and all(re.fullmatch(r"\d+", t) for t in labels), labels
    assert last_round / 2 <= max(map(int, labels)) <= last_round, (labels, last_round)
