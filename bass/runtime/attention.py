"""Attention backend dispatch: every backend has the signature of `kernels.reference.ragged_attention_ref`.

- "torch":  the plain-torch reference (dense masks; the CPU default)
- "pad":    BASS-PAD, K/V padded to the longest sequence, batched GEMMs
- "split":  BASS-SPLIT, one GEMM pair per sequence
- "ragged": our one-launch Triton kernel with the shared prompt prefix (CUDA; CPU under TRITON_INTERPRET=1)
- "auto":   "ragged" on CUDA, "torch" elsewhere (`resolve_backend`)
"""

from __future__ import annotations

from collections.abc import Callable

import torch

import kernels
from bass.config import BACKENDS


def resolve_backend(name: str, device: torch.device | str) -> str:
    """`name`, or for "auto" the device's own: our Triton kernel on CUDA (the reference's dense masks cost a GPU
    more than they cost a CPU), the torch reference elsewhere (the interpreter runs Triton on a CPU, slowly)."""
    if name != "auto":
        return name
    return "ragged" if torch.device(device).type == "cuda" and "ragged" in available_backends(device) else "torch"


def available_backends(device: torch.device | str) -> list[str]:
    """The backends that can run on `device`, in the order the UI should offer them."""
    have = set(kernels.available_backends(torch.device(device)))
    return [b for b in BACKENDS if b in have]


def get_backend(name: str, device: torch.device | str) -> Callable:
    """The attention function called `name`, or a ValueError saying which ones this machine has."""
    if name not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {name!r}")
    avail = available_backends(device)
    if name not in avail:
        hint = " (the Triton kernel needs a CUDA GPU, or TRITON_INTERPRET=1 on CPU)" if name == "ragged" else ""
        raise ValueError(f"attention backend {name!r} is not available on {device}{hint}: choose one of {avail}")
    return kernels.get_backend(name)
