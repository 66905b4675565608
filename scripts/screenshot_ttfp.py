"""Screenshots of time to first pass on a running app, in Debian's Chromium.

    python scripts/screenshot_ttfp.py http://127.0.0.1:7860/ [--max-new 64] [--compare-max-new 64]

Generate: HumanEval/0, k=4, no time budget; saves `app_ttfp_live.png` the moment the first PASS badge shows
while another card still decodes (the window is tall enough from the start, so the shot is taken at once,
without a resize), then `app_ttfp_done.png` (full page) with the summary's time to first pass. Compare:
the three methods (with "stop at the first pass" unless --compare-all, to spare a slow CPU); saves
`app_compare_ttfp.png`. Facts go to `app_ttfp.json`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "app"))

from test_browser import _click, _full_page_screenshot, _open, _set_number  # noqa: E402

SHOTS = REPO / "assets" / "screenshots"  # the README's pictures


def _driver():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from test_browser import CHROME_FLAGS, CHROMEDRIVER, CHROMIUM

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROME_FLAGS:
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


def _badges(driver) -> list[str]:
    # One script call reads them all: the cards are re-rendered between rounds, so element handles go stale.
    return driver.execute_script("return [...document.querySelectorAll('#bass-candidates .bass-card-head "
                                 ".bass-badge')].map(b => b.innerText.trim());")


def pick_humaneval0(driver) -> None:
    from selenium.webdriver.common.keys import Keys

    picker = driver.find_element("css selector", "#bass-problem input")
    picker.click()
    picker.send_keys("HumanEval/0 ")
    time.sleep(1.0)
    picker.send_keys(Keys.ENTER)
    time.sleep(1.0)


def _set_seed(driver, seed: str) -> None:
    """The Seed box (#bass-seed, a text box: blank draws a new seed each run)."""
    from selenium.webdriver.common.keys import Keys

    box = driver.find_element("css selector", "#bass-seed input")
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(seed, Keys.TAB)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--max-new", default="64")
    ap.add_argument("--compare-max-new", default="64")
    ap.add_argument("--compare-all", action="store_true", help="let every candidate finish in the comparison")
    ap.add_argument("--seed", default="0")
    ap.add_argument("--skip-compare", action="store_true")
    ap.add_argument("--prefix", default="app_ttfp", help="file names of the Generate shots and the facts")
    ap.add_argument("--timeout-s", type=float, default=900, help="per run, counted from the click (queue included)")
    a = ap.parse_args()
    facts: dict = {"max_new_tokens": a.max_new, "seed": a.seed, "compare_max_new_tokens": a.compare_max_new,
                   "compare_stop_at_first_pass": not a.compare_all}
    d = _driver()
    try:
        d.set_window_size(1440, 3000)
        _open(d, a.url)
        pick_humaneval0(d)
        _set_number(d, "#bass-k input[type=number]", "4")
        _set_number(d, "#bass-max-new input[type=number]", a.max_new)
        _set_number(d, "#bass-budget input[type=number]", "0")
        _set_seed(d, a.seed)
        _click(d, "#bass-generate")
        t0 = time.monotonic()
        live_saved = False
        while time.monotonic() - t0 < a.timeout_s:
            badges = _badges(d)
            ranked = d.find_elements("css selector", "#bass-candidates .bass-ranked")
            if not live_saved and "PASS" in badges and "running" in badges:
                facts["first_pass_badge_s"] = round(time.monotonic() - t0, 1)
                d.save_screenshot(str(SHOTS / f"{a.prefix}_live.png"))
                facts["badges_at_first_pass"] = badges
                facts["badges_after_shot"] = _badges(d)  # still a running card: the shot shows the moment
                facts["status_at_first_pass"] = d.find_element("css selector", "#bass-status").text
                live_saved = True
            if ranked or d.find_elements("css selector", "#bass-status .bass-error"):
                break
            time.sleep(0.5)
        facts["done_s"] = round(time.monotonic() - t0, 1)
        facts["summary"] = d.find_element("css selector", "#bass-summary").text
        facts["status"] = d.find_element("css selector", "#bass-status").text
        facts["cards"] = [c.text.splitlines()[0] for c in d.find_elements("css selector", ".bass-ranked")]
        _full_page_screenshot(d, SHOTS / f"{a.prefix}_done.png")
        print(json.dumps(facts, indent=2), flush=True)

        if a.skip_compare:
            return
        d.set_window_size(1440, 1800)
        _set_number(d, "#bass-max-new input[type=number]", a.compare_max_new)
        if not a.compare_all:
            _click(d, "#bass-stop-first input")
        _click(d, "#bass-compare")
        t1 = time.monotonic()
        while time.monotonic() - t1 < a.timeout_s:
            if d.find_elements("css selector", "#bass-compare-status .bass-ok, #bass-compare-status .bass-error"):
                break
            time.sleep(1.0)
        time.sleep(2.0)
        facts["compare_s"] = round(time.monotonic() - t1, 1)
        facts["compare_status"] = d.find_element("css selector", "#bass-compare-status").text
        facts["compare_table"] = d.find_element("css selector", "#bass-compare-table").text
        facts["ttfp_bars"] = len(d.find_elements("css selector", "#bass-ttfp-plot g.mark-rect path"))
        print(json.dumps(facts, indent=2), flush=True)
        _full_page_screenshot(d, SHOTS / "app_compare_ttfp.png")
    finally:
        (SHOTS / f"{a.prefix}.json").write_text(json.dumps(facts, indent=2) + "\n")
        d.quit()
    print(json.dumps(facts, indent=2))


if __name__ == "__main__":
    main()
