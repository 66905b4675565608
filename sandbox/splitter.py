"""Split a test file into units that run and are counted one by one.

HumanEval's tests are one `check(candidate)` function made of many `assert`s; run as a whole, the first
failing assertion hides how many others would pass. We cut the file with `ast` instead:

- the file's top level, minus `def check` and any top-level call to `check(...)`, is *setup* (imports,
  METADATA, helpers) and runs first;
- each statement of `check`'s body that contains an `assert` is one *test*, counted on its own; a
  statement without one (`import math`, `xs = [...]`) is setup that later tests may rely on;
- a file without `check` is a script of plain asserts: each top-level statement with an `assert` is a test;
  if it calls `candidate` (without defining it), that name is bound to the entry point, as in `check`.

An assert that can fail reads a name (`assert f(2) == 5`, `assert ok`); one that reads none (`assert
True`, `assert 1 == 1`) tests nothing about the candidate and is dropped, and a bare comparison is not an
assert. A non-blank file left with no test at all is refused ("no tests"): it would pass any candidate.
Tests run in order in one namespace, so a unit sees the names the earlier units defined.

The tests are parsed here, in the caller's process, outside every limit of the sandbox: so a file over
`MAX_SOURCE_BYTES`, or nested more than `MAX_NESTING` levels deep (200,000 unary minuses, a sum of 200,000
terms: the parser's own recursion would end in RecursionError or MemoryError), is refused with ValueError.
"""

from __future__ import annotations

import ast
import builtins
import textwrap
from dataclasses import dataclass

from sandbox.config import MAX_SOURCE_BYTES

MAX_NESTING = 200  # syntax tree levels; HumanEval's deepest test has 11, Python's own parentheses stop at 200


@dataclass(frozen=True)
class Unit:
    """One statement (with its original line number) of a test file: a counted test or setup."""

    source: str
    lineno: int
    is_test: bool


@dataclass(frozen=True)
class TestPlan:
    """What the harness runs after the candidate: `units` in order, with `check`'s parameter bound."""

    units: tuple[Unit, ...]
    candidate_param: str | None  # the name `check` gives the candidate ("candidate"); None for plain asserts
    names: tuple[str, ...] = ()  # names the tests read that they may expect from the candidate's module

    @property
    def total(self) -> int:
        return sum(unit.is_test for unit in self.units)


def _can_fail(node: ast.Assert) -> bool:
    # Without a name, the test is a constant expression: its value cannot depend on the candidate.
    return any(isinstance(sub, ast.Name) for sub in ast.walk(node.test))


def _has_real_assert(node: ast.AST) -> bool:
    return any(isinstance(sub, ast.Assert) and _can_fail(sub) for sub in ast.walk(node))


def _is_constant_assert(node: ast.stmt) -> bool:
    return isinstance(node, ast.Assert) and not _can_fail(node)


def _is_check_call(node: ast.stmt) -> bool:
    return (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Name) and node.value.func.id == "check")


def _unit(source: str, node: ast.stmt, is_test: bool) -> Unit:
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    if first == node.lineno:
        # padded=True keeps the column, so dedent sees the statement's real indentation.
        text = ast.get_source_segment(source, node, padded=True) or ast.unparse(node)
    else:  # a decorated definition: the source segment would start at `def` and lose the decorators
        text = "\n".join(source.splitlines()[first - 1:node.end_lineno])
    return Unit(textwrap.dedent(text), first, is_test)


def _free_names(tree: ast.Module, candidate_param: str | None) -> tuple[str, ...]:
    # Every name read anywhere in the tests (more than they need is harmless), except builtins: a test's
    # `abs` or `len` is always the builtin, never a function of that name the candidate defines.
    read = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    return tuple(sorted(read - set(dir(builtins)) - {"check", candidate_param}))


def _nesting(tree: ast.AST) -> int:
    deepest, stack = 0, [(tree, 1)]
    while stack:  # iterative: the tree may be deeper than the interpreter's recursion limit
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return deepest


def parse_source(source: str, what: str) -> ast.Module:
    """`source` parsed, or ValueError saying what to change: larger than MAX_SOURCE_BYTES characters, nested
    deeper than MAX_NESTING, or not Python (then the error's `__cause__` is the SyntaxError)."""
    if len(source) > MAX_SOURCE_BYTES:
        raise ValueError(f"the {what} are {len(source):,} characters long, more than the {MAX_SOURCE_BYTES:,} the "
                         "sandbox reads: shorten them")
    try:
        tree = ast.parse(source, filename="tests.py")
    except SyntaxError as exc:
        raise ValueError(f"the {what} do not parse (line {exc.lineno}: {exc.msg}); fix the {what}") from exc
    except (RecursionError, MemoryError):
        raise ValueError(f"the {what} nest too deeply to parse: split long chains of operators and deeply "
                         "nested expressions") from None
    except ValueError as exc:  # e.g. a null byte, on this Python
        raise ValueError(f"the {what} do not parse ({exc}); fix the {what}") from None
    depth = _nesting(tree)
    if depth > MAX_NESTING:
        raise ValueError(f"the {what} nest {depth} levels deep, more than the {MAX_NESTING} the sandbox accepts: "
                         "split long chains of operators and deeply nested expressions")
    return tree


def defined_names(source: str | None) -> frozenset[str]:
    """Names a trusted source (a problem's helpers) binds at its top level: functions, classes, imports,
    assignments. Empty when it does not parse; ValueError when it is too large or too deep (parse_source)."""
    try:
        tree = parse_source(source or "", "helpers")
    except ValueError as exc:
        if isinstance(exc.__cause__, SyntaxError):
            return frozenset()
        raise
    names = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        else:
            names.update(sub.id for sub in ast.walk(node)
                         if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store))
    return frozenset(names)


def _checked(plan: TestPlan) -> TestPlan:
    if not plan.total:
        raise ValueError("no tests: the test file has no assert that can fail (an assert must read a name, e.g. "
                         "`assert candidate(2) == 5`; `assert True` and bare comparisons test nothing); add one, "
                         "or give no tests to only run the program")
    return plan


def split_tests(source: str | None) -> TestPlan:
    """Cut a test file into setup and counted test units (see the module docstring for the rules).

    `None` or a blank file gives a plan with no units: the candidate only has to run.
    Raises ValueError, naming the line, when the tests themselves do not parse, or are too large or too
    deep (parse_source), and ValueError ("no tests") when a non-blank file has no assert that can fail.
    """
    if source is None or not source.strip():
        return TestPlan((), None)
    tree = parse_source(source, "tests")
    checks = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"]
    if not checks:
        units = [_unit(source, n, _has_real_assert(n)) for n in tree.body if not _is_constant_assert(n)]
        read = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}
        param = "candidate" if "candidate" in read and "candidate" not in defined_names(source) else None
        return _checked(TestPlan(tuple(units), param, _free_names(tree, param)))
    check = checks[-1]
    if not check.args.args:
        raise ValueError("check() takes no argument: define it as `def check(candidate):`")
    setup = [_unit(source, n, False) for n in tree.body if n is not check and not _is_check_call(n)
             and not isinstance(n, ast.Assert)]
    body = [_unit(source, n, _has_real_assert(n)) for n in check.body
            if not _is_constant_assert(n) and not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
    return _checked(TestPlan(tuple(setup + body), check.args.args[0].arg, _free_names(tree, check.args.args[0].arg)))
