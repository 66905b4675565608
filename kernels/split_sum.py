"""A split-K projection's unsummed slices: what `kernels.skinny_gemm` hands the kernel that reads y next.

A projection with few output columns and a long K splits K over S programs per column tile, each writing
a float32 partial sum, and a second launch sums them (`kernels.skinny_gemm`):

    y = round(Σ_{s=0}^{S-1} ws[s] + bias)          ws [S, M, N] float32; round(): the cast to x's dtype

Where the only reader of y is a kernel that loads whole rows anyway (a block's o and down projections feed
the residual add and RMSNorm after them, `kernels.rmsnorm`), that kernel sums the slices itself, in the
same order with the same cast, and the second launch is never made: the same bits, one launch fewer per
projection. Anything else reads `total()`, the second launch, which the kernel that made the slices hands over
(`summed_by`). The definition lives here, apart from the kernels, so that the model code can recognise one without
importing Triton (slow to import on a CPU).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SplitSum:
    """y of the module docstring, not summed yet."""

    ws: torch.Tensor  # [S, M, N] float32: slice s is the product over K's s-th slice
    bias: torch.Tensor | None  # [N]
    shape: tuple[int, ...]  # y's shape [..., N] (M = the product of all but the last)
    dtype: torch.dtype  # y's dtype (x's): what the sum is rounded to
    # the second launch: summed_by(ws, bias, y [M, N], like) writes Σ_s ws[s] (+ bias), rounded to like's dtype, to y
    summed_by: Callable[[torch.Tensor, torch.Tensor | None, torch.Tensor, torch.Tensor], None]

    def total(self) -> torch.Tensor:
        """y itself, by the second launch, for a reader that does not sum the slices."""
        y = torch.empty(self.ws.shape[1:], dtype=self.dtype, device=self.ws.device)  # [M, N]
        self.summed_by(self.ws, self.bias, y, y)
        return y.view(self.shape)


def materialize(y: torch.Tensor | SplitSum) -> torch.Tensor:
    """y as a tensor, summing a `SplitSum`'s slices if it is one."""
    return y.total() if isinstance(y, SplitSum) else y
