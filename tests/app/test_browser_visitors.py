"""Several visitors, and a visitor's mistakes, in real browsers: the app around a scripted engine that batches
(`fake_app.py PORT batching`), Debian's Chromium through Selenium (`test_browser`'s helpers)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from test_browser import _click, _open, _set_number, _wait, new_driver, pick_humaneval0, serving

pytestmark = pytest.mark.browser

RUN_S = 120


@pytest.fixture(scope="module")
def batching_app(tmp_path_factory) -> Iterator[tuple[str, Path]]:
    """(url, file holding the most requests that decoded in one round)."""
    folder = tmp_path_factory.mktemp("batching_app")
    record = folder / "most_requests_in_a_round"
    with serving([str(Path(__file__).with_name("fake_app.py")), "batching"], folder / "app.log",
                 BASS_FAKE_RECORD=str(record)) as url:
        yield url, record


def _driver(tmp_path) -> Iterator:
    driver = new_driver(tmp_path)
    yield driver
    driver.quit()


# Each visitor a browser of its own profile, hence its own Gradio session.
visitor = pytest.fixture(_driver)
second_visitor = pytest.fixture(_driver)


def _status(driver) -> str:
    return driver.find_element("css selector", "#bass-status").text


def _fill(driver, prompt: str, tests: str, k: int) -> None:
    box = driver.find_element("css selector", "#bass-prompt textarea")
    box.clear()
    box.send_keys(prompt)
    tests_box = driver.find_element("css selector", "#bass-tests textarea")
    tests_box.clear()
    tests_box.send_keys(tests)
    _set_number(driver, "#bass-k input[type=number]", str(k))


def _two_visitors(url: str, first, k_first: int, second, k_second: int) -> None:
    """The first visitor asks for HumanEval/0 and presses Generate; the second fills in the add prompt."""
    from flow_cases import ADD_PROMPT, ADD_TESTS

    _open(first, url)
    _open(second, url)
    pick_humaneval0(first)
    _set_number(first, "#bass-k input[type=number]", str(k_first))
    _fill(second, ADD_PROMPT, ADD_TESTS, k_second)
    _click(first, "#bass-generate")


def _ranked(driver, n: int):
    return _wait(driver, lambda d: (lambda c: len(c) == n and c)(
        d.find_elements("css selector", "#bass-candidates .bass-ranked")), RUN_S, f"{n} ranked cards")


def test_two_visitors_generate_at_once_each_with_their_own_result(batching_app, visitor, second_visitor):
    browser, second_browser = visitor, second_visitor
    url, record = batching_app
    _two_visitors(url, browser, 2, second_browser, 2)
    _click(second_browser, "#bass-generate")
    first, second = _ranked(browser, 2), _ranked(second_browser, 2)
    assert record.read_text() == "2", "the two requests never decoded in the same round"
    assert "Done." in _status(browser) and "Done." in _status(second_browser)
    best_first = browser.find_element("css selector", "#bass-best-code").text
    best_second = second_browser.find_element("css selector", "#bass-best-code").text
    assert "has_close_elements" in best_first and "return a + b" not in best_first
    assert "return a + b" in best_second and "has_close_elements" not in best_second
    assert [c.find_element("css selector", ".bass-badge").text for c in first] == ["PASS", "FAIL"]
    assert [c.find_element("css selector", ".bass-badge").text for c in second] == ["PASS", "FAIL"]
    assert all(c.find_elements("css selector", "button.bass-copy") for c in first + second)


def test_stop_while_in_line_leaves_the_line_and_the_other_visitor_goes_on(batching_app, visitor, second_visitor):
    """16 seats: a run of k = 4 decodes, one of k = 16 waits for it, sees its place, and leaves on Stop."""
    browser, second_browser = visitor, second_visitor
    _two_visitors(batching_app[0], browser, 4, second_browser, 16)
    _wait(browser, lambda d: "Generating" in _status(d), 60, "the first run to decode")
    _click(second_browser, "#bass-generate")
    _wait(second_browser, lambda d: "you are 1st in line" in _status(d), 60, "the second visitor's place")
    assert "to wait" in _status(second_browser) or "in a moment" in _status(second_browser)
    _click(second_browser, "#bass-stop")
    _wait(second_browser, lambda d: "Stopped while waiting in line: nothing was generated." in _status(d), 60,
          "the second visitor out of the line")
    assert "Generating" in _status(browser)  # the first visitor's run goes on
    _ranked(browser, 4)
    assert "Done." in _status(browser)
    assert not second_browser.find_elements("css selector", "#bass-candidates .bass-ranked")


def test_a_negative_value_and_broken_tests_get_named_messages(batching_app, visitor):
    url, browser = batching_app[0], visitor
    _open(browser, url)
    pick_humaneval0(browser)
    _set_number(browser, "#bass-budget input[type=number]", "-5")
    _click(browser, "#bass-generate")
    box = _wait(browser, lambda d: d.find_elements("css selector", "#bass-status .bass-error"), 60, "an error box")
    assert "Time budget (s) must be a number from 0 to 3600, got -5" in box[0].text
    _set_number(browser, "#bass-budget input[type=number]", "0")
    tests = browser.find_element("css selector", "#bass-tests textarea")
    tests.clear()
    tests.send_keys("def check(candidate):\n    assert candidate([1.0, 2.0], 0.5 == False\n")
    _click(browser, "#bass-generate")
    _wait(browser, lambda d: "The unit tests do not parse" in _status(d), 60, "the tests' error")
    assert "nothing was generated" in _status(browser)
    assert not browser.find_elements("css selector", "#bass-candidates .bass-card")


def test_at_1280_by_800_nothing_passing_at_k8_with_a_seed(batching_app, visitor):
    """The status scrolls into view on Generate; nothing passes, so the best is 'best so far' without the green
    outline; the seed's note; every card has its copy button; the legend of 8 sequences is not cut."""
    browser = visitor
    browser.set_window_size(1280, 800)
    _open(browser, batching_app[0])
    pick_humaneval0(browser)
    tests = browser.find_element("css selector", "#bass-tests textarea")
    tests.clear()
    tests.send_keys("assert has_close_elements([1.0, 1.5], 0.1) is None\n")
    _set_number(browser, "#bass-k input[type=number]", "8")
    _set_number(browser, "#bass-seed input", "7")
    browser.execute_script("window.scrollTo(0, 0)")
    _click(browser, "#bass-generate")
    _wait(browser, lambda d: d.execute_script(
        "const r = document.querySelector('#bass-status').getBoundingClientRect();"
        "return r.top >= 0 && r.bottom <= window.innerHeight;"), 20, "the status in view")
    cards = _ranked(browser, 8)
    assert all(c.find_element("css selector", ".bass-badge").text == "FAIL" for c in cards)
    assert not browser.find_elements("css selector", ".bass-best")
    assert "Best so far — failed 0/1 tests (nothing passed)" in browser.find_element(
        "css selector", "#bass-best-code").text
    assert "Seed 7 reproduces these candidates" in browser.find_element("css selector", "#bass-candidates").text
    assert len(browser.find_elements("css selector", "#bass-candidates button.bass-copy")) == 8
    for plot in ("#bass-speed-plot", "#bass-accept-plot"):
        text = browser.find_element("css selector", plot).text
        assert "seq 07" in text and "seq 00" in text, text
        clipped = browser.execute_script(
            "const svg = document.querySelector(arguments[0] + ' svg');"
            "const legend = svg && svg.querySelector('g.role-legend');"
            "if (!legend) return 'no legend';"
            "const l = legend.getBoundingClientRect(), s = svg.getBoundingClientRect();"
            "return l.bottom <= s.bottom + 1 ? '' : `legend ${l.bottom} below ${s.bottom}`;", plot)
        assert clipped == "", f"{plot}: {clipped}"
