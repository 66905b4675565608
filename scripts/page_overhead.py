"""What the page costs the engine: one request through the Python API, then the same request through the page.

    python scripts/page_overhead.py [--target embedded] [--k 4] [--max-new 160] [--seed 1] [--repeats 3]
                                    [--app-dir DIR] [--cpu-interval-s S]

The request is HumanEval/0 with the page's defaults (its sampling, the fixed draft length of a seeded run) and a
seed, so that both runs write the same tokens in the same rounds. The API run calls `Engine.generate` in this
process (after a short warm-up run); the page run starts `python -m app` (from --app-dir, default this checkout)
and presses Generate in Debian's Chromium on the same machine (after a warm-up run too), then reads the engine's
own time (prefill + decode) from the batch statistics of the run's download, which the app writes under /tmp.
Each side runs the request --repeats times and keeps the fastest (other work on a shared machine only slows a
run down). Prints both, and the page's extra share. --cpu-interval-s overrides `app.throttle.CPU_INTERVAL_S`
in the app, to see what the live updates cost.
Heavy (two loads of the model, a browser): run it alone on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
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


def api_seconds(target: str, k: int, max_new: int, seed: int, repeats: int) -> list[float]:
    """The engine's prefill + decode seconds for the request, called from Python as the page's session would."""
    from app.problems import load_problems
    from app.session import EngineSession, ModelPair
    from app.settings import DEFAULT_TEMPERATURE, DEFAULT_TOP_P, METHOD_LABELS, parse_settings
    from bass import Engine

    config = EngineSession(env={}).config_for(ModelPair(target, target))
    engine = Engine(config)
    p = load_problems()[0]

    def run(tokens: int):
        s = parse_settings(p.prompt, p.editable_tests(), "auto", k, DEFAULT_TEMPERATURE, DEFAULT_TOP_P, tokens, 0,
                           METHOD_LABELS["bass"], None, None, None, seed)
        return engine.generate(s.engine_prompt, k=s.k, params=s.params, method=s.method, chat=s.chat,
                               draft_length=s.draft_length)

    run(8)  # warm-up
    seconds = []
    for _ in range(repeats):
        stats = run(max_new).stats
        seconds.append(stats.prefill_s + stats.decode_s)
    engine.close()
    return seconds


def page_seconds(target: str, k: int, max_new: int, seed: int, repeats: int, app_dir: Path,
                 cpu_interval_s: float | None) -> list[tuple[float, float]]:
    """Per run, (the engine's prefill + decode seconds, seconds from the click to the ranked cards) through the
    page."""
    port = _free_port()
    env = {**os.environ, "BASS_TARGET": target, "PORT": str(port), "GRADIO_ANALYTICS_ENABLED": "False",
           "HF_HUB_OFFLINE": "1"}
    log_path = Path(tempfile.mkdtemp()) / "app.log"
    with log_path.open("w") as log:
        command = ["-m", "app"] if cpu_interval_s is None else [
            "-c", f"import runpy, app.throttle as t; t.CPU_INTERVAL_S = {cpu_interval_s}; "
                  "runpy.run_module('app', run_name='__main__')"]
        app = subprocess.Popen([sys.executable, *command], cwd=app_dir, env=env, stdout=log,
                               stderr=subprocess.STDOUT)
    driver = new_driver(Path(tempfile.mkdtemp()))
    try:
        url = f"http://127.0.0.1:{port}/"
        for _ in range(600):
            try:
                urllib.request.urlopen(url, timeout=2)
                break
            except OSError:
                time.sleep(1)
        driver.set_window_size(1440, 1800)
        _open(driver, url)
        while "Model ready" not in driver.find_element("css selector", "#bass-model-status").text:
            time.sleep(1)
        pick_humaneval0(driver)
        _set_number(driver, "#bass-k input[type=number]", str(k))
        _set_number(driver, "#bass-seed input", str(seed))
        runs = []
        for tokens in (8, *[max_new] * repeats):  # a warm-up, then the measured runs
            _set_number(driver, "#bass-max-new input[type=number]", str(tokens))
            for old in driver.find_elements("css selector", "#bass-candidates .bass-ranked"):
                driver.execute_script("arguments[0].remove()", old)
            began = time.monotonic()
            _click(driver, "#bass-generate")
            while not driver.find_elements("css selector", "#bass-candidates .bass-ranked"):
                if driver.find_elements("css selector", "#bass-status .bass-error"):
                    raise SystemExit(driver.find_element("css selector", "#bass-status").text)
                time.sleep(0.2)
            if tokens == max_new:
                to_ranked = time.monotonic() - began
                batch = _exported_batch(began, seed, max_new)
                runs.append((batch["prefill_s"] + batch["decode_s"], to_ranked))
        return runs
    finally:
        driver.quit()
        app.terminate()
        app.wait(30)


def _exported_batch(since: float, seed: int, max_new: int) -> dict:
    """The batch statistics of the run's download (`app.export` writes it under /tmp/bass-app-*), found by its
    settings among those written since `since` (a time.monotonic reading)."""
    written_after = time.time() - (time.monotonic() - since)
    for path in sorted(Path(tempfile.gettempdir()).glob("bass-app-*/*/bass_candidates.json"),
                       key=lambda p: p.stat().st_mtime, reverse=True):
        data = json.loads(path.read_text())
        if path.stat().st_mtime >= written_after and (data["settings"]["seed"],
                                                       data["settings"]["max_new_tokens"]) == (seed, max_new):
            return data["batch"]
    raise SystemExit("the run's download was not found under /tmp/bass-app-*")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="embedded")
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--max-new", type=int, default=160)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--app-dir", type=Path, default=REPO)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cpu-interval-s", type=float, default=None)
    parser.add_argument("--skip-api", action="store_true")
    a = parser.parse_args()
    api = None
    if not a.skip_api:
        seconds = api_seconds(a.target, a.k, a.max_new, a.seed, a.repeats)
        api = min(seconds)
        print(f"API : engine {api:.1f} s (runs: {', '.join(f'{x:.1f}' for x in seconds)})", flush=True)
    runs = page_seconds(a.target, a.k, a.max_new, a.seed, a.repeats, a.app_dir, a.cpu_interval_s)
    page, to_ranked = min(runs)
    print(f"page: engine {page:.1f} s, click to ranked cards {to_ranked:.1f} s (runs: "
          f"{', '.join(f'{e:.1f}' for e, _ in runs)}), app from {a.app_dir}"
          + ("" if a.cpu_interval_s is None else f", CPU interval {a.cpu_interval_s} s"))
    if api is not None:
        print(f"the page's extra: {100 * (page / api - 1):+.1f} %")


if __name__ == "__main__":
    main()
