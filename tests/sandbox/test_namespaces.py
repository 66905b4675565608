"""Nothing of the host or of the tests is visible to the candidate: its own PID namespace with a fresh
/proc, tests it cannot read, and no earlier candidate's code left in the memory it starts from."""

import hashlib
import json
import subprocess
import sys
import uuid

from sandbox_cases import ROOT

from sandbox import SandboxConfig, Status, run_candidates

LIST_PROCESSES = """
import os
pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
lines = []
for pid in pids:
    try:
        lines.append(open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\\0", b" ").decode())
    except OSError:
        pass
print(os.getpid(), pids, any("pytest" in line for line in lines))
"""

# A wrong f that finds the tests through the host's command lines and answers what their asserts expect.
READ_THE_TESTS = r"""
import os, re
answers = {}
for pid in os.listdir("/proc"):
    try:
        args = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
    except OSError:
        continue
    for arg in args:
        if arg.endswith(b".py") and os.path.isfile(arg):
            try:
                text = open(arg).read()
            except OSError:
                continue
            for x, y in re.findall(r"candidate\((\d+)\) == (\d+)", text):
                answers[int(x)] = int(y)

def f(x):
    return answers.get(x, 0)
"""


def test_candidate_sees_only_its_own_processes():
    [outcome] = run_candidates([LIST_PROCESSES], None)
    pid, leaked = outcome.stdout.split()[0], outcome.stdout.split()[-1]
    assert outcome.status is Status.RAN and "pidns" in outcome.isolation, outcome
    pids = json.loads(outcome.stdout.split(" ", 1)[1].rsplit(" ", 1)[0])
    assert int(pid) <= 3 and max(pids) <= 3 and leaked == "False", outcome.stdout  # its init and itself
    # Switched off, the host is visible again, and the report says so (no `pidns`, not strict).
    [bare] = run_candidates([LIST_PROCESSES], None, config=SandboxConfig(disabled_layers=frozenset({"pidns"})))
    assert "pidns" not in bare.isolation and not bare.isolation.startswith("strict")
    assert len(json.loads(bare.stdout.split(" ", 1)[1].rsplit(" ", 1)[0])) > 3


def test_a_candidate_cannot_pass_by_reading_the_tests(tmp_path):
    for folder in (tmp_path, *tmp_path.parents[:2]):  # readable by anyone: only the sandbox may hide it
        folder.chmod(0o755)
    (tmp_path / "cand.py").write_text(READ_THE_TESTS)
    (tmp_path / "tests.py").write_text("def check(candidate):\n    assert candidate(2) == 5\n"
                                       "    assert candidate(3) == 7\n")
    run = subprocess.run([sys.executable, "-m", "sandbox", "run", str(tmp_path / "cand.py"), str(tmp_path / "tests.py"),
                          "--entry-point", "f", "--json"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    [only] = json.loads(run.stdout)["candidates"]
    assert (only["status"], only["tests_passed"]) == ("failed", 0) and run.returncode == 1, only


def test_no_earlier_candidate_code_survives_in_a_later_candidate():
    token = uuid.uuid4().hex
    digest = hashlib.sha256(token.encode()).hexdigest()
    # Large, so that later payloads of the same template cannot simply overwrite the memory it was in.
    earlier = "# " + "padding " * 12_000 + f'\nTOKEN = "{token}"\n'
    scan = f"""
import ctypes, hashlib, re
found = False
with open("/proc/self/maps") as maps:
    for line in maps:
        fields = line.split()
        # The heap and anonymous mappings: where the template's memory (inherited by the fork) lies.
        if fields[1][:2] != "rw" or (len(fields) > 5 and fields[5] != "[heap]"):
            continue
        start, end = (int(x, 16) for x in fields[0].split("-"))
        data = ctypes.string_at(start, end - start)
        for match in re.finditer(rb'TOKEN = "([0-9a-f]{{32}})"', data):
            found = found or hashlib.sha256(match.group(1)).hexdigest() == "{digest}"
print("found" if found else "clean")
"""
    outcomes = run_candidates([earlier, earlier, scan, scan], None, config=SandboxConfig(workers=1, memory_mb=512))
    assert [o.status for o in outcomes] == [Status.RAN] * 4, [o.stderr[-300:] for o in outcomes]
    assert [o.stdout for o in outcomes[2:]] == ["clean\n", "clean\n"]
