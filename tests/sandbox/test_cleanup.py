"""Cleanup that cannot fail: whatever a candidate leaves in its directory, the directory is removed, its
parent is untouched, and every other candidate of the batch keeps its verdict."""

import os
import stat
import tempfile

from sandbox_cases import ADD, ADD_TESTS

from sandbox import SandboxConfig, Status, run_candidates
from sandbox.cleanup import remove_tree

DEEP = """
import os
print(os.getcwd(), flush=True)
for _ in range(3000):
    os.mkdir("d")
    os.chdir("d")
open("leaf", "w").write("x")
os.chmod(".", 0)
""" + ADD


def test_remove_tree_handles_depth_modes_and_links(tmp_path):
    top = tmp_path / "work"
    top.mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_text("keep")
    fd = os.open(top, os.O_RDONLY)
    for _ in range(3000):  # deeper than the recursion limit, longer than PATH_MAX as a path
        os.mkdir("d", dir_fd=fd)
        child = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.symlink(str(outside), "link", dir_fd=fd)
    os.close(fd)
    for sub in ("wide", "locked"):
        (top / sub).mkdir()
    for i in range(200):
        (top / "wide" / f"f{i}").write_text("x")
        (top / "wide" / f"sub{i}").mkdir()
    (top / "locked" / "inner").mkdir()
    (top / "locked").chmod(0)
    tmp_path.chmod(0o755)
    assert remove_tree(str(top)) is None
    assert not top.exists() and outside.read_text() == "keep"
    assert stat.S_IMODE(tmp_path.stat().st_mode) == 0o755  # the parent's mode is never changed
    assert remove_tree(str(top)) is None  # already gone: nothing to say


def test_batch_keeps_verdicts_and_workdirs_go_when_one_nests_3000_directories(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the runner's workdirs go here
    tmp_path.chmod(0o755)
    outcomes = run_candidates([ADD, DEEP, ADD], ADD_TESTS, entry_point="add",
                              config=SandboxConfig(timeout_s=20, workers=2))
    assert [o.status for o in outcomes] == [Status.PASSED] * 3, [o.detail for o in outcomes]
    assert list(tmp_path.iterdir()) == []  # every workdir, the 3,000-deep one included, is gone
    assert stat.S_IMODE(tmp_path.stat().st_mode) == 0o755
