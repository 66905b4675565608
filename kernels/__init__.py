"""Attention backends over the ragged layout of `kernels/layout.py`, selectable by name.

Every backend has the signature of `kernels.reference.ragged_attention_ref`:

    fn(q, prefix_k, prefix_v, prefix_len, seq_group, suffix_k, suffix_v, kv_len, q_len, scale, window=0)
        -> o [B, T, Hq, D]

    "torch"   the plain-torch reference (dense masks; the CPU default)
    "pad"     BASS-PAD: K/V padded to the longest sequence, two batched GEMMs
    "split"   BASS-SPLIT: per-sequence GEMMs on exact-length K/V, a host loop
    "ragged"  our Triton kernel: one launch (two with a KV split), prefix read in place

Triton is imported only when "ragged" is first called, so `import kernels` works where Triton
cannot compile (a CPU machine without TRITON_INTERPRET=1).
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch

from kernels.pad_attention import pad_attention
from kernels.reference import ragged_attention_ref
from kernels.split_attention import split_attention

AttentionFn = Callable[..., torch.Tensor]


def _ragged(*args, **kwargs) -> torch.Tensor:
    from kernels.ragged_attention import ragged_attention

    return ragged_attention(*args, **kwargs)


BACKENDS: dict[str, AttentionFn] = {
    "torch": ragged_attention_ref,
    "pad": pad_attention,
    "split": split_attention,
    "ragged": _ragged,
}


# backends that read the batch's lengths on the host (to size their padding, or to loop over sequences): a CUDA
# graph cannot capture a device-to-host read, so a graphed engine runs them eagerly (`bass.runtime.graphs`)
HOST_READING = ("pad", "split")


_HOST_READING_FNS = frozenset(BACKENDS[name] for name in HOST_READING)


def capturable(fn: AttentionFn) -> bool:
    """Whether a CUDA graph can capture attention backend `fn`: not one of `HOST_READING` (a set lookup: every
    graphed forward asks)."""
    return fn not in _HOST_READING_FNS


def available_backends(device: str | torch.device) -> list[str]:
    """Names in BACKENDS usable on `device`; "ragged" needs CUDA, or TRITON_INTERPRET=1 on the CPU."""
    device = torch.device(device)
    names = ["torch", "pad", "split"]
    if device.type == "cuda" or os.environ.get("TRITON_INTERPRET") == "1":
        try:
            import triton  # noqa: F401
        except ImportError:
            return names
        names.append("ragged")
    return names


def get_backend(name: str) -> AttentionFn:
    """The backend called `name`, with an error that lists the valid names."""
    if name not in BACKENDS:
        raise ValueError(f"unknown attention backend {name!r}: choose one of {sorted(BACKENDS)}")
    return BACKENDS[name]


__all__ = ["BACKENDS", "HOST_READING", "AttentionFn", "available_backends", "capturable", "get_backend"]
