"""The command line: every bad input is a one-line message and exit code 2, never a traceback; Ctrl-C ends a
run within a second and leaves no process and no directory behind."""

import os
import signal
import subprocess
import sys
import time

import pytest
from sandbox_cases import ADD, ROOT, sandbox_processes

from sandbox import SandboxConfig


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sandbox", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env=env)


@pytest.fixture
def files(tmp_path):
    (tmp_path / "cand.py").write_text(ADD)
    (tmp_path / "tests.py").write_text("assert add(1, 2) == 3\n")
    (tmp_path / "notjson.jsonl").write_text("this is not JSON\n")
    (tmp_path / "binary.jsonl").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "notutf8.py").write_bytes(b"x = '\xff\xfe'\n")
    return tmp_path


BAD = {
    "missing_candidate": (["run", "{d}/missing.py"], "no such file"),
    "missing_tests": (["run", "{d}/cand.py", "{d}/missing_tests.py"], "no such file"),
    "directory_candidate": (["run", "{d}"], "is a directory"),
    "binary_candidate": (["run", "{d}/notutf8.py"], "UTF-8"),
    "timeout_inf": (["run", "{d}/cand.py", "--timeout", "inf"], "timeout"),
    "timeout_1e300": (["run", "{d}/cand.py", "--timeout", "1e300"], "timeout"),
    "timeout_nan": (["run", "{d}/cand.py", "--timeout", "nan"], "timeout"),
    "memory_huge": (["run", "{d}/cand.py", "--memory-mb", "99999999999"], "memory"),
    "solutions_missing": (["humaneval", "--solutions", "{d}/none.jsonl"], "no such file"),
    "solutions_not_json": (["humaneval", "--solutions", "{d}/notjson.jsonl"], "JSON"),
    "solutions_binary": (["humaneval", "--solutions", "{d}/binary.jsonl"], "UTF-8"),
    "solutions_directory": (["humaneval", "--solutions", "{d}"], "is a directory"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_a_message_and_exit_2(files, case):
    args, expected = BAD[case]
    result = _cli(*(a.format(d=files) for a in args))
    assert result.returncode == 2, result
    assert "Traceback" not in result.stderr and expected.lower() in result.stderr.lower(), result.stderr


def test_config_bounds_say_what_to_give():
    for bad in (float("inf"), float("nan"), 1e300, 3601):
        with pytest.raises(ValueError, match="timeout_s"):
            SandboxConfig(timeout_s=bad)
    with pytest.raises(ValueError, match="memory_mb"):
        SandboxConfig(memory_mb=10**11)
    with pytest.raises(ValueError, match="batch_memory_mb"):
        SandboxConfig(memory_mb=512, batch_memory_mb=256)


def test_ctrl_c_ends_the_run_within_a_second_leaving_nothing(tmp_path):
    work = tmp_path / "tmp"
    work.mkdir()
    work.chmod(0o755)
    (tmp_path / "sleep.py").write_text("import time\ntime.sleep(100)\n")
    env = dict(os.environ, TMPDIR=str(work))
    before = set(sandbox_processes())
    proc = subprocess.Popen([sys.executable, "-m", "sandbox", "run", str(tmp_path / "sleep.py"), "--timeout", "100"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not set(sandbox_processes()) - before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert set(sandbox_processes()) - before, "the candidate never started"
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    sent = time.monotonic()
    _, stderr = proc.communicate(timeout=30)
    took = time.monotonic() - sent
    assert took < 1.0 and proc.returncode == 130 and "interrupted" in stderr and "Traceback" not in stderr, (took,
                                                                                                          stderr)
    assert list(work.iterdir()) == []
    assert not set(sandbox_processes()) - before
