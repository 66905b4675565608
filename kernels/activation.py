"""Gated activation of the fused gate/up projection in one Triton launch: act(gate) * up.

For each row z = [gate | up] ([2I], the output of `GatedMLP.gate_up_proj`) and j < I:

    SwiGLU:  a_j = round(g_j * sigmoid(g_j))                                    (torch's silu)
    GeGLU:   a_j = round(g_j / 2 * (1 + tanh(sqrt(2/pi) * (g_j + 0.044715 g_j^3))))  (gelu, tanh form)
    out_j    = round(a_j * u_j)

computed in float32, round() the cast to z's dtype, as the torch path (chunk, act, mul: two launches
and an intermediate tensor) rounds after the activation and after the product. GeGLU uses the identity
(1 + tanh(y)) / 2 = sigmoid(2y), so a = g / (1 + e^{-2y}): only exp is needed, and unlike
1 + (1 - 2 / (1 + e^{2y})) it does not cancel for negative y (that form flipped 1.5% of the bf16
outputs against torch on the H100). Both tails are exact: e^{-2y} = inf gives -0, 0 gives g.

Grid: (rows, column tiles). No host synchronisation (CUDA-graph safe).
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from kernels.pdl import enter, launch_args

_empty = torch.empty  # tests swap in a NaN-filled allocator to catch unwritten outputs
BLOCK = 1024
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


@triton.jit
def _gated_act_fwd(Z, OUT, INTER, GELU: tl.constexpr, SQRT_2_PI: tl.constexpr, BLOCK_I: tl.constexpr,
                   PDL: tl.constexpr):
    enter(PDL)
    row = tl.program_id(0).to(tl.int64)
    j = tl.program_id(1) * BLOCK_I + tl.arange(0, BLOCK_I)
    ok = j < INTER
    g = tl.load(Z + row * 2 * INTER + j, mask=ok, other=0.0).to(tl.float32)  # [BLOCK_I]
    u = tl.load(Z + row * 2 * INTER + INTER + j, mask=ok, other=0.0).to(tl.float32)
    if GELU:
        y = SQRT_2_PI * (g + 0.044715 * g * g * g)
        a = g / (1.0 + tl.exp(-2.0 * y))
    else:
        a = g / (1.0 + tl.exp(-g))
    dt = OUT.dtype.element_ty
    out = a.to(dt).to(tl.float32) * u
    tl.store(OUT + row * INTER + j, out.to(dt), mask=ok)


def gated_act_fused(gate_up: torch.Tensor, gelu: bool = False) -> torch.Tensor:  # [..., 2I] -> [..., I]
    """act(gate) * up of the fused gate/up output (gate first), as in the module docstring."""
    if gate_up.shape[-1] % 2:
        raise ValueError(f"the last dim holds [gate | up] and must be even, got {gate_up.shape[-1]}")
    gate_up = gate_up.contiguous()  # a no-op for a Linear's output
    inter = gate_up.shape[-1] // 2
    out = _empty((*gate_up.shape[:-1], inter), dtype=gate_up.dtype, device=gate_up.device)
    rows = gate_up.numel() // (2 * inter) if inter else 0
    if rows == 0:
        return out
    block = min(BLOCK, triton.next_power_of_2(inter))
    _gated_act_fwd[(rows, triton.cdiv(inter, block))](
        gate_up, out, inter, GELU=gelu, SQRT_2_PI=SQRT_2_OVER_PI, BLOCK_I=block, num_warps=4,
        **launch_args(gate_up.device),
    )
    return out


def gated_act_ref(gate_up: torch.Tensor, gelu: bool = False) -> torch.Tensor:
    """Plain-torch twin: the body of `bass.models.layers.GatedMLP` before the down projection."""
    gate, up = gate_up.chunk(2, dim=-1)
    act = torch.nn.functional.gelu(gate, approximate="tanh") if gelu else torch.nn.functional.silu(gate)
    return act * up


__all__ = ["gated_act_fused", "gated_act_ref"]
