"""The working directory is a tmpfs of the candidate's own: bounded in bytes and in files, out of the
host's disk, and gone with its mount namespace, so Ctrl-C ends a run at once whatever the candidate made."""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import pytest
from sandbox_cases import ROOT, interruptible, sandbox_processes

from sandbox import SandboxConfig, Status, run_candidates

pytestmark = pytest.mark.slow  # Ctrl-C after seconds of a candidate filling its directory

FILL = """
import errno, json, os
made, failure = 0, None
while made < 100_000:
    try:
        open(f"f{made}", "w").close()
        made += 1
    except OSError as exc:
        failure = errno.errorcode[exc.errno]
        break
big = None
try:
    with open("big", "wb") as out:
        for _ in range(16):
            out.write(b"x" * (1 << 20))
            out.flush()
except OSError as exc:
    big = errno.errorcode[exc.errno]
print(json.dumps({"made": made, "failure": failure, "big": big, "cwd": os.getcwd()}))
"""


def test_the_working_directory_is_bounded_in_files_and_bytes(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the runner's workdirs go here
    tmp_path.chmod(0o755)
    [outcome] = run_candidates([FILL], None, config=SandboxConfig(max_files=500, max_disk_mb=8, timeout_s=20))
    assert outcome.status is Status.RAN, outcome
    report = json.loads(outcome.stdout)
    assert 400 < report["made"] < 500 and report["failure"] == "ENOSPC", report
    assert report["big"] == "ENOSPC", report  # 16 MB into 8 MB: the tmpfs is full before RLIMIT_FSIZE's 64
    assert report["cwd"].startswith(str(tmp_path)) and list(tmp_path.iterdir()) == []  # nothing on the host's disk


MAKE_DIRECTORIES = """
import os
print("started", flush=True)
made = 0
while True:
    try:
        os.mkdir(f"d{made}")
    except OSError:
        pass
    made += 1
"""


def test_ctrl_c_ends_the_run_within_a_second_whatever_the_candidate_made(tmp_path):
    work = tmp_path / "tmp"
    work.mkdir()
    work.chmod(0o755)
    (tmp_path / "fill.py").write_text(MAKE_DIRECTORIES)
    before = set(sandbox_processes())
    proc = subprocess.Popen([sys.executable, "-m", "sandbox", "run", str(tmp_path / "fill.py"), "--timeout", "100"],
                            cwd=ROOT, env=dict(os.environ, TMPDIR=str(work)), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=interruptible)
    deadline = time.monotonic() + 30
    while not set(sandbox_processes()) - before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert set(sandbox_processes()) - before, "the candidate never started"
    time.sleep(3)  # on the host's disk this made some 80,000 directories, and their removal took seconds
    proc.send_signal(signal.SIGINT)
    sent = time.monotonic()
    _, stderr = proc.communicate(timeout=60)
    took = time.monotonic() - sent
    assert took < 1.0 and proc.returncode == 130 and "Traceback" not in stderr, (took, stderr)
    assert list(work.iterdir()) == []
    assert not set(sandbox_processes()) - before
