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


def stream_uniforms(keys: torch.Tensor, start: int, n: int) -> torch.Tensor:
    """Draws start .. start+n-1 of the streams `keys` [B] int64: [B, n] float32 in [0, 1), multiples of 2^-24.

    Draw j of a stream is SplitMix64's j-th output, mix64(key + (j + 1) * golden): a counter-based
    generator, so any draw is computed directly, on any device, without a generator object.
    """
    steps = (torch.arange(start + 1, start + n + 1, device=keys.device) * _int64(_GOLDEN))  # wraps like the host
    z = mix64(keys[:, None] + steps[None, :])
    return _shr(z, 40).float() * 2.0**-24


class SequenceRNG:
    """Independent uniform streams, one per sequence, reproducible from (seed, prompt, sample).

    Counter-based (`stream_uniforms`): the j-th draw of a sequence depends only on the seed, its key and
    j, never on the batch it is drawn with. The draws are made on the device in blocks of `block`
    per sequence ahead of use, so a round costs no host-to-device copy and usually no kernel either.
    """

    def __init__(self, seed: int, keys: list[tuple[int, int]], block: int = 256):
        self.seed, self.block = seed, block
        self._drawn = {key: 0 for key in keys}  # draws consumed per sequence
        self._cache: tuple | None = None  # (keys, device, first draw, [B, width] uniforms)

    def uniforms(self, keys: list[tuple[int, int]], n: int, device: torch.device | str) -> torch.Tensor:
        """[len(keys), n] uniforms in [0, 1); each row advances only its own sequence's stream."""
        starts = [self._drawn[k] for k in keys]
        for k in keys:
            self._drawn[k] += n
        if not keys:
            return torch.zeros(0, n, device=device)
        start, device = starts[0], torch.device(device)
        if any(s != start for s in starts):  # rows at different points of their streams: draw them one by one
            return torch.cat([self._draw([k], s, n, device) for k, s in zip(keys, starts, strict=True)])
        c = self._cache
        if c is None or c[0] != keys or c[1] != device or not c[2] <= start or start + n > c[2] + c[3].shape[1]:
            c = self._cache = (list(keys), device, start, self._draw(keys, start, max(n, self.block), device))
        return c[3][:, start - c[2]:start - c[2] + n]

    def _draw(self, keys: list[tuple[int, int]], start: int, n: int, device: torch.device) -> torch.Tensor:
        state = torch.tensor([_int64(stream_key(self.seed, *k)) for k in keys], dtype=torch.long)
        return stream_uniforms(to_device(state, device), start, n)
