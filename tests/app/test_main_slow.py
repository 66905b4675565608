"""app.main in a real server process: a stop by SIGTERM exits like Ctrl-C and removes the exports (CPU, no model):
the slow part of test_main.py."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a real server process


REPO = Path(__file__).resolve().parents[2]


# A page with no model that exports one file, then serves until stopped.
SERVER = """
import sys
import gradio as gr
from app.export import write_generation
from app.main import serve
print(write_generation({"candidates": []}), flush=True)
with gr.Blocks() as demo:
    gr.Markdown("up")
serve(demo, server_name="127.0.0.1", server_port=int(sys.argv[1]))
"""


def test_sigterm_closes_the_server_and_the_exit_removes_the_exports():
    """Without the handler the process dies of the signal (returncode -15) and its exports stay in /tmp."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-c", SERVER, str(port)], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env={"GRADIO_ANALYTICS_ENABLED": "False",
                                                                      "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    try:
        export = Path(proc.stdout.readline().strip())
        assert export.is_file(), export
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as resp:
                    assert resp.status == 200
                    break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read()
                time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, proc.stdout.read()
        assert not export.parent.parent.exists()  # the process's export folder went with it
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
