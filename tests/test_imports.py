"""Imports point one way: no module of app/, bass/, kernels/, sandbox/, bench/ or draft_training/ imports one that
imports it back, and each package imports only from the layers below it: app → bass → kernels, and sandbox beneath
them all (app runs candidates in it, bass's evaluation judges with it), importing none of them; bench and
draft_training are tools on top of bass, which never imports them, and neither imports the app or the other.

Read from the source with `ast`, so every import counts: at the top of a module, inside a function (a deferred
import hides a circle, it does not remove one) and under `if TYPE_CHECKING:`. An import names the module it loads:
`from bass.config import X` the module `bass.config`, `from bass import drafters` the module `bass.drafters`,
`from bass import Engine` the package `bass` itself. The parent packages Python runs on the way are not counted:
each package's `__init__` is a table of contents that imports its children, not a layer.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECKED = ("app", "bass", "bench", "draft_training", "kernels", "sandbox")
# What each package may not import, whatever the module: the layers above it and the tools beside it.
TOOLS = ("bench", "draft_training")
FORBIDDEN = {
    "app": TOOLS,
    "bass": ("app", *TOOLS),
    "kernels": ("bass", "app", "sandbox", *TOOLS),
    "sandbox": ("bass", "app", "kernels", *TOOLS),
    "bench": ("app", "draft_training"),
    "draft_training": ("app", "bench"),
}


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(packages: Iterable[str] = CHECKED, root: Path = ROOT) -> dict[str, Path]:
    """Every module of the packages under `root`, by dotted name."""
    return {module_name(p, root): p for pkg in packages for p in sorted((root / pkg).rglob("*.py"))}


def imported(path: Path, known: dict[str, Path], root: Path = ROOT) -> set[str]:
    """The dotted names of the modules `path` imports, anywhere in it, relative imports resolved."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                out.add(sub if sub in known else base)
    return out


def import_graph(packages: Iterable[str] = CHECKED, root: Path = ROOT) -> dict[str, set[str]]:
    """module -> the modules of the checked packages it imports (itself left out)."""
    known = modules(packages, root)
    return {m: {t for t in imported(p, known, root) if t in known and t != m} for m, p in known.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted, largest first."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found, key=lambda c: (-len(c), c))


def describe(circle: list[str], graph: dict[str, set[str]]) -> str:
    inside = set(circle)
    return "; ".join(f"{m} -> {', '.join(sorted(graph[m] & inside))}" for m in circle)


def test_the_reader_finds_a_circle_made_of_deferred_and_type_checking_imports(tmp_path) -> None:
    """The reader itself: a circle closed by an import inside a function, and one under TYPE_CHECKING, are found;
    relative imports resolve to their modules."""
    pkg = tmp_path / "bass"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from bass.b import x\n")
    (pkg / "b.py").write_text("def f():\n    from . import a\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from bass.d import y\n")
    (pkg / "d.py").write_text("import bass.c\n")
    (pkg / "e.py").write_text("from .a import x\nfrom bass import d\n")
    graph = import_graph(["bass"], tmp_path)
    assert graph["bass.e"] == {"bass.a", "bass.d"}
    assert circles(graph) == [["bass.a", "bass.b"], ["bass.c", "bass.d"]]


def test_no_import_circles() -> None:
    graph = import_graph()
    assert {m.split(".")[0] for m, targets in graph.items() if targets} == set(CHECKED)  # every package was read
    found = circles(graph)
    assert not found, "import circles:\n" + "\n".join(describe(c, graph) for c in found)


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_imports_point_down(package: str) -> None:
    """A package imports nothing from the layers above it or the tools beside it (`FORBIDDEN`)."""
    known = modules([package])
    wrong = sorted(f"{m} imports {t}" for m, p in known.items() for t in imported(p, known)
                   if t.split(".")[0] in FORBIDDEN[package])
    assert not wrong, "\n".join(wrong)
