"""bass/runtime/device.py: the device and dtype an engine config names, and the line results are labelled with."""

import datetime

import pytest
import torch

from bass.runtime.device import device_line, resolve_device, resolve_dtype


def test_auto_takes_what_is_there_and_a_missing_gpu_says_what_to_use(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")
    with pytest.raises(ValueError, match="no CUDA GPU is visible: use device='cpu' or 'auto'"):
        resolve_device("cuda:0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto") == torch.device("cuda")
    assert resolve_device("cpu") == torch.device("cpu")


def test_auto_dtype_is_bf16_on_cuda_and_on_the_cpu_what_it_measured(monkeypatch):
    from bass.models import linear

    assert resolve_dtype("auto", torch.device("cuda")) == torch.bfloat16
    monkeypatch.setattr(linear, "cpu_dtype", lambda: torch.bfloat16)
    assert resolve_dtype("auto", torch.device("cpu")) == torch.bfloat16
    monkeypatch.setattr(linear, "cpu_dtype", lambda: torch.float32)
    assert resolve_dtype("auto", torch.device("cpu")) == torch.float32
    assert resolve_dtype("float16", torch.device("cpu")) == torch.float16


def test_the_cpu_line_names_the_processor_torch_and_the_date():
    line = device_line(torch.device("cpu"))
    assert line.startswith("CPU ") and f"torch {torch.__version__}" in line
    assert line.endswith(datetime.date.today().isoformat())
