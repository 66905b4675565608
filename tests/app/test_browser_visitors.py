"""Several visitors, and a visitor's mistakes, in real browsers: the app around a scripted engine that batches
(`fake_app.py PORT batching`), Debian's Chromium through Selenium (`test_browser`'s helpers)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from test_browser import _click, _open, _set_number, _wait, new_driver, serving

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


def _he0(driver) -> None:
    from selenium.webdriver.common.keys import Keys

    picker = driver.find_element("css selector", "#bass-problem input")
    picker.click()
    picker.send_keys("HumanEval/0 ")
    _wait(driver, lambda d: [o for o in d.find_elements("css selector", "#bass-problem li")
                             if o.text.startswith("HumanEval/0 ")], 20, "the HumanEval/0 option")
    picker.send_keys(Keys.ENTER)
    _wait(driver, lambda d: "def has_close_elements" in
          d.find_element("css selector", "#bass-prompt textarea").get_attribute("value"), 20, "the prompt")


def _ranked(driver, n: int):
    return _wait(driver, lambda d: (lambda c: len(c) == n and c)(
        d.find_elements("css selector", "#bass-candidates .bass-ranked")), RUN_S, f"{n} ranked cards")


def test_two_visitors_generate_at_once_each_with_their_own_result(batching_app, visitor, second_visitor):
    from fake_app import ADD_PROMPT, ADD_TESTS

    browser, second_browser = visitor, second_visitor
    url, record = batching_app
    _open(browser, url)
    _open(second_browser, url)
    _he0(browser)
    _set_number(browser, "#bass-k input[type=number]", "2")
    _fill(second_browser, ADD_PROMPT, ADD_TESTS, 2)
    _click(browser, "#bass-generate")
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
    """8 seats: a run of k = 4 decodes, one of k = 8 waits for it, sees its place, and leaves on Stop."""
    from fake_app import ADD_PROMPT, ADD_TESTS

    browser, second_browser = visitor, second_visitor
    url, _ = batching_app
    _open(browser, url)
    _open(second_browser, url)
    _he0(browser)
    _set_number(browser, "#bass-k input[type=number]", "4")
    _fill(second_browser, ADD_PROMPT, ADD_TESTS, 8)
    _click(browser, "#bass-generate")
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
    _he0(browser)
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
