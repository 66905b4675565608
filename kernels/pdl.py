"""Programmatic dependent launch (PDL): a kernel starts while the kernel before it finishes.

A decode step of the 1.5B target is about 330 kernels replayed from one CUDA graph, most of them a few
µs long. Between two of them the GPU drains the first (its last programs, then a memory flush), then
launches the second and schedules its programs; on the H100 the step's kernels kept the device busy
1.99 ms of a 2.18 ms step (`python -m bench.profile steps`, its forward view).

On Hopper a kernel launched with the attribute CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
(Triton: `launch_pdl=True`) may start once every program of the kernel before it in the stream has run
`griddepcontrol.launch_dependents` or exited. Before it reads anything that kernel wrote, or writes
anything it reads, it must run `griddepcontrol.wait`, which returns once that kernel has completed and
its writes are visible. Every one of our decode kernels (projections, norms, RoPE, the activation,
attention) begins with `enter`:

    wait    launch_dependents    [the work]

so the next kernel is launched and its programs are resident, waiting, while this one works. The chain
stays ordered: a kernel can start only after the one before it has passed its wait, so by then every
kernel before that one has completed, and its own wait covers the one just before. A kernel launched
without the attribute (cuBLAS, torch's) waits for everything before it, as always; one launched with it
after such a kernel starts when that kernel exits (it never calls launch_dependents).

Measured on the H100, the 1.5B target's forward in a CUDA graph, with the projections tuned under PDL as the
engine tunes them: 1.937 → 1.767 ms at batch 8 (1.10x), 2.067 → 1.944 at batch 32 (1.06x) (`python -m
bench.profile steps`, its forward view, with BASS_PDL=0 and without); end to end, regular decoding at k = 8 went
from 2.02 to 1.88 ms/step (`python -m bench.real_bench`, the same two ways). Reading each projection's weight into
L2 before the wait (an inline-asm prefetch, so that the read overlaps the tail of the kernel before) made it slower
instead, 2.076 ms at batch 8 against 1.782 without: the kernel before is memory-bound too, and the two compete for
the same bandwidth.

PDL needs compute capability 9.0. Elsewhere, in the Triton interpreter (which has no griddepcontrol) and
with BASS_PDL=0 in the environment, `launch_args` turns it off and the kernels run exactly as before. Only
when kernels start changes, never what they compute.
"""

from __future__ import annotations

import functools
import os

import torch
import triton
import triton.language as tl

# BASS_PDL=0 in the environment switches it off (to compare, or on a driver that rejects it); benchmarks and
# tests set it. Read at each launch: a captured graph keeps the launches it was captured with.
ENABLED = os.environ.get("BASS_PDL", "1") != "0"
# Triton decides between compiling and interpreting once, when it is imported: so does this module
_INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


@functools.lru_cache(maxsize=16)
def _supported(index: int) -> bool:
    return torch.cuda.get_device_capability(index) >= (9, 0)


def active(device: torch.device) -> bool:
    """Whether kernels launched on `device` now use PDL: ENABLED, CUDA of compute capability >= 9.0,
    and not the Triton interpreter."""
    if not ENABLED or device.type != "cuda" or _INTERPRETED:
        return False
    return _supported(device.index if device.index is not None else torch.cuda.current_device())


def launch_args(device: torch.device) -> dict[str, bool]:
    """The keyword arguments of a launch of a kernel that begins with `enter`: its PDL constexpr and
    Triton's `launch_pdl` launch option, both `active(device)`."""
    on = active(device)
    return {"PDL": on, "launch_pdl": on}


@triton.jit
def enter(PDL: tl.constexpr):
    """Wait for the kernel before (its writes visible), then let the kernel after launch (module docstring)."""
    if PDL:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()


__all__ = ["ENABLED", "active", "enter", "launch_args"]
