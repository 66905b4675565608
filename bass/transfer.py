"""Host-to-device copies that do not stall the round loop: the ints and token ids a round hands the device.

A pageable copy to CUDA waits for the stream, and in the round loop the stream runs a round ahead
(`bass.speculative`, look-ahead), so every copy here goes through pinned memory, asynchronously.
"""

from __future__ import annotations

from collections.abc import Sequence as Rows

import torch


def to_device(values: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """A host tensor on `device` without stalling the host: on CUDA through pinned memory and an
    asynchronous copy (a pageable copy waits for the stream, and in the round loop the stream runs a step
    ahead). The pinned block comes from torch's caching host allocator, which reuses it only after the
    copy has run, so a call never overwrites the data of one still queued."""
    device = torch.device(device)
    if device.type != "cuda":
        return values.to(device)
    return values.pin_memory().to(device, non_blocking=True)


def ints_to_device(values: Rows[int], device: torch.device | str) -> torch.Tensor:
    """values as a [len] int64 tensor on `device` (`to_device`)."""
    return to_device(torch.tensor(list(values), dtype=torch.long), device)


def padded_ids(rows: Rows[Rows[int]], width: int | None = None, device: torch.device | str = "cpu") -> torch.Tensor:
    """[len(rows), width] int64 on `device`: row b holds rows[b], then zeros (width: the longest row's).

    How a ragged batch of token ids becomes a forward's input; the zeros are padding past each q_len."""
    width = max(map(len, rows), default=0) if width is None else width
    ids = torch.tensor([list(r) + [0] * (width - len(r)) for r in rows], dtype=torch.long).view(len(rows), width)
    return to_device(ids, device)
