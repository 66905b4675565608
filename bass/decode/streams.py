"""Per-sequence random streams: counter-based uniforms, reproducible from (seed, prompt, sample).

Each sequence draws from its own SplitMix64 stream, keyed by the request's seed and the sequence's
(prompt, sample) index. Draw j of a stream is computed directly from (key, j), on any device, so a
sequence's numbers never depend on which other sequences share its batch, on the batch's order, or on
where a round was cut: what keeps sampling reproducible when finished sequences leave the batch, when a
round is launched ahead and relaunched, and on CPU and GPU alike.
"""

from __future__ import annotations

import torch

from bass.runtime.transfer import to_device

_GOLDEN = 0x9E3779B97F4A7C15  # SplitMix64's increment
_MASK64 = (1 << 64) - 1


def _int64(x: int) -> int:
    """A 64-bit pattern as the signed value torch's int64 stores."""
    return x - (1 << 64) if x >= 1 << 63 else x


def _mix64_int(z: int) -> int:
    """SplitMix64's finaliser on a Python int (the host twin of `mix64`)."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def _shr(z: torch.Tensor, s: int) -> torch.Tensor:
    """Logical right shift of int64 bit patterns (torch's >> is arithmetic)."""
    return (z >> s) & ((1 << (64 - s)) - 1)


def mix64(z: torch.Tensor) -> torch.Tensor:
    """SplitMix64's finaliser on int64 tensors (multiplication wraps modulo 2^64, as on the host)."""
    z = (z ^ _shr(z, 30)) * _int64(0xBF58476D1CE4E5B9)
    z = (z ^ _shr(z, 27)) * _int64(0x94D049BB133111EB)
    return z ^ _shr(z, 31)


def stream_key(seed: int, prompt: int, sample: int) -> int:
    """The 64-bit state of sequence (prompt, sample)'s stream under `seed`."""
    h = _mix64_int((seed + _GOLDEN) & _MASK64)
    h = _mix64_int((h * _GOLDEN + prompt + 1) & _MASK64)
    return _mix64_int((h * _GOLDEN + sample + 1) & _MASK64)


def stream_uniforms(keys: torch.Tensor, start: int | torch.Tensor, n: int) -> torch.Tensor:
    """Draws start .. start+n-1 of the streams `keys` [B] int64: [B, n] float32 in [0, 1), multiples of 2^-24.
    `start` is one draw index for every row, or each row's own ([B] int64, on the keys' device).

    Draw j of a stream is SplitMix64's j-th output, mix64(key + (j + 1) * golden): a counter-based
    generator, so any draw is computed directly, on any device, without a generator object.
    """
    steps = torch.arange(1, n + 1, device=keys.device)  # [n]
    first = start[:, None] if isinstance(start, torch.Tensor) else start
    z = mix64(keys[:, None] + (first + steps[None, :]) * _int64(_GOLDEN))  # int64 products wrap like the host's
    return _shr(z, 40).float() * 2.0**-24


def row_keys(seed: int, keys: list[tuple[int, int]]) -> list[int]:
    """The stream states of sequences (prompt, sample) under `seed`, as the signed int64 values a tensor holds."""
    return [_int64(stream_key(seed, *k)) for k in keys]


def draw(streams: list[int], drawn: list[int], n: int, device: torch.device | str,
         keys: torch.Tensor | None = None) -> torch.Tensor:
    """[B, n] uniforms: row b's draws drawn[b] .. drawn[b] + n - 1 of its stream `streams[b]` (`row_keys`), in one
    set of kernels whatever the rows' positions. `keys`: `streams` already on the device (a batch keeps them)."""
    if not drawn:
        return torch.zeros(0, n, device=device)
    if keys is None:
        keys = to_device(torch.tensor(streams, dtype=torch.long), device)
    start = drawn[0] if all(d == drawn[0] for d in drawn) else to_device(torch.tensor(drawn, dtype=torch.long), device)
    return stream_uniforms(keys, start, n)


class RowDraws:
    """A batch's next draws, drawn ahead in blocks of `block` per row so that most rounds cost no kernel.

    Rows that advance together (one draft length for all) read the next columns of one block, a view; the block is
    drawn again, every row from its own position in one set of kernels (`draw`), when the batch's rows change,
    when its running rows fall out of step, or when one reaches the block's end. Finished rows riding along are
    not waited for: what they are handed is never read."""

    def __init__(self, block: int = 256):
        self.block = block
        self._rows: list | None = None  # the rows (`bass.decode.sequences.Sequence`) the block is of, in order
        self._keys: torch.Tensor | None = None  # [B] their streams on the device
        self._base: list[int] = []  # each row's draws before the block's first column
        self._data: torch.Tensor | None = None  # [B, W]

    def take(self, rows: list, n: int, device: torch.device | str) -> torch.Tensor:
        """[B, n]: each running row's draws drawn .. drawn + n - 1 (`Sequence.drawn`; the caller advances it)."""
        if self._rows is None or len(self._rows) != len(rows) or any(a is not b for a, b in zip(self._rows, rows,
                                                                                               strict=True)):
            self._rows, self._data = list(rows), None
            self._keys = to_device(torch.tensor([s.stream for s in rows], dtype=torch.long), device)
        offsets = {s.drawn - b for s, b in zip(rows, self._base, strict=False) if not s.finished}
        if self._data is not None and len(offsets) == 1 and 0 <= (off := offsets.pop()) <= self._data.shape[1] - n:
            return self._data[:, off:off + n]
        self._base = [s.drawn for s in rows]
        self._data = draw([], self._base, max(n, self.block), device, self._keys)
        return self._data[:, :n]
