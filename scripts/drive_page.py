"""One visitor's generation through a running app's page, with the page's defaults, in Debian's Chromium.

    python scripts/drive_page.py http://127.0.0.1:7860/ [--timeout-s 900]

Opens the page, waits for the model banner to say it is ready (printing the load's progress as the page shows
it), picks HumanEval/0, presses Generate and waits for the ranked candidates; prints the status, the summary,
the note above the cards and each card's badge. Exits 1 if the page showed an error instead.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "app"))

from test_browser import _click, _open, new_driver, pick_humaneval0  # noqa: E402


def _text(driver, selector: str) -> str:
    found = driver.find_elements("css selector", selector)
    return found[0].text.strip() if found else ""


def _wait_for_model(driver, timeout_s: float) -> None:
    """Print the banner each time it changes, until it says the model is ready (or failed)."""
    shown, deadline = "", time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        banner = _text(driver, "#bass-model-status")
        if banner != shown:
            width = driver.execute_script("const f = document.querySelector('#bass-model-status .bass-bar-fill');"
                                          "return f ? f.style.width || 'animated' : '';")
            status = _text(driver, "#bass-status").replace("\n", " · ")
            print(f"[{time.strftime('%H:%M:%S')}] banner: {banner.replace(chr(10), ' · ')}"
                  f"{' · bar ' + width if width else ''} | status: {status}", flush=True)
            shown = banner
        if banner.startswith(("Model ready", "⚠")):
            return
        time.sleep(1.0)
    raise SystemExit(f"the model was not ready within {timeout_s} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("url")
    parser.add_argument("--timeout-s", type=float, default=900.0)
    a = parser.parse_args()
    driver = new_driver(Path(tempfile.mkdtemp(prefix="drive-page-")))
    try:
        driver.set_window_size(1440, 1800)
        _open(driver, a.url)
        _wait_for_model(driver, a.timeout_s)
        pick_humaneval0(driver)
        began = time.monotonic()
        _click(driver, "#bass-generate")
        deadline = began + a.timeout_s
        while time.monotonic() < deadline:
            if driver.find_elements("css selector", "#bass-status .bass-error"):
                print("status:", _text(driver, "#bass-status"))
                raise SystemExit(1)
            if driver.find_elements("css selector", "#bass-candidates .bass-ranked"):
                break
            time.sleep(1.0)
        else:
            raise SystemExit(f"no ranked candidates within {a.timeout_s} s")
        badges = driver.execute_script("return [...document.querySelectorAll('#bass-candidates .bass-ranked "
                                       ".bass-badge')].map(b => b.innerText.trim());")
        print(f"ranked after {time.monotonic() - began:.1f} s")
        print("status:", _text(driver, "#bass-status").replace("\n", " · "))
        print("summary:", _text(driver, "#bass-summary"))
        print("note:", _text(driver, "#bass-candidates .bass-note"))
        print("badges:", badges)
    finally:
        driver.quit()


if __name__ == "__main__":
    main()
