"""What the page costs the engine: one request through the Python API and the same request through the page, in turn.

    python scripts/page_overhead.py [--target embedded] [--k 4] [--max-new 160] [--seed 1] [--pairs 3]
                                    [--app-dir DIR] [--cpu-interval-s S]

The request is HumanEval/0 with the page's defaults (its sampling, the fixed draft length of a seeded run) and a
seed, so that both sides write the same tokens in the same rounds. The page side starts `python -m app` (from
--app-dir, default this checkout) and presses Generate in Debian's Chromium on the same machine; the API side calls
`Engine.generate` in this process. Both models stay loaded (twice the model's memory) and the two sides run one
after the other, --pairs times, so that other work on a shared machine slows both alike; each run's time is the
engine's own (prefill + decode: for the page, from the batch statistics of the run's download, which the app
writes under /tmp). Prints every run, each side's fastest, and the page's extra over the API by the fastest runs
and by the median of the pairs' ratios. --cpu-interval-s overrides `app.throttle.CPU_INTERVAL_S` in the app.
Heavy (two models, a browser): run it alone on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "app"))

from test_browser import _click, _free_port, _open, _set_number, new_driver, pick_humaneval0  # noqa: E402


class Api:
    """The request through `Engine.generate`, the engine configured as the page's session configures it."""

    def __init__(self, target: str, k: int, seed: int):
        from app.problems import load_problems
        from app.session import EngineSession, ModelPair
        from bass import Engine

        self.engine = Engine(EngineSession(env={}).config_for(ModelPair(target, target)))
        self.problem, self.k, self.seed = load_problems()[0], k, seed

    def run(self, max_new: int) -> float:
        from app.settings import DEFAULT_TEMPERATURE, DEFAULT_TOP_P, METHOD_LABELS, parse_settings

        p = self.problem
        s = parse_settings(p.prompt, p.editable_tests(), "auto", self.k, DEFAULT_TEMPERATURE, DEFAULT_TOP_P, max_new,
                           0, METHOD_LABELS["bass"], None, None, None, self.seed)
        stats = self.engine.generate(s.engine_prompt, k=s.k, params=s.params, method=s.method, chat=s.chat,
                                     draft_length=s.draft_length).stats
        return stats.prefill_s + stats.decode_s


class Page:
    """The request through the app's page: a server process and a browser, kept open between runs."""

    def __init__(self, target: str, k: int, seed: int, app_dir: Path, cpu_interval_s: float | None):
        self.seed = seed
        port = _free_port()
        env = {**os.environ, "BASS_TARGET": target, "PORT": str(port), "GRADIO_ANALYTICS_ENABLED": "False",
               "HF_HUB_OFFLINE": "1"}
        command = ["-m", "app"] if cpu_interval_s is None else [
            "-c", f"import runpy, app.throttle as t; t.CPU_INTERVAL_S = {cpu_interval_s}; "
                  "runpy.run_module('app', run_name='__main__')"]
        with (Path(tempfile.mkdtemp()) / "app.log").open("w") as log:
            self.app = subprocess.Popen([sys.executable, *command], cwd=app_dir, env=env, stdout=log,
                                        stderr=subprocess.STDOUT)
        self.driver = new_driver(Path(tempfile.mkdtemp()))
        url = f"http://127.0.0.1:{port}/"
        for _ in range(600):
            try:
                urllib.request.urlopen(url, timeout=2)
                break
            except OSError:
                time.sleep(1)
        self.driver.set_window_size(1440, 1800)
        _open(self.driver, url)
        while "Model ready" not in self.driver.find_element("css selector", "#bass-model-status").text:
            time.sleep(1)
        pick_humaneval0(self.driver)
        _set_number(self.driver, "#bass-k input[type=number]", str(k))
        _set_number(self.driver, "#bass-seed input", str(seed))

    def run(self, max_new: int) -> float:
        d = self.driver
        _set_number(d, "#bass-max-new input[type=number]", str(max_new))
        for old in d.find_elements("css selector", "#bass-candidates .bass-ranked"):
            d.execute_script("arguments[0].remove()", old)
        began = time.monotonic()
        _click(d, "#bass-generate")
        while not d.find_elements("css selector", "#bass-candidates .bass-ranked"):
            if d.find_elements("css selector", "#bass-status .bass-error"):
                raise SystemExit(d.find_element("css selector", "#bass-status").text)
            time.sleep(0.2)
        batch = _exported_batch(began, self.seed, max_new)
        return batch["prefill_s"] + batch["decode_s"]

    def close(self) -> None:
        self.driver.quit()
        self.app.terminate()
        self.app.wait(30)


def _exported_batch(since: float, seed: int, max_new: int) -> dict:
    """The batch statistics of the run's download (`app.export` writes it under /tmp/bass-app-*), found by its
    settings among those written since `since` (a time.monotonic reading)."""
    written_after = time.time() - (time.monotonic() - since)
    for _ in range(50):  # the page shows the ranking as the file is written
        for path in sorted(Path(tempfile.gettempdir()).glob("bass-app-*/*/bass_candidates.json"),
                           key=lambda p: p.stat().st_mtime, reverse=True):
            if path.stat().st_mtime < written_after:
                break
            data = json.loads(path.read_text())
            if (data["settings"]["seed"], data["settings"]["max_new_tokens"]) == (seed, max_new):
                return data["batch"]
        time.sleep(0.1)
    raise SystemExit("the run's download was not found under /tmp/bass-app-*")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="embedded")
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--max-new", type=int, default=160)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--app-dir", type=Path, default=REPO)
    parser.add_argument("--cpu-interval-s", type=float, default=None)
    a = parser.parse_args()
    page = Page(a.target, a.k, a.seed, a.app_dir, a.cpu_interval_s)
    try:
        api = Api(a.target, a.k, a.seed)
        page.run(8), api.run(8)  # warm-ups
        api_s, page_s = [], []
        for i in range(a.pairs):
            api_s.append(api.run(a.max_new))
            page_s.append(page.run(a.max_new))
            print(f"pair {i + 1}: API {api_s[-1]:.1f} s, page {page_s[-1]:.1f} s", flush=True)
        api.engine.close()
    finally:
        page.close()
    ratio = statistics.median(p / q for p, q in zip(page_s, api_s))
    print(f"fastest: API {min(api_s):.1f} s, page {min(page_s):.1f} s ({100 * (min(page_s) / min(api_s) - 1):+.1f} %); "
          f"median of the pairs' ratios {100 * (ratio - 1):+.1f} %; app from {a.app_dir}"
          + ("" if a.cpu_interval_s is None else f", CPU interval {a.cpu_interval_s} s"))


if __name__ == "__main__":
    main()
