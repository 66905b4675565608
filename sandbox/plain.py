"""Plain data: the only values that cross between the candidate's process and the tests' process.

Plain data is `None`, `bool`, `int`, `float`, `complex`, `str`, `bytes`, and `tuple`, `list`, `dict`, `set`,
`frozenset` of plain data, each of exactly that type: no subclass, because a subclass can override `__eq__`
(or `__hash__`, `__len__`, `__iter__`) and make any comparison in a test come out True.

Why `marshal`, and why that is safe here: `marshal.loads` is C code that builds only builtin objects of a
fixed set of types and never calls a constructor, `__reduce__`, `__setstate__` or any other code of the
sender's choosing (pickle does all of those: never use it for this). So the worst a hostile byte string can
yield is a builtin value outside the plain set (a code object, `Ellipsis`, `StopIteration`, a slice), a
structure that contains itself (marshal has back-references), or an exception. `decode` therefore caps the
size before reading, and `check`s the result by exact type, rejecting cycles and nesting deeper than
`MAX_DEPTH`. Values are checked on both sides: the sender's check only words the error message (the
candidate's process may skip it), the receiver's is the one that protects the verdict.

Standard library only: `harness.py` loads this file as a top-level module inside the sandbox.
"""

from __future__ import annotations

import marshal

# Bound here, not looked up in `builtins` at each use: the candidate may patch builtins in its process,
# and its own replies should still be checked and encoded as before (the result is checked again anyway).
from builtins import getattr, id, len, map, set, type  # noqa: UP029 - on purpose, see above

SCALARS = frozenset({type(None), bool, int, float, complex, str, bytes})
CONTAINERS = frozenset({tuple, list, dict, set, frozenset})
MAX_DEPTH = 100  # no test compares data nested this deep; bounds the checker's recursion
MAX_BYTES = 32 << 20  # one value's encoded size; beyond it the value is refused, not truncated


class NotPlainDataError(ValueError):
    """A value that may not cross the boundary; `str()` describes it ("an instance of `Yes`")."""


def _type_name(kind: type) -> str:
    name = getattr(kind, "__qualname__", None)
    return name if type(name) is str else "?"


def _check(value: object, depth: int, active: set[int], seen: set[int]) -> None:
    kind = type(value)
    if kind in SCALARS:
        return
    if kind not in CONTAINERS:
        raise NotPlainDataError(f"an instance of `{_type_name(kind)}`")
    ident = id(value)
    if ident in seen:  # shared, not cyclic: checked once (keeps a diamond-shaped structure linear)
        return
    if ident in active:
        raise NotPlainDataError(f"a {kind.__name__} that contains itself")
    if depth >= MAX_DEPTH:
        raise NotPlainDataError(f"data nested more than {MAX_DEPTH} levels deep")
    parts = (value.keys(), value.values()) if kind is dict else (value,)
    active.add(ident)
    try:
        for part in parts:
            if set(map(type, part)) <= SCALARS:  # the common flat case, at C speed
                continue
            for item in part:
                try:
                    _check(item, depth + 1, active, seen)
                except NotPlainDataError as exc:
                    raise NotPlainDataError(f"a {kind.__name__} containing {exc}") from None
    finally:
        active.discard(ident)
    seen.add(ident)


def check(value: object) -> None:
    """Raise NotPlainDataError, saying what is wrong, unless `value` is plain data (see the module docstring)."""
    _check(value, 0, set(), set())


def encode(value: object) -> bytes:
    """The bytes of a plain value; NotPlainDataError if it is not plain data or encodes to more than MAX_BYTES."""
    check(value)
    try:
        data = marshal.dumps(value)
    except (ValueError, MemoryError) as exc:  # e.g. a huge value under the address-space limit
        raise NotPlainDataError(f"data that could not be encoded ({type(exc).__name__})") from None
    if len(data) > MAX_BYTES:
        raise NotPlainDataError(f"{len(data) >> 20} MB of data, more than the {MAX_BYTES >> 20} MB the sandbox passes")
    return data


def decode(data: bytes) -> object:
    """The plain value `data` encodes, rebuilt here; NotPlainDataError for anything else, whatever the bytes."""
    if len(data) > MAX_BYTES:
        raise NotPlainDataError(f"{len(data) >> 20} MB of data, more than the {MAX_BYTES >> 20} MB the sandbox passes")
    try:
        value = marshal.loads(data)
    except (ValueError, EOFError, TypeError, RecursionError, MemoryError) as exc:
        raise NotPlainDataError(f"malformed data ({type(exc).__name__})") from None
    check(value)
    return value
