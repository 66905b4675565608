"""The channel between the candidate's process and the tests' process: calls go one way, plain data back.

The tests never hold an object of the candidate's: each function of the candidate's module that the tests
name is, on the tests' side, a proxy (`Candidate.proxy`) that sends the call's arguments over a socket and
rebuilds the result from plain data (see plain.py). So a result's `__eq__`, `__hash__` or `__bool__` always
belongs to a builtin type, and nothing the candidate does in its own process (patching builtins, finding
harness functions through `gc`) reaches the code that runs the tests or reports on them.

Messages are frames: a 4-byte length, then one plain value. Requests (tests -> candidate):
`("call", name, args, kwargs)` and `("finish",)`. Replies: `("return", value)`, `("raise", builtin
exception name, args)`, `("unsafe", what it was)`, `("flushed",)`. The candidate's side may send anything at
all; the tests' side checks every frame and turns whatever is not a well-formed reply into a failure.

Standard library only: `harness.py` loads this file as a top-level module inside the sandbox.
"""

from __future__ import annotations

# Bound at import (see plain.py): the candidate may patch `builtins` in its process.
import builtins
import importlib
import socket
import struct
import sys
import types
from builtins import bytearray, bytes, callable, getattr, isinstance, len, min, next, str, type  # noqa: UP029
from collections.abc import Callable

if __package__:
    from sandbox import plain
else:  # loaded by harness.py as a top-level module, next to plain.py
    import plain

_HEADER = struct.Struct("!I")
_PLAIN_NAMES = "None, bool, int, float, complex, str, bytes, and tuples, lists, dicts and sets of them"


class ChannelBrokenError(Exception):
    """The other side closed the channel, or sent bytes that are not a frame: nothing more can be read."""


class UnsafeResult(BaseException):
    """A candidate's result that is not plain data. Not an Exception: `except Exception` in a test must not
    turn it into a pass (the unit fails anyway, see Candidate.violation)."""


class UnsafeException(BaseException):
    """The candidate raised an exception that steers control flow rather than reports an error:
    `StopIteration` or `StopAsyncIteration` (raised through `map`, `filter` or `iter(f, x)` in a test, it
    ends the iteration early, so `all(map(candidate, xs))` is True and `for r in map(...)` asserts nothing),
    or a `BaseException` that is not an `Exception` (`GeneratorExit`, `KeyboardInterrupt`, `SystemExit`,
    which `except Exception` lets through). Raised in its place, it fails the test (see Candidate.violation)."""


class SuiteNeedsObjects(BaseException):
    """The tests pass something that is not plain data to the candidate: the suite cannot be run safely."""


class CandidateGone(BaseException):
    """The candidate's process ended or broke the channel during a call."""


