"""Copies between host and device that do not stall the round loop: the ints and token ids a round hands the
device, and a read that waits for its own copy only.

A pageable copy to CUDA waits for the stream, and in the round loop the stream runs a round ahead
(`bass.decode.pipeline`, look-ahead), so every copy here goes through pinned memory, asynchronously. A read of device
values (`HostRead`) likewise waits for the copy that fetched them, not for the work queued after it.

A drafting round makes about four such copies of a few dozen ints (cache lengths, row indices, token
ids). Pinning each one anew (`Tensor.pin_memory`: a block from torch's caching host allocator and its
bookkeeping) took about 23 µs of the 78 µs a copy cost the H100's host under cProfile (`python -m bench.profile
host`, its python view). So ints go through `PinnedRing`: one pinned buffer, written in place, whose slices are
reused only once the copies that read them have run (70 µs a copy under the same profile). Copies are made on
the current stream, as the round loop's are.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence as Rows

import torch


class PinnedRing:
    """Staging for small int64 host-to-device copies: consecutive slices of one pinned buffer.

    A slice may be written again only after the copy that read it has run. The buffer is cut in two
    halves; when the writes move from half h to the other one, an event is recorded on the stream, after
    every copy out of half h. Writing into half h again first waits for that event, which by then has
    long passed (a half holds `size / 2` ints: hundreds of rounds' copies), so the host never stalls in
    practice and no copy still queued is ever overwritten.

    `pinned=False` (the CPU twin) runs the same slicing over an ordinary buffer, with copies made
    synchronously and no events.
    """

    def __init__(self, device: torch.device, size: int = 1 << 16, pinned: bool = True):
        if size < 2:
            raise ValueError(f"a PinnedRing needs at least 2 entries, got {size}")
        self.device, self.size, self.half, self.pinned = device, size, size // 2, pinned
        self.buffer = torch.empty(size, dtype=torch.long, pin_memory=pinned)  # [size]
        self._host = self.buffer.numpy()  # the same memory: a Python list is written fastest through numpy
        self.head = 0  # the next free entry
        self.left: list[torch.cuda.Event | None] = [None, None]  # per half: recorded when the writes left it
        self.lock = threading.Lock()  # engines in several threads may share one device's ring

    def copy(self, values: Rows[int] | torch.Tensor) -> torch.Tensor:
        """values as an int64 tensor [n] on the ring's device, without waiting for the stream (n <= size/2)."""
        n = len(values)
        if n > self.half:
            raise ValueError(f"{n} ints do not fit half a PinnedRing of {self.size}: copy them another way")
        with self.lock:
            start = self._claim(n)
            self._host[start:start + n] = values.numpy() if isinstance(values, torch.Tensor) else values
            view = self.buffer[start:start + n]
            if not self.pinned:
                return view.clone().to(self.device)
            return view.to(self.device, non_blocking=True)

    def _claim(self, n: int) -> int:
        """The first entry of n free ones, moving to the other half (and waiting for it) if this one is full."""
        start = self.head
        h = min(start // self.half, 1)
        if start + n > (h + 1) * self.half:
            other = 1 - h
            if self.pinned:
                self.left[h] = torch.cuda.Event()
                self.left[h].record(torch.cuda.current_stream(self.device))
                if self.left[other] is not None:
                    self.left[other].synchronize()
            start = other * self.half
        self.head = start + n
        return start


class HostRead:
    """A device tensor's values for the host, fetched without waiting: the copy is queued into pinned memory (a
    non-blocking copy to the CPU allocates it pinned) with an event after it, and `tolist` waits for that event
    alone, while the work queued after the copy runs on. On the CPU it holds a copy of the values: either way,
    what the tensor held when the read was made."""

    def __init__(self, values: torch.Tensor):
        self.ready: torch.cuda.Event | None = None
        if values.is_cuda:
            self.values = values.to("cpu", non_blocking=True)
            self.ready = torch.cuda.Event()
            self.ready.record()
        else:
            self.values = values.clone()

    def wait(self) -> float:
        """Block until the copy has run; the seconds the host was blocked (0 on the CPU)."""
        if self.ready is None:
            return 0.0
        blocked = time.perf_counter()
        self.ready.synchronize()
        return time.perf_counter() - blocked

    def tolist(self) -> list:
        """The values as a list, once their copy has run."""
        self.wait()
        return self.values.tolist()


_RINGS: dict[torch.device, PinnedRing] = {}
_RINGS_LOCK = threading.Lock()


def ring(device: torch.device) -> PinnedRing:
    """The process's staging ring for copies to CUDA `device` (made on first use)."""
    if device.index is None:
        device = torch.device(device.type, torch.cuda.current_device())
    with _RINGS_LOCK:
        if device not in _RINGS:
            _RINGS[device] = PinnedRing(device)
        return _RINGS[device]


def to_device(values: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """A host tensor on `device` without stalling the host: on CUDA through pinned memory and an
    asynchronous copy (a pageable copy waits for the stream, and in the round loop the stream runs a step
    ahead). int64 vectors go through the device's `PinnedRing`; anything else is pinned anew, in a block
    of torch's caching host allocator, which reuses it only after the copy has run."""
    device = torch.device(device)
    if device.type != "cuda":
        return values.to(device)
    if values.dtype == torch.long and values.dim() == 1:
        return _staged(values, device)
    return values.pin_memory().to(device, non_blocking=True)


def ints_to_device(values: Rows[int], device: torch.device | str) -> torch.Tensor:
    """values as a [len] int64 tensor on `device` (`to_device`)."""
    device = torch.device(device)
    if device.type != "cuda":
        return torch.tensor(list(values), dtype=torch.long, device=device)
    return _staged(list(values), device)


def _staged(values: list[int] | torch.Tensor, device: torch.device) -> torch.Tensor:
    """int64 values [n] on CUDA `device`: through its `PinnedRing`, or pinned anew if they do not fit half of it."""
    staging = ring(device)
    if len(values) <= staging.half:
        return staging.copy(values)
    return torch.as_tensor(values, dtype=torch.long).pin_memory().to(device, non_blocking=True)


def padded_ids(rows: Rows[Rows[int]], width: int | None = None, device: torch.device | str = "cpu") -> torch.Tensor:
    """[len(rows), width] int64 on `device`: row b holds rows[b], then zeros (width: the longest row's).

    How a ragged batch of token ids becomes a forward's input; the zeros are padding past each q_len."""
    width = max(map(len, rows), default=0) if width is None else width
    flat = [t for r in rows for t in (*r, *([0] * (width - len(r))))]
    return ints_to_device(flat, device).view(len(rows), width)
