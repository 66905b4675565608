"""The command line: every bad input is a one-line message and exit code 2, never a traceback; Ctrl-C ends a
run within a second and leaves no process and no directory behind."""

import os
import resource
import signal
import subprocess
import sys
import time

import pytest
from sandbox_cases import ADD, ROOT, interruptible, sandbox_processes

from sandbox import Job, SandboxConfig, split_tests


def _at_most_4_gb() -> None:  # so that a CLI that reads /dev/zero fails fast rather than fills the host
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sandbox", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=30, env=env, preexec_fn=_at_most_4_gb)


@pytest.fixture
def files(tmp_path):
    (tmp_path / "cand.py").write_text(ADD)
    (tmp_path / "tests.py").write_text("assert add(1, 2) == 3\n")
    (tmp_path / "notjson.jsonl").write_text("this is not JSON\n")
    (tmp_path / "binary.jsonl").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "notutf8.py").write_bytes(b"x = '\xff\xfe'\n")
    os.mkfifo(tmp_path / "fifo.py")  # nobody writes to it: reading it would block forever
    (tmp_path / "unary.py").write_text("assert add(1, " + "-" * 200_000 + "1) == 0\n")
    (tmp_path / "sum.py").write_text("assert add(1, 1) == " + "+".join(["1"] * 200_000) + "\n")
    (tmp_path / "nested.py").write_text("assert add(1, 1) == " + "-" * 300 + "2\n")  # parses: 300 levels
    (tmp_path / "huge.py").write_text("# " + "x" * (2 << 20) + "\n" + ADD)
    (tmp_path / "nested.jsonl").write_text("[" * 100_000 + "\n")
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
    "fifo_tests": (["run", "{d}/cand.py", "{d}/fifo.py"], "is a named pipe, not a regular file"),
    "dev_zero_candidate": (["run", "/dev/zero"], "is a character device, not a regular file"),
    "dev_zero_tests": (["run", "{d}/cand.py", "/dev/zero"], "is a character device, not a regular file"),
    "fifo_solutions": (["humaneval", "--solutions", "{d}/fifo.py"], "is a named pipe"),
    "huge_candidate": (["run", "{d}/huge.py"], "larger than the 1 MB"),
    "unary_minus_200000": (["run", "{d}/cand.py", "{d}/unary.py"], "nest too deeply to parse"),
    "sum_of_200000": (["run", "{d}/cand.py", "{d}/sum.py"], "nest too deeply to parse"),
    "nested_300": (["run", "{d}/cand.py", "{d}/nested.py"], "more than the 200"),
    "solutions_nested_json": (["humaneval", "--solutions", "{d}/nested.jsonl"], "nested too deeply"),
    "workers_million": (["run", "{d}/cand.py", "--workers", "1000000"], "workers must be a whole number from 1"),
    "workers_zero": (["run", "{d}/cand.py", "--workers", "0"], "workers must be a whole number from 1"),
    "entry_point_not_a_name": (["run", "{d}/cand.py", "{d}/tests.py", "--entry-point", "os.system"],
                               "entry_point must be the name of a function"),
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
    for field, bad in (("workers", 10**6), ("workers", True), ("max_processes", 10**6), ("max_open_files", 2),
                       ("max_output_bytes", 1 << 40), ("memory_mb", "512")):
        with pytest.raises(ValueError, match=f"{field} must be a whole number from"):
            SandboxConfig(**{field: bad})
    for job in (dict(program="x = 1\n" * (1 << 20)), dict(program=ADD, tests="#" * (2 << 20)),
                dict(program=b"print(1)"), dict(program=ADD, entry_point="add; import os")):
        with pytest.raises(ValueError, match="the job's|entry_point must be"):
            Job(**job)
    with pytest.raises(ValueError, match="nest 302 levels deep, more than the 200"):
        split_tests("assert add(1, 1) == " + "-" * 298 + "2\n")


def test_ctrl_c_ends_the_run_within_a_second_leaving_nothing(tmp_path):
    work = tmp_path / "tmp"
    work.mkdir()
    work.chmod(0o755)
    (tmp_path / "sleep.py").write_text("import time\ntime.sleep(100)\n")
    env = dict(os.environ, TMPDIR=str(work))
    before = set(sandbox_processes())
    proc = subprocess.Popen([sys.executable, "-m", "sandbox", "run", str(tmp_path / "sleep.py"), "--timeout", "100"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=interruptible)
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