def _read(sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(min(size - len(data), 1 << 20))
        if not chunk:
            raise ChannelBrokenError("closed its channel" + (" in the middle of a message" if data else ""))
        data += chunk
    return bytes(data)


def send(sock: socket.socket, message: object) -> None:
    """Send one plain value as a frame (NotPlainDataError if it is not plain)."""
    data = plain.encode(message)
    sock.sendall(_HEADER.pack(len(data)) + data)


def receive(sock: socket.socket) -> object:
    """Read one frame. ChannelBrokenError when no frame can be read; NotPlainDataError when a frame was read (the
    channel is still in step) but does not hold plain data."""
    try:
        (size,) = _HEADER.unpack(_read(sock, _HEADER.size))
        if size > plain.MAX_BYTES:
            raise ChannelBrokenError(f"sent a message of {size} bytes, more than the {plain.MAX_BYTES} allowed")
        data = _read(sock, size)
    except OSError as exc:
        raise ChannelBrokenError(f"broke its channel ({type(exc).__name__})") from None
    return plain.decode(data)


# ---- the candidate's side ------------------------------------------------------------------------------


def describe(namespace: dict, names: list[str]) -> dict[str, tuple]:
    """What the tests may use of the candidate's module: for each of `names` it defines, ("call",) for a
    callable, ("value", v) for plain data, ("module", name) for a module, ("object", type) otherwise."""
    found = {}
    for name in names:
        if name not in namespace:
            continue
        value = namespace[name]
        if isinstance(value, types.ModuleType):
            found[name] = ("module", str(getattr(value, "__name__", "")))
        elif callable(value):
            found[name] = ("call",)
        else:
            try:
                plain.check(value)
                found[name] = ("value", value)
            except plain.NotPlainDataError:
                found[name] = ("object", type(value).__name__)
    return found


def _raised(exc: BaseException) -> tuple:
    # The nearest builtin class: a custom subclass (with its own __eq__, __str__ ...) arrives as its builtin
    # base, so `except ValueError` in a test still catches what the candidate raised as ValueError.
    base = next((c for c in type(exc).__mro__ if getattr(builtins, c.__name__, None) is c), Exception)
    args = exc.args
    try:
        plain.check(args)
    except BaseException:  # noqa: B036 - whatever the candidate's objects do while being checked
        try:
            args = (str(exc),)
        except BaseException:  # noqa: B036
            args = ()
    return ("raise", base.__name__, args)


def serve(sock: socket.socket, functions: dict[str, Callable], flush: Callable[[], None]) -> None:
    """The candidate's loop: run each call the tests send, reply with plain data, until "finish"."""
    while True:
        request = receive(sock)
        if request == ("finish",):
            flush()
            send(sock, ("flushed",))
            return
        _, name, args, kwargs = request
        try:
            result = functions[name](*args, **kwargs)
        except BaseException as exc:  # noqa: B036 - SystemExit and friends are the candidate's answer too
            reply = _raised(exc)
        else:
            reply = ("return", result)
        try:
            plain.check(reply[-1])  # the value itself, so that the message names it, not the reply around it
            data = plain.encode(reply)
        except plain.NotPlainDataError as exc:
            data = plain.encode(("unsafe", str(exc)))
        except BaseException as exc:  # noqa: B036 - e.g. a metaclass whose __hash__ raises
            data = plain.encode(("unsafe", f"a value that could not be checked ({type(exc).__name__})"))
        sock.sendall(_HEADER.pack(len(data)) + data)


# ---- the tests' side -----------------------------------------------------------------------------------


def _tests_line() -> int | None:
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename != "tests.py":
        frame = frame.f_back
    return None if frame is None else frame.f_lineno


def rebuild_exception(name: object, args: object) -> BaseException:
    """A fresh builtin exception of the class named `name` (Exception if it names none) with `args`."""
    cls = getattr(builtins, name, None) if type(name) is str else None
    if not (isinstance(cls, type) and issubclass(cls, BaseException)):
        cls = Exception
    args = args if type(args) is tuple else ()
    for base in cls.__mro__:  # e.g. UnicodeDecodeError needs five arguments: fall back to a base class
        try:
            return base(*args)
        except Exception:
            continue
    return Exception(*args)


class Candidate:
    """The tests' handle on the candidate's process: proxies for its functions, and what went wrong.

    `violation` is set when a call broke the rules (an unsafe result, arguments that are not plain data);
    the harness fails the current test on it even if the test caught the exception. `gone` says why the
    channel is dead, once it is.
    """

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self.violation: dict[str, object] | None = None
        self.gone: str | None = None

    def _refuse(self, error: type[BaseException], message: str, suite: bool) -> BaseException:
        if self.violation is None:
            self.violation = {"line": _tests_line(), "message": f"{error.__name__}: {message}", "suite": suite}
        return error(message)

    def receive(self) -> object:
        """The next message from the candidate's process (CandidateGone once the channel is dead)."""
        if self.gone is not None:
            raise CandidateGone(self.gone)
        try:
            return receive(self._sock)
        except ChannelBrokenError as exc:
            self.gone = str(exc)
        except plain.NotPlainDataError as exc:
            self.gone = f"sent {exc} outside a reply"
        raise CandidateGone(self.gone)

    def call(self, name: str, args: tuple, kwargs: dict) -> object:
        """Call the candidate's `name` in its process; its result rebuilt here, or its exception raised."""
        if self.gone is not None:
            raise CandidateGone(self.gone)
        try:
            request = plain.encode(("call", name, args, kwargs))
        except plain.NotPlainDataError as exc:
            raise self._refuse(SuiteNeedsObjects, f"the tests pass {exc} to {name}(), but only plain data "
                               f"({_PLAIN_NAMES}) crosses to the candidate's process: this suite needs objects "
                               "shared with the candidate, which the sandbox cannot check safely", True) from None
        try:
            self._sock.sendall(_HEADER.pack(len(request)) + request)
            reply = receive(self._sock)
        except (ChannelBrokenError, OSError) as exc:
            self.gone = str(exc) if isinstance(exc, ChannelBrokenError) else f"broke its channel ({type(exc).__name__})"
            raise CandidateGone(self.gone) from None
        except plain.NotPlainDataError as exc:
            raise self._refuse(UnsafeResult, f"{name}() sent {exc}, which cannot be compared safely", False) from None
        kind = reply[0] if type(reply) is tuple and reply else None
        if kind == "return" and len(reply) == 2:
            return reply[1]
        if kind == "raise" and len(reply) == 3:
            raised = rebuild_exception(reply[1], reply[2])
            if isinstance(raised, StopIteration | StopAsyncIteration) or not isinstance(raised, Exception):
                raise self._refuse(UnsafeException, f"{name}() raised {type(raised).__name__}, which could end or "
                                   "escape the test's own control flow (an iteration stopping early)", False)
            raise raised
        if kind == "unsafe" and len(reply) == 2 and type(reply[1]) is str:
            raise self._refuse(UnsafeResult, f"{name}() returned {reply[1][:200]}, which cannot be compared safely",
                               False)
        raise self._refuse(UnsafeResult, f"{name}() sent a reply that is not one ({str(reply)[:100]})", False)

    def proxy(self, name: str) -> Callable[..., object]:
        """A function for the tests' namespace that calls the candidate's `name` across the boundary."""
        call = self.call

        def proxy(*args: object, **kwargs: object) -> object:
            return call(name, args, kwargs)

        proxy.__name__ = proxy.__qualname__ = name
        return proxy

    def bind(self, found: object, wanted: list[str]) -> tuple[dict[str, object], dict[str, str]]:
        """Names for the tests' namespace from the candidate's `describe` reply, and the names of objects
        that stay behind (type name each), so a test using one gets a clear error instead of NameError."""
        bound: dict[str, object] = {}
        left: dict[str, str] = {}
        if type(found) is not dict:
            return bound, left
        for name in wanted:
            entry = found.get(name)
            if type(entry) is not tuple or not entry or hasattr(builtins, name):
                continue  # a builtin the tests use stays the builtin, whatever the candidate defined
            if entry == ("call",):
                bound[name] = self.proxy(name)
            elif entry[0] == "value" and len(entry) == 2:
                bound[name] = entry[1]
            elif entry[0] == "module" and len(entry) == 2 and entry[1] in sys.stdlib_module_names:
                # Our own import of the module it names, never its object; standard library only.
                try:
                    bound[name] = importlib.import_module(entry[1])
                except Exception:  # noqa: S112 - an unusable name just stays unbound
                    continue
            elif entry[0] == "object" and len(entry) == 2 and type(entry[1]) is str:
                left[name] = entry[1][:100]
        return bound, left

    def finish(self) -> None:
        """Have the candidate flush its output and stop; CandidateGone if it cannot."""
        if self.gone is not None:
            raise CandidateGone(self.gone)
        try:
            send(self._sock, ("finish",))
        except OSError:
            self.gone = "closed its channel"
            raise CandidateGone(self.gone) from None
        if self.receive() != ("flushed",):
            self.gone = "did not answer the end of the tests"
            raise CandidateGone(self.gone)
