"""Every repository path the docs cite exists: README.md, docs/*.md, bench/README.md, sandbox/README.md, and the
docstrings and comments of every Python file. And the other way round for run results: every file in bench/results/
is cited by those docs (a run's table, its JSON and its plot by `name.*`), or it does not belong there.

A cited path is one that starts at a top-level folder of the repository (`bench/results/sandbox_bench.txt`,
`tests/bass/test_engine.py`, `docs/engine.md`, `bass/runtime/graphs.py`, `kernels/`); one with a wildcard must
match a file.
A dated result file cited by its name alone (`real_bench_2026-12-03_h200_k8_fixed123.txt`) must be in
`bench/results/`. A path with a placeholder (`bench/results/<file>`, `bench.<name>`) is a pattern, not a citation.
The team's shared design notes live outside the repository and may not be cited at all: docs/design.md is the
repository's own.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from fnmatch import fnmatch
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOPS = ("app", "assets", "bass", "bench", "docs", "draft_training", "kernels", "sandbox", "scripts", "tests")
# a path from a top-level folder, not inside a longer path or a URL; a placeholder (<...>, {...}, $VAR) after it
# makes it a pattern
PATH = re.compile(r"(?<![\w./-])((?:" + "|".join(TOPS) + r")/(?:[\w./*-]*[\w/*])?)(?![\w{<$])")
DATED = re.compile(r"(?<![\w./-])([\w.-]*\d{4}-\d{2}-\d{2}[\w.*-]*\.(?:[a-z]+\b|\*))")
RESULTS = "bench/results"
DOCS = ("README.md", "docs/*.md", "bench/README.md", "sandbox/README.md")


def python_text(path: Path) -> str:
    """The docstrings (module, class, function) and comments of a Python file: where it cites paths."""
    source = path.read_text()
    parts = [tok.string for tok in tokenize.generate_tokens(io.StringIO(source).readline)
             if tok.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                parts.append(doc)
    return "\n".join(parts)


def missing(text: str, root: Path = ROOT) -> list[str]:
    """The cited paths of `text` that do not exist under `root`, and every citation of the shared design notes."""
    bad = []
    for cited in sorted(set(PATH.findall(text))):
        path = cited.rstrip("/")
        found = any(root.glob(path)) if "*" in path else (root / path).exists()
        if not found:
            bad.append(cited)
    for name in sorted(set(DATED.findall(text))):
        if not any((root / RESULTS).glob(name)):
            bad.append(f"{name} (not in {RESULTS}/)")
    if "DESIGN.md" in text or "DESIGN §" in text:
        bad.append("DESIGN.md (outside the repository: cite docs/design.md)")
    return bad


def doc_files(root: Path = ROOT) -> list[Path]:
    return [p for pattern in DOCS for p in sorted(root.glob(pattern))]


def uncited_results(root: Path = ROOT) -> list[str]:
    """The files of bench/results/ that no doc names, by path, by name or by a pattern (`*`, `name.*`)."""
    text = "\n".join(p.read_text() for p in doc_files(root))
    names = {n.rstrip(".") for n in re.findall(RESULTS + r"/([\w.*-]+)", text)} | set(DATED.findall(text))
    return sorted(f.name for f in (root / RESULTS).iterdir() if not any(fnmatch(f.name, n) for n in names))


def cited_files() -> list[str]:
    docs = doc_files()
    code = [p for top in TOPS for p in sorted((ROOT / top).rglob("*.py"))] + [ROOT / "app.py"]
    return [str(p.relative_to(ROOT)) for p in docs + code]


def test_the_reader_finds_missing_paths_results_and_design_notes(tmp_path) -> None:
    (tmp_path / "bench" / "results").mkdir(parents=True)
    (tmp_path / "bench" / "results" / "run_2026-01-02_h100.txt").write_text("")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "engine.md").write_text("")
    text = """See docs/engine.md and `docs/gone.md`, bench/results/run_2026-01-02_h100.txt, `run_2026-01-03_h100.json`,
    run_2026-01-02_h100.* and bench/results/run_*.txt; bench/results/<file> and https://x.org/docs/y.md are
    patterns; DESIGN.md §2 is not ours; tests/ is not here."""
    assert missing(text, tmp_path) == ["docs/gone.md", "tests/", "run_2026-01-03_h100.json (not in bench/results/)",
                                       "DESIGN.md (outside the repository: cite docs/design.md)"]


def test_python_text_is_docstrings_and_comments_not_code(tmp_path) -> None:
    path = tmp_path / "m.py"
    path.write_text('"""Module: bass/a.py."""\nX = "bass/b.py"  # bass/c.py\n\ndef f():\n    """bass/d.py"""\n')
    assert PATH.findall(python_text(path)) == ["bass/c.py", "bass/a.py", "bass/d.py"]


@pytest.mark.parametrize("name", cited_files())
def test_cited_paths_exist(name: str) -> None:
    path = ROOT / name
    text = path.read_text() if path.suffix == ".md" else python_text(path)
    bad = missing(text)
    assert not bad, f"{name} cites what the repository does not have: {', '.join(bad)}"


def test_every_result_file_is_cited() -> None:
    uncited = uncited_results()
    assert not uncited, f"bench/results/ keeps runs no doc cites (cite them or git rm them): {', '.join(uncited)}"


def test_the_result_check_finds_an_uncited_run(tmp_path) -> None:
    (tmp_path / "bench" / "results").mkdir(parents=True)
    for name in ("run_2026-01-02_h100.txt", "run_2026-01-02_h100.json", "old_2026-01-01_h100.txt", "x.log"):
        (tmp_path / "bench" / "results" / name).write_text("")
    (tmp_path / "README.md").write_text("See `run_2026-01-02_h100.*` and bench/results/x.log.")
    assert uncited_results(tmp_path) == ["old_2026-01-01_h100.txt"]
