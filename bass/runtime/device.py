"""Which device and dtype the engine runs on, and the line every result names it by."""

from __future__ import annotations

import datetime
import platform
from pathlib import Path

import torch


def resolve_device(device: str) -> torch.device:
    """The torch device for `EngineConfig.device`: "auto" takes CUDA where a GPU is visible, else the CPU; a CUDA
    device without a GPU is an error that says what to use instead."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device={device!r} but no CUDA GPU is visible: use device='cpu' or 'auto'")
    return torch.device(device)


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """The weights' dtype for `EngineConfig.dtype`: "auto" is bf16 on CUDA and, on the CPU, whichever of bf16 and
    float32 this CPU's projections run faster (`bass.models.linear.cpu_dtype`: bf16 where it has matrix units for
    it, float32 where its bf16 matmuls are slow); else the torch dtype of that name."""
    if dtype == "auto":
        if device.type == "cuda":
            return torch.bfloat16
        from bass.models.linear import cpu_dtype

        return cpu_dtype()
    return getattr(torch, dtype)


def device_line(device: torch.device) -> str:
    """What a result was measured on: the GPU's or CPU's name, the torch version and the date."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
    else:
        try:
            lines = Path("/proc/cpuinfo").read_text().splitlines()
            name = next(line.split(":", 1)[1].strip() for line in lines if line.startswith("model name"))
        except (OSError, StopIteration):
            name = platform.processor() or platform.machine()
        name = f"CPU {name}"
    return f"{name}, torch {torch.__version__}, {datetime.date.today().isoformat()}"
